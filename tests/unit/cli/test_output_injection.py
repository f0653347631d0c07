"""Output that cannot forge lines: whatever a file name, an object name, a field path or a
message holds, the text output has one line per problem, no control character and no CI
workflow command; JSON and YAML give every file name back, including names that are not
UTF-8."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kai.cli import main
from kai.commands._console import Style
from kai.commands._output import to_json, to_yaml
from kai.commands.plan import for_people
from kai.gitops.problems import Problem, printable
from kai.insight.plan import FieldChange, Plan, QueuePlan, markdown, text

# Anything a file or document may hold, control characters and surrogates included.
ANY_TEXT = st.text(
    alphabet=st.characters(codec=None, categories=None, exclude_characters=()), max_size=40
) | st.sampled_from(
    [
        "\n::error file=ok.yaml::forged",
        "::add-mask::x",
        "##[error]x",
        "ok.yaml:1:1: error: [yaml] x\r\nok.yaml",
        "\x1b[2J\x1b[H",
        "a\x85b\u2028c\u202ed\x9b",
        "name\udcff\udc80.yaml",
        "  ::warning::x",
    ]
)
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
COMMAND = re.compile(r"^\s*(::|##\[)")


def _is_safe_line(line: str) -> bool:
    return CONTROL.search(line) is None and COMMAND.match(line) is None


@settings(max_examples=400, deadline=None)
@given(
    file=ANY_TEXT,
    obj=st.none() | ANY_TEXT,
    path=st.none() | ANY_TEXT,
    message=ANY_TEXT,
    colour=st.booleans(),
)
def test_one_line_per_problem_and_nothing_a_terminal_or_ci_would_obey(
    file: str, obj: str | None, path: str | None, message: str, colour: bool
) -> None:
    problems = [
        Problem(file, 3, 4, "error", "schema", obj, path, message),
        Problem("ok.yaml", 1, 1, "warning", "yaml", None, None, message),
    ]
    style = Style(colour)
    out = "".join(style.problem(p) + "\n" for p in problems)
    if colour:
        out = re.sub(r"\x1b\[[0-9;]*m", "", out)  # our own colours are the only escapes
    lines = out.split("\n")[:-1]
    assert len(lines) == len(problems)
    assert all(_is_safe_line(line) for line in lines), lines
    assert lines[0].endswith(printable(message))


@settings(max_examples=200, deadline=None)
@given(name=ANY_TEXT)
def test_json_and_yaml_give_any_name_back(name: str) -> None:
    document = {"problems": [{"file": name, "message": name}]}
    for rendered in (to_json(document), to_json(document, compact=True)):
        assert CONTROL.search(rendered.replace("\n", "")) is None
        assert json.loads(rendered) == document
    rendered = to_yaml(document)
    rendered.encode("utf-8")  # always writable
    assert CONTROL.search(rendered.replace("\n", "")) is None
    assert yaml.safe_load(rendered) == document


@pytest.mark.skipif(sys.platform != "linux", reason="file names as bytes")
@pytest.mark.parametrize("output", ["json", "yaml", "text"])
def test_a_file_name_that_is_not_utf8(
    tmp_path: Path, output: str, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    raw = os.fsencode(str(tmp_path)) + b"/bad\xff\x1b[2J\nname.yaml"
    with open(raw, "wb") as handle:
        handle.write(b"kind: [unclosed\n")
    code = main(["validate", "-o", output, str(tmp_path)])
    assert code == 1
    out = capsysbinary.readouterr().out
    name = os.fsdecode(raw)
    if output == "json":
        [problem] = json.loads(out)["problems"]
        assert os.fsencode(problem["file"]) == raw
    elif output == "yaml":
        [problem] = yaml.safe_load(out)["problems"]
        assert os.fsencode(problem["file"]) == raw
    else:
        [line] = out.decode("utf-8").splitlines()
        assert line.startswith(printable(name) + ":2:1: error: [yaml]")
        assert "bad\\xff\\x1b[2J\\x0aname.yaml" in line


def test_the_plan_for_people_escapes_values_written_in_documents() -> None:
    value = "team\n::error::forged | <b>x</b> [link](http://e) `code`\x1b[2J"
    plan = Plan(
        [QueuePlan("a", "changed", [FieldChange("spec.displayName", "old", value)])], [], False
    )
    shown_text = text(for_people(plan, markdown=False))
    assert all(_is_safe_line(line) for line in shown_text.splitlines())
    assert "::error::forged" in shown_text  # kept, but never at a line start
    table = markdown(for_people(plan, markdown=True))
    row = next(line for line in table.splitlines() if line.startswith("| `a`"))
    assert row.count(" | ") == 2  # the value added no column
    assert "<b>x" not in row and "&lt;b&gt;x" in row
    assert "\\[link\\](http" in row  # no link
    assert plan.queues[0].changes[0].after == value  # the JSON keeps the value itself

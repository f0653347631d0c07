"""``-o text|json|yaml`` on every command that prints data, and colour on terminals only."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from kai import cli
from kai.commands._console import Style, colour_wanted, table
from kai.commands._output import render, to_json, to_yaml

ROOT = Path(__file__).resolve().parents[3]
GITOPS = str(ROOT / "examples" / "gitops")
BROKEN = str(ROOT / "examples" / "gitops-broken")
SCENARIO = str(ROOT / "tests" / "scenarios" / "reclaim" / "basic_two_queues.yaml")
ESC = "\x1b["


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_renderer() -> None:
    document = {"b": [1, {"ü": None}], "a": True}
    assert (
        to_json(document)
        == '{\n  "b": [\n    1,\n    {\n      "ü": null\n    }\n  ],\n  "a": true\n}\n'
    )
    assert to_json(document, compact=True) == '{"b":[1,{"ü":null}],"a":true}\n'
    assert to_yaml(document) == "b:\n- 1\n- ü: null\na: true\n"
    assert render(document, "text", lambda: "t\n") == "t\n"
    with pytest.raises(ValueError, match="unknown output format 'xml'"):
        render(document, "xml", lambda: "")


def test_validate_json_and_yaml_carry_one_document(capsys: pytest.CaptureFixture[str]) -> None:
    code, as_json, err = run(capsys, "validate", BROKEN, "-o", "json")
    assert code == 1 and err == ""
    code, as_yaml, err = run(capsys, "validate", BROKEN, "--output", "yaml")
    assert code == 1 and err == ""
    document = json.loads(as_json)
    assert yaml.safe_load(as_yaml) == document
    assert list(document) == ["ok", "documents", "problems"] and document["ok"] is False
    assert {p["severity"] for p in document["problems"]} == {"error", "warning"}


def test_simulate_formats(capsys: pytest.CaptureFixture[str]) -> None:
    code, as_json, _ = run(capsys, "simulate", SCENARIO, "-o", "json")
    assert code == 0 and as_json.count("\n") == 1  # the scenario contract: one line
    code, as_yaml, _ = run(capsys, "simulate", SCENARIO, "-o", "yaml")
    assert code == 0 and yaml.safe_load(as_yaml) == json.loads(as_json)
    code, text, _ = run(capsys, "simulate", SCENARIO, "--check")
    assert code == 0 and text.endswith("CHECK PASS\n") and ESC not in text


def test_render_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, stream, _ = run(capsys, "render", GITOPS)
    assert code == 0
    objects = list(yaml.safe_load_all(stream))
    assert run(capsys, "render", GITOPS, "-o", "yaml")[1] == stream
    code, as_json, _ = run(capsys, "render", GITOPS, "-o", "json")
    assert code == 0
    assert json.loads(as_json) == {"apiVersion": "v1", "kind": "List", "items": objects}
    code, text, _ = run(capsys, "render", GITOPS, "-o", "text")
    lines = text.splitlines()
    assert code == 0 and lines[0].split() == ["KIND", "NAMESPACE", "NAME"]
    assert len(lines) == 1 + len(objects)
    assert any(line.split()[:1] == ["Queue"] for line in lines)
    code, _, err = run(capsys, "render", GITOPS, "-o", "json", "--out", str(tmp_path / "o"))
    assert code == 0 and f"wrote {len(objects)} files" in err
    written = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert all(name.endswith(".json") for name in written) and len(written) == len(objects)
    code, _, err = run(capsys, "render", GITOPS, "-o", "text", "--out", str(tmp_path / "t"))
    assert code == 2 and "--out writes yaml or json files" in err


def test_generate_check_formats(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "generate", "--check", "--root", str(ROOT), "-o", "json")
    assert code == 0
    assert json.loads(out) == {"ok": True, "stale": [], "missing": [], "orphaned": []}
    code, out, _ = run(capsys, "generate", "--check", "--root", str(ROOT))
    assert code == 0 and out == ""


def test_generate_check_names_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "Old.json").write_text("{}")
    code, out, err = run(capsys, "generate", "--check", "--root", str(tmp_path), "-o", "yaml")
    document = yaml.safe_load(out)
    assert code == 1 and document["ok"] is False and document["orphaned"] == ["schemas/Old.json"]
    assert document["missing"] and "out of date" in err


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_where_wanted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert colour_wanted(Terminal()) and not colour_wanted(io.StringIO())
    assert colour_wanted(io.StringIO(), "always") and not colour_wanted(Terminal(), "never")
    monkeypatch.setenv("NO_COLOR", "")  # set but empty: no effect (no-color.org)
    assert colour_wanted(Terminal())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not colour_wanted(Terminal())
    assert colour_wanted(Terminal(), "always")  # an explicit flag wins over the environment
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert not colour_wanted(Terminal())


def test_validate_colours_problems(capsys: pytest.CaptureFixture[str]) -> None:
    code, plain, _ = run(capsys, "validate", BROKEN)
    assert code == 1 and ESC not in plain  # captured output is no terminal
    code, coloured, _ = run(capsys, "validate", BROKEN, "--color", "always")
    assert code == 1 and coloured != plain
    assert (
        coloured.replace(f"{ESC}1;31m", "")
        .replace(f"{ESC}33m", "")
        .replace(f"{ESC}1m", "")
        .replace(f"{ESC}0m", "")
        == plain
    )
    first = coloured.splitlines()[0]
    location = plain.split(": ")[0]
    assert first.startswith(f"{ESC}1m{location}{ESC}0m: {ESC}1;31merror{ESC}0m: [")
    assert f": {ESC}33mwarning{ESC}0m: [" in coloured


def test_simulate_colours_its_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "simulate", SCENARIO, "--check", "--color", "always")
    assert code == 0
    assert f"{ESC}1m    TASK" in out and f"{ESC}32mCHECK PASS{ESC}0m" in out


def test_table() -> None:
    lines = table(["A", "LONGER"], [["xyz", "1"], ["k", "22"]], Style(False))
    assert lines == ["A    LONGER", "xyz  1", "k    22"]
    assert table(["A"], [], Style(True)) == [f"{ESC}1mA{ESC}0m"]

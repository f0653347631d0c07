"""Plain values that kubectl and Argo CD (YAML 1.1, go-yaml) read otherwise than kai validate
(YAML 1.2) are errors in kai's documents: the cluster would store something else than what was
checked (``displayName: yes`` is a boolean there, ``cpu: 017`` is 15, ``1_000`` is 1000)."""

from __future__ import annotations

import pytest

from kai.gitops.loader import load_text, yaml11_reading

HEAD = """apiVersion: gitops.kai.scheduler/v1alpha1
kind: QueueTree
metadata:
  name: t
spec:
  queues:
  - name: q
"""


def _problems(text: str) -> list[tuple[int, int, str]]:
    result = load_text(text, "f.yaml")
    return [(p.line, p.column, p.message) for p in result.problems if p.rule == "yaml"]


@pytest.mark.parametrize(
    ("value", "theirs"),
    [
        ("yes", True),
        ("No", False),
        ("on", True),
        ("OFF", False),
        ("y", True),
        ("n", False),
        ("017", 15),
        ("-010", -8),
        ("1_000", 1000),
        ("0b101", 5),
    ],
)
def test_a_value_kubectl_reads_otherwise_is_an_error_at_its_place(
    value: str, theirs: object
) -> None:
    assert yaml11_reading(value) == theirs
    for line in (f"    displayName: {value}\n", f"    quota: {{cpu: {value}}}\n"):
        problems = _problems(HEAD + line)
        assert len(problems) == 1, (line, problems)
        row, column, message = problems[0]
        assert row == 8 and column == line.rindex(value) + 1
        assert f"the plain value {value} is" in message and f'quote it ("{value}")' in message


@pytest.mark.parametrize(
    "value", ['"yes"', "'017'", "true", "false", "17", "0", "-1", "0.5", "1e3", "yesterday", "0o17"]
)
def test_values_both_read_alike_are_fine(value: str) -> None:
    assert _problems(HEAD + f"    displayName: {value}\n") == []


def test_documents_of_other_groups_are_not_judged() -> None:
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {enabled: yes}\n"
    assert _problems(text) == []

"""kai plan's output for people: no phantom diff against a cluster that matches the repository,
values shown as YAML (never a Python repr) in every output format, and --template (sandboxed,
bounded, errors with the template's file and line)."""

from __future__ import annotations

import copy
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))

from test_plan import EXAMPLES, _rendered_queues, cluster_snapshot, lowered

from kai.cli import main
from kai.insight import plan_template
from kai.insight.plan import cluster_base, make_plan, markdown, text
from kai.insight.values import show
from kai.reconcilers.cluster_snapshot import load

# What Python's repr of a value looks like in text: None/True/False as words, a dict or list
# with quoted strings, a quoted name ('nlp'; YAML quotes only a string that reads as another
# type, such as 'true').
YAML_WORDS = "(?:true|false|null|yes|no|on|off)'"
REPR = re.compile(
    rf"\bNone\b|\bTrue\b|\bFalse\b|\{{'|\['|': |', '|'(?!{YAML_WORDS})[a-z][\w-]*'(?!\w)"
)
TEMPLATE = Path(__file__).parents[3] / "examples" / "ci" / "plan-comment.md.j2"


def _as_stored(queue: dict[str, Any]) -> dict[str, Any]:
    """A compiled Queue as a cluster holds it after `kubectl apply -k` of the repository: a KAI
    Queue written directly carries none of kai's bookkeeping; the server adds its metadata."""
    live = copy.deepcopy(queue)
    md = live["metadata"]
    if md["annotations"]["gitops.kai.scheduler/source"].startswith("Queue/"):
        md.pop("labels")
        md.pop("annotations")
    md.update(uid=f"uid-{md['name']}", resourceVersion="7", generation=1)
    return live


INSTALL_DEFAULTS = [
    {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "default-parent-queue", "labels": {"app.kubernetes.io/name": "kai"}},
        "spec": {"resources": {"gpu": {"quota": 0, "overQuotaWeight": 1, "limit": -1}}},
    }
]


def _cluster_like_repo(path: Path) -> str:
    """A snapshot whose Queues are examples/gitops as applied (by the controller and kubectl),
    plus the install's default queue that the repository does not own."""
    snap = load(cluster_snapshot(path))
    snap.objects["queues"] = [_as_stored(q) for q in _rendered_queues()] + INSTALL_DEFAULTS
    snap.write(path)
    return str(path)


def test_a_cluster_that_matches_the_repository_plans_no_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = _cluster_like_repo(tmp_path / "snap.json")
    assert main(["plan", str(EXAMPLES), "--snapshot", snap, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["changed"] is False, [q for q in doc["queues"] if q["action"] != "unchanged"]
    assert "default-queue" in {q["name"] for q in doc["queues"]}  # compared, not "added"
    assert "default-parent-queue" not in {q["name"] for q in doc["queues"]}  # not the repo's
    assert main(["plan", str(EXAMPLES), "--snapshot", snap, "-o", "text"]) == 0
    assert capsys.readouterr().out == "no changes\n"


def test_a_real_change_against_the_cluster_is_the_only_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = _cluster_like_repo(tmp_path / "snap.json")
    changed = lowered(tmp_path)
    assert main(["plan", str(changed), "--snapshot", snap, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    diff = {q["name"]: q["changes"] for q in doc["queues"] if q["action"] != "unchanged"}
    assert diff == {"nlp": [{"field": "spec.resources.gpu.quota", "before": 48, "after": 8}]}


def test_cluster_base_keeps_the_managed_queues_and_the_names_of_the_change() -> None:
    def q(name: str, managed: bool) -> dict[str, Any]:
        labels = {"app.kubernetes.io/managed-by": "kai"} if managed else {}
        return {"kind": "Queue", "metadata": {"name": name, "labels": labels}, "spec": {}}

    live = [q("kept-managed", True), q("raw", False), q("other-team", False)]
    new = [q("raw", True)]
    assert [x["metadata"]["name"] for x in cluster_base(live, new)] == ["kept-managed", "raw"]
    plan = make_plan(cluster_base(live, new), new, None)
    assert {p.name: p.action for p in plan.queues} == {
        "kept-managed": "removed",
        "raw": "unchanged",
    }


def _queue(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_stored_forms_are_no_change_and_types_are_compared() -> None:
    # the server drops an explicit null and an empty mapping; 1.0 and 1 are one number
    before = _queue("q", {"priority": 1, "resources": {"gpu": {"quota": 2, "limit": -1}}})
    spec = {"priority": 1.0, "parentQueue": None, "x": {}}
    after = _queue("q", spec | {"resources": {"gpu": {"quota": 2.0, "limit": -1.0}}})
    assert make_plan([before], [after], None).queues[0].action == "unchanged"
    # a boolean is not the number 1 (True == 1 in Python, not in YAML)
    flag = make_plan([_queue("q", {"x": 1})], [_queue("q", {"x": True})], None)
    assert [(c.before, c.after) for c in flag.queues[0].changes] == [(1, True)]


ODD = {
    "displayName": "true",
    "flag": True,
    "off": False,
    "nested": {"list": ["a", 1.0, None], "map": {"k": "v"}},
    "empty": "",
    "ratio": 0.5,
    "pipe": "a|b`c",
}


def _odd_plan() -> Any:
    base = [_queue("gone", {"parentQueue": "x"}), _queue("same", ODD), _queue("q", {"flag": False})]
    new = [_queue("added", ODD), _queue("same", ODD), _queue("q", ODD)]
    return make_plan(base, new, None)


def _no_repr(output: str) -> None:
    found = REPR.findall(output)
    assert not found, f"a Python repr in user output: {found}\n{output}"


def test_no_output_format_shows_a_python_repr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _odd_plan()
    _no_repr(markdown(plan))
    _no_repr(text(plan))
    assert "`spec.flag`: `false` → `true`" in markdown(plan)
    assert "spec.displayName: (unset) -> 'true'" in text(plan)
    assert "`spec.pipe`: *(unset)* → `a\\|b'c`" in markdown(plan)
    _no_repr(plan_template.render(str(TEMPLATE), plan))
    # with a cluster: the detail of every affected workload, in every format
    snap = cluster_snapshot(tmp_path / "snap.json")
    changed = lowered(tmp_path)
    for fmt in ("markdown", "text", "json"):
        argv = ["plan", str(changed), "--base-dir", str(EXAMPLES), "--snapshot", snap, "-o", fmt]
        assert main(argv) == 0
        out = capsys.readouterr().out
        if fmt == "json":
            doc = json.loads(out)
            strings = [w["detail"] for w in doc["workloads"]]
            assert strings and all(not REPR.search(s) for s in strings), strings
        else:
            assert "reclaimable" in out
            _no_repr(out)
    argv = ["plan", str(changed), "--base-dir", str(EXAMPLES), "--snapshot", snap]
    assert main([*argv, "--template", str(TEMPLATE)]) == 0
    _no_repr(capsys.readouterr().out)


@settings(max_examples=80, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=12),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=8,
    )
)
def test_show_is_yaml_that_reads_back_as_the_value(value: Any) -> None:
    shown = show(value)
    if value is None:
        assert shown == "(unset)"
        return
    assert "\n" not in shown or isinstance(value, str)
    back = yaml.safe_load(shown)
    assert _close(back, value), (value, shown, back)


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, str) and isinstance(b, float):
        # YAML 1.1 (PyYAML) reads 1e-06 without a dot as a string; YAML 1.2 and Kubernetes as
        # the number
        try:
            a = float(a)
        except ValueError:
            return False
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0)
    return bool(a == b)


# --template


def _render(tmp_path: Path, source: str) -> str:
    path = tmp_path / "t.md.j2"
    path.write_text(source)
    return plan_template.render(str(path), _odd_plan())


def test_template_sees_the_plan_as_plain_data(tmp_path: Path) -> None:
    out = _render(
        tmp_path,
        "{% for q in plan.queues if q.action != 'unchanged' %}"
        "{{ q.name }}:{{ q.action }}:{{ q.pruneBlocked }}"
        "{% for c in q.changes %} {{ c.field }}={{ c.beforeText }}>{{ c.afterText }}"
        "{% endfor %};{% endfor %}{{ plan.changed }} {{ plan.queues[0].changes[0].before }}",
    )
    assert out.startswith("added:added: spec.displayName=(unset)>'true'")
    assert "gone:removed:;" in out
    assert "q:changed: spec.displayName=(unset)>'true' spec.empty=(unset)>''" in out
    assert out.endswith(";true ")  # a null prints nothing, a boolean as YAML


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("ok\n{{ plan.queues[0].__class__ }}", "t.md.j2:2: SecurityError"),
        ("ok\n\n{{ plan.changed.__class__.__mro__ }}", "t.md.j2:3: SecurityError"),
        ("{% do plan.queues.append(1) %}", "t.md.j2:1: template syntax error"),
        ("{{ plan.queues.append(1) }}", "t.md.j2:1: SecurityError"),
        ("a\nb\n{{ plan.nothing }}", "t.md.j2:3: UndefinedError: 'dict object' has no attribute"),
        ("{{ undefined_name }}", "t.md.j2:1: UndefinedError: 'undefined_name' is undefined"),
        ("x\n{% for q in plan.queues %}\n{{ q.name }", "t.md.j2:3: template syntax error"),
        ("{% include 'other.j2' %}", "t.md.j2:1: template other.j2 not found"),
        ("{% extends '/etc/passwd' %}", "template /etc/passwd not found"),
        ("{{ 'x' * 70000 }}", "larger than 65536 characters"),
        ("{{ ('x' * 2000000000)|length }}", "needs more than 1024 MiB of memory"),
        ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recurses too deeply"),
        ("{% for i in range(100000) %}{{ plan }}{% endfor %}", "larger than 65536 characters"),
    ],
)
def test_template_errors_name_the_file_and_line(tmp_path: Path, source: str, message: str) -> None:
    with pytest.raises(plan_template.TemplateError) as caught:
        _render(tmp_path, source)
    assert message in str(caught.value)
    assert str(tmp_path / "t.md.j2") in str(caught.value)


def test_template_runs_without_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI_TOKEN", "secret-token")
    monkeypatch.setattr(plan_template, "_render_here", None)  # the parent does not render
    # the sandbox offers no way to the environment; the process does not even have it
    out = _render(tmp_path, "{{ plan.changed }}")
    assert out == "true"
    assert "CI_TOKEN" not in plan_template._child_env()


def test_template_that_runs_without_end_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plan_template, "TIME_LIMIT", 1)
    source = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"
    with pytest.raises(plan_template.TemplateError, match="stopped"):
        _render(tmp_path, source)


def test_template_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.j2"
    bad.write_text("{{ plan.nope }}")
    assert main(["plan", str(EXAMPLES), "--base-dir", str(EXAMPLES), "--template", str(bad)]) == 2
    assert f"kai plan: error: {bad}:1: UndefinedError" in capsys.readouterr().err
    missing = tmp_path / "missing.j2"
    assert (
        main(["plan", str(EXAMPLES), "--base-dir", str(EXAMPLES), "--template", str(missing)]) == 2
    )
    assert f"--template {missing}: No such file" in capsys.readouterr().err
    assert (
        main(["plan", str(EXAMPLES), "--base-dir", str(EXAMPLES), "--template", str(TEMPLATE)]) == 0
    )
    assert "No Queue changes" in capsys.readouterr().out

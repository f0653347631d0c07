"""`kai validate` applies the API server's own limits: object size, label and annotation rules.

Boundary cases are checked here and, where a real control plane is available, against the real
API server (the project's CRDs applied): validate's verdict equals the server's."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kai.gitops.api_limits import MAX_ANNOTATIONS_BYTES, MAX_OBJECT_BYTES, qualified_name_problem
from kai.gitops.loader import load_text
from kai.gitops.validate import validate

ROOT = Path(__file__).resolve().parents[3]


def tree(name: str, *, display: str = "x", meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "gitops.kai.scheduler/v1alpha1",
        "kind": "QueueTree",
        "metadata": {"name": name, **(meta or {})},
        "spec": {"queues": [{"name": "a", "displayName": display}]},
    }


def verdict(obj: dict[str, Any]) -> tuple[bool, list[str]]:
    report = validate(load_text(json.dumps(obj), "t.json"))
    return report.ok, [p.text() for p in report.problems]


CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("display 1.4 MB", tree("big-ok", display="x" * 1_400_000), True),
    ("display 2 MB", tree("big-no", display="x" * 2_000_000), False),
    ("label key 63", tree("lk-ok", meta={"labels": {"k" * 63: "v"}}), True),
    ("label key 64", tree("lk-no", meta={"labels": {"k" * 64: "v"}}), False),
    ("label prefix 253", tree("lp-ok", meta={"labels": {"a" * 253 + "/k": "v"}}), True),
    ("label prefix 254", tree("lp-no", meta={"labels": {"a" * 254 + "/k": "v"}}), False),
    ("label value 63", tree("lv-ok", meta={"labels": {"k": "v" * 63}}), True),
    ("label value 64", tree("lv-no", meta={"labels": {"k": "v" * 64}}), False),
    ("label value space", tree("lv-sp", meta={"labels": {"k": "a b"}}), False),
    ("label value empty", tree("lv-em", meta={"labels": {"k": ""}}), True),
    ("annotation key 300", tree("ak-no", meta={"annotations": {"k" * 300: "v"}}), False),
    (
        "annotations 256 KiB",
        tree("an-ok", meta={"annotations": {"k": "v" * (MAX_ANNOTATIONS_BYTES - 1)}}),
        True,
    ),
    (
        "annotations 256 KiB + 1",
        tree("an-no", meta={"annotations": {"k": "v" * MAX_ANNOTATIONS_BYTES}}),
        False,
    ),
    ("name 253", tree("n" * 253), True),
    ("name 254", tree("n" * 254), False),
]


@pytest.mark.parametrize(("label", "obj", "accepted"), CASES, ids=[c[0] for c in CASES])
def test_validate_applies_the_api_servers_limits(
    label: str, obj: dict[str, Any], accepted: bool
) -> None:
    ok, problems = verdict(obj)
    assert ok is accepted, (label, problems)


def test_the_size_error_names_the_object_and_the_limit() -> None:
    ok, problems = verdict(tree("big", display="x" * 2_000_000))
    assert not ok
    [problem] = [p for p in problems if "[document]" in p]
    assert problem.startswith("t.json:1:1: error: [document] QueueTree/big")
    assert str(MAX_OBJECT_BYTES) in problem


def test_past_256_kib_a_warning_says_client_side_apply_fails() -> None:
    ok, problems = verdict(tree("mid", display="x" * 300_000))
    assert ok
    assert any("warning: [document]" in p and "--server-side" in p for p in problems)


def test_a_label_value_that_is_not_a_string_is_refused() -> None:
    ok, problems = verdict(tree("num", meta={"labels": {"k": 1}}))
    assert not ok and any("metadata.labels.k" in p for p in problems)


_NAME = st.text(alphabet="abAB09-_./", min_size=0, max_size=70)


@settings(max_examples=300, deadline=None)
@given(key=_NAME)
def test_qualified_names_match_the_api_servers_rule(key: str) -> None:
    # apimachinery's IsQualifiedName, written out independently
    import re

    parts = key.split("/")
    if len(parts) == 1:
        prefix, name = "", parts[0]
    elif len(parts) == 2:
        prefix, name = parts
    else:
        assert qualified_name_problem(key) is not None
        return
    good_name = 0 < len(name) <= 63 and re.fullmatch(
        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", name
    )
    good_prefix = len(parts) == 1 or (
        0 < len(prefix) <= 253
        and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", prefix)
    )
    assert (qualified_name_problem(key) is None) == bool(good_name and good_prefix), key


def test_the_real_api_server_agrees(real_cluster: Any, kubectl: str, tmp_path: Path) -> None:
    kubeconfig = str(real_cluster.kubeconfig)
    crd = ROOT / "manifests" / "crds" / "gitops.kai.scheduler_queuetrees.yaml"

    def run(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [kubectl, "--kubeconfig", kubeconfig, *argv],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    applied = run("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    assert applied.returncode == 0, applied.stderr
    run(
        "wait",
        "--for=condition=Established",
        "crd/queuetrees.gitops.kai.scheduler",
        "--timeout=30s",
    )
    suffix = uuid.uuid4().hex[:6]
    created = []
    try:
        for label, obj, accepted in CASES:
            obj = json.loads(json.dumps(obj))
            name = obj["metadata"]["name"]  # made unique, of the same length when it is long
            obj["metadata"]["name"] = name[:-6] + suffix if len(name) > 200 else name + suffix
            path = tmp_path / "obj.json"
            path.write_text(json.dumps(obj))
            done = run("create", "-f", str(path))
            server_ok = done.returncode == 0
            if server_ok:
                created.append(obj["metadata"]["name"])
            assert server_ok is accepted, (label, done.stderr[:300])
            assert verdict(obj)[0] is accepted, label
    finally:
        for name in created:
            run("delete", "queuetree.gitops.kai.scheduler", name, "--wait=false")

"""kai plan --kubeconfig against a cluster where examples/gitops is applied, as docs/gitops.md
says (`kubectl apply -k` of the documents, `kai controller` turning them into Queues, the
install's default queues beside them), on the embedded API server and on a real one: the plan
of the unchanged repository is "no changes", and a change is the only diff."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_helpers import both_servers

from helpers.polling import eventually
from kai.kube.client import ApiError, Kube
from kai.kube.events import EventRecorder
from kai.kube.resources import CONFIGMAPS, QUEUES, TOPOLOGIES
from kai.reconcilers.gitops_controller import DOCUMENTS, ControllerOptions, start_controller

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "gitops"
INSTALL_QUEUES = ROOT / "manifests" / "queues"


def _clean(kube: Kube) -> None:
    """Leave the session's real cluster as we found it."""
    for res in DOCUMENTS.values():
        for doc in kube.list(res).get("items") or []:
            kube.delete(res, doc["metadata"]["name"])
    for queue in kube.list(QUEUES).get("items") or []:
        kube.delete(QUEUES, queue["metadata"]["name"])
    for topology in kube.list(TOPOLOGIES).get("items") or []:
        if "gitops.kai.scheduler/source" in (topology["metadata"].get("annotations") or {}):
            kube.delete(TOPOLOGIES, topology["metadata"]["name"])
    with contextlib.suppress(ApiError):
        kube.delete(CONFIGMAPS, "kai-scheduler-config", "kai-scheduler")


@pytest.fixture(params=["embedded", "real"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Kube]]:
    yield from both_servers(request, tmp_path, cleanup=_clean)


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def _plan(path: Path, kubeconfig: str, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "kai.cli", "plan", str(path), "--kubeconfig", kubeconfig]
    return _run([*argv, *extra])


def _rendered_queues(path: Path) -> dict[str, dict[str, Any]]:
    run = _run([sys.executable, "-m", "kai.cli", "render", str(path)])
    assert run.returncode == 0, run.stderr
    objs = [o for o in yaml.safe_load_all(run.stdout) if o and o["kind"] == "Queue"]
    return {o["metadata"]["name"]: o for o in objs}


def test_plan_of_the_applied_repository_is_no_change(
    api: tuple[str, Kube], kubectl: str, tmp_path: Path
) -> None:
    kubeconfig, kube = api
    repo = tmp_path / "gitops"
    shutil.copytree(EXAMPLES, repo)
    for what in (INSTALL_QUEUES, repo):
        run = _run([kubectl, "--kubeconfig", kubeconfig, "apply", "-k", str(what)])
        assert run.returncode == 0, run.stderr
    recorder = EventRecorder(kube, "kai-controller").start()
    controller, informers = start_controller(kube, recorder, ControllerOptions(resync=5))
    try:
        wanted = _rendered_queues(repo)

        def converged() -> bool:
            live = {q["metadata"]["name"]: q for q in kube.list(QUEUES)["items"]}
            return all(n in live and live[n]["spec"] == q["spec"] for n, q in wanted.items())

        eventually(converged, timeout=30)
    finally:
        controller.stop()
        informers.stop()
        recorder.stop()

    plan = _plan(repo, kubeconfig, "-o", "json")
    assert plan.returncode == 0, plan.stderr
    doc = json.loads(plan.stdout)
    assert [q for q in doc["queues"] if q["action"] != "unchanged"] == []
    names = {q["name"] for q in doc["queues"]}
    assert set(wanted) <= names and "default-parent-queue" not in names
    for fmt, says in (("text", "no changes\n"), ("markdown", "No Queue changes.")):
        plan = _plan(repo, kubeconfig, "-o", fmt)
        assert plan.returncode == 0 and says in plan.stdout, plan.stdout + plan.stderr
        assert "None" not in plan.stdout

    # a change in the pull request (not applied): that field, and nothing else
    research = repo / "queues" / "research.yaml"
    old = "  - name: nlp\n    displayName: NLP\n    quota: {gpu: 48,"
    research.write_text(research.read_text().replace(old, old.replace("48", "40")))
    default_queue = repo / "queues" / "default-queue.yaml"
    default_queue.write_text(default_queue.read_text().replace("priority: 50", "priority: 60"))
    plan = _plan(repo, kubeconfig, "-o", "json")
    assert plan.returncode == 0, plan.stderr
    diff = {
        q["name"]: [(c["field"], c["before"], c["after"]) for c in q["changes"]]
        for q in json.loads(plan.stdout)["queues"]
        if q["action"] != "unchanged"
    }
    assert diff == {
        "default-queue": [("spec.priority", 50, 60)],
        "nlp": [("spec.resources.gpu.quota", 48, 40)],
    }
    plan = _plan(repo, kubeconfig, "--template", str(ROOT / "examples/ci/plan-comment.md.j2"))
    assert plan.returncode == 0, plan.stderr
    assert "| `nlp` | changed | `spec.resources.gpu.quota` | 48 | 40 |" in plan.stdout


def test_plan_after_render_and_kubectl_apply_is_no_change(
    api: tuple[str, Kube], kubectl: str, tmp_path: Path
) -> None:
    """The other way docs/gitops.md applies a repository: `kai render | kubectl apply -f -` (every
    Queue then carries kai's label, the one written directly too)."""
    kubeconfig, _ = api
    rendered = _run([sys.executable, "-m", "kai.cli", "render", str(EXAMPLES)])
    assert rendered.returncode == 0, rendered.stderr
    applied = subprocess.run(
        [kubectl, "--kubeconfig", kubeconfig, "apply", "-f", "-"],
        input=rendered.stdout,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    plan = _plan(EXAMPLES, kubeconfig, "-o", "text")
    assert plan.returncode == 0 and plan.stdout == "no changes\n", plan.stdout + plan.stderr
    # a queue the repository no longer has is planned as removed, with its fields
    repo = tmp_path / "gitops"
    shutil.copytree(EXAMPLES, repo)
    (repo / "queues" / "default-queue.yaml").unlink()
    kustomization = repo / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace("- queues/default-queue.yaml\n", ""))
    plan = _plan(repo, kubeconfig, "-o", "json")
    assert plan.returncode == 0, plan.stderr
    changed = [(q["name"], q["action"]) for q in json.loads(plan.stdout)["queues"]]
    assert [c for c in changed if c[1] != "unchanged"] == [("default-queue", "removed")]

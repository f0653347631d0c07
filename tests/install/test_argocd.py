"""The Argo CD manifests: the Applications' sync settings, and the Lua health checks of
argocd-cm run by a real Lua interpreter (lupa) against sample objects, the way Argo CD calls
them (a global ``obj``; the script returns ``{status, message}``)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ARGOCD = ROOT / "argocd"
POLICY_KINDS = ("QueueTree", "TopologyPolicy", "SharingPolicy", "SchedulerPolicy")


def _docs() -> dict[tuple[str, str], dict[str, Any]]:
    docs = {}
    for path in sorted(ARGOCD.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and "kind" in doc and doc["kind"] != "Kustomization":
                docs[(doc["kind"], doc["metadata"]["name"])] = doc
    return docs


def _health(key: str) -> Any:
    lupa = pytest.importorskip("lupa")
    script = _docs()[("ConfigMap", "argocd-cm")]["data"][key]
    runtime = lupa.LuaRuntime(unpack_returned_tuples=True)
    function = runtime.eval("function(obj) " + script + "\nend")

    def check(obj: dict[str, Any]) -> tuple[str, str]:
        result = function(runtime.table_from(obj, recursive=True))
        return str(result["status"]), str(result["message"] or "")

    return check


def _condition(kind: str, status: str, message: str = "", reason: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "message": message, "reason": reason}


def _policy(generation: int, observed: int | None, *conditions: dict[str, str]) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conditions)}
    if observed is not None:
        status["observedGeneration"] = observed
    return {"metadata": {"name": "research", "generation": generation}, "status": status}


@pytest.mark.parametrize("kind", POLICY_KINDS)
def test_policy_health(kind: str) -> None:
    health = _health(f"resource.customizations.health.gitops.kai.scheduler_{kind}")
    assert health({"metadata": {"name": "x", "generation": 1}}) == (
        "Progressing",
        "Waiting for kai controller to reconcile",
    )
    assert health(_policy(3, 2, _condition("Ready", "True"))) == (
        "Progressing",
        "Waiting for kai controller to observe generation 3",
    )
    ready = _condition("Ready", "True", "3 queues applied")
    assert health(_policy(3, 3, ready, _condition("Invalid", "False"))) == (
        "Healthy",
        "3 queues applied",
    )
    invalid = _condition(
        "Invalid",
        "True",
        "[children-quota-sum] QueueTree/departments queues[1] (product) quota.gpu: ...",
    )
    status, message = health(_policy(4, 4, _condition("Ready", "False", reason="Invalid"), invalid))
    assert status == "Degraded" and message.startswith("[children-quota-sum]")
    blocked = _condition("PruneBlocked", "True", "queue speech still has 2 running pods")
    assert health(_policy(5, 5, _condition("Ready", "True"), blocked)) == (
        "Progressing",
        "queue speech still has 2 running pods",
    )
    assert health(_policy(5, 5, _condition("Ready", "False", reason="ApplyFailed"))) == (
        "Degraded",
        "ApplyFailed",
    )
    assert health(_policy(5, 5, _condition("Applied", "True"))) == (
        "Progressing",
        "Waiting for the Ready condition",
    )
    # being deleted while its queues are in use: the delete is under way, not a failure
    in_use = _condition("InUse", "True", "being deleted; waits until its queues are gone: ...")
    assert health(_policy(6, 6, _condition("Ready", "False", reason="InUse"), in_use)) == (
        "Progressing",
        "being deleted; waits until its queues are gone: ...",
    )


#: a QueueTree as `kai controller` left it on a real API server (examples/gitops applied)
CONTROLLER_SAMPLE = {
    "metadata": {"name": "departments", "generation": 1},
    "status": {
        "conditions": [
            {
                "lastTransitionTime": "2026-12-01T16:15:39Z",
                "message": "every object is applied and nothing waits to be pruned",
                "observedGeneration": 1,
                "reason": "Ready",
                "status": "True",
                "type": "Ready",
            },
            {
                "lastTransitionTime": "2026-12-01T16:15:39Z",
                "message": "kai validate finds no error",
                "observedGeneration": 1,
                "reason": "Valid",
                "status": "False",
                "type": "Invalid",
            },
            {
                "lastTransitionTime": "2026-12-01T16:15:39Z",
                "message": "3 objects up to date",
                "observedGeneration": 1,
                "reason": "Applied",
                "status": "True",
                "type": "Applied",
            },
            {
                "lastTransitionTime": "2026-12-01T16:15:39Z",
                "message": "nothing waits to be pruned",
                "observedGeneration": 1,
                "reason": "NothingBlocked",
                "status": "False",
                "type": "PruneBlocked",
            },
        ],
        "objects": [{"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "name": "platform"}],
        "observedGeneration": 1,
    },
}


def test_policy_health_of_a_controller_written_status() -> None:
    health = _health("resource.customizations.health.gitops.kai.scheduler_QueueTree")
    assert health(CONTROLLER_SAMPLE) == (
        "Healthy",
        "every object is applied and nothing waits to be pruned",
    )
    edited = {**CONTROLLER_SAMPLE, "metadata": {"name": "departments", "generation": 2}}
    assert health(edited)[0] == "Progressing"


def test_queue_health() -> None:
    health = _health("resource.customizations.health.scheduling.run.ai_Queue")
    assert health({"metadata": {"name": "q"}, "spec": {}})[0] == "Healthy"
    orphan = _condition("Orphan", "True", "parent queue research does not exist")
    assert health({"metadata": {"name": "q"}, "status": {"conditions": [orphan]}}) == (
        "Degraded",
        "parent queue research does not exist",
    )
    over = _condition("OverQuota", "True", "using 12 GPUs above its quota of 8")
    assert health({"metadata": {"name": "q"}, "status": {"conditions": [over]}}) == (
        "Healthy",
        "using 12 GPUs above its quota of 8",
    )
    held = _condition("InUse", "True", "being deleted; waits until nothing uses it: held by ...")
    assert health({"metadata": {"name": "q"}, "status": {"conditions": [over, held]}}) == (
        "Progressing",
        "being deleted; waits until nothing uses it: held by ...",
    )


def test_child_application_health() -> None:
    health = _health("resource.customizations.health.argoproj.io_Application")
    assert health({"metadata": {"name": "a"}})[0] == "Progressing"
    app = {"metadata": {"name": "a"}, "status": {"health": {"status": "Degraded", "message": "x"}}}
    assert health(app) == ("Degraded", "x")


def test_applications_sync_crds_first_then_the_chart_then_the_policy() -> None:
    docs = _docs()
    waves = {
        name: int(doc["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])
        for (kind, name), doc in docs.items()
        if kind in ("Application", "AppProject")
    }
    assert waves == {"kai": -2, "kai-crds": -1, "kai-scheduler": 0, "kai-policy": 1}
    crds, chart, policy = (
        docs[("Application", n)] for n in ("kai-crds", "kai-scheduler", "kai-policy")
    )
    assert crds["spec"]["source"]["path"] == "manifests/crds"
    assert crds["spec"]["syncPolicy"]["automated"]["prune"] is False
    # deleting an Application never deletes the CRDs nor the policy documents (with them every
    # Queue, PodGroup and document): not pruned, Delete=false on every object, no finalizer
    # that would cascade
    for app in (crds, policy):
        annotations = app["spec"]["source"]["kustomize"]["commonAnnotations"]
        assert annotations["argocd.argoproj.io/sync-options"] == "Delete=false"
    assert "finalizers" not in crds["metadata"]
    assert chart["spec"]["source"]["path"] == "charts/kai-scheduler"
    assert chart["spec"]["source"]["helm"]["skipCrds"] is True
    options = chart["spec"]["syncPolicy"]["syncOptions"]
    assert "ServerSideApply=true" in options and "SkipDryRunOnMissingResource=true" in options
    assert policy["spec"]["source"]["path"] == "examples/gitops"
    for (kind, _), doc in docs.items():
        if kind == "Application":
            assert doc["spec"]["project"] == "kai"
            assert (ROOT / doc["spec"]["source"]["path"]).is_dir()
    # the chart's values in the Application are valid for the chart
    values = chart["spec"]["source"]["helm"]["valuesObject"]
    assert set(values) <= set(
        yaml.safe_load((ROOT / "charts/kai-scheduler/values.yaml").read_text())
    )


def test_argocd_directory_builds(kubectl: str) -> None:
    out = subprocess.run([kubectl, "kustomize", str(ARGOCD)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(out.stdout) if d)
    assert kinds == ["AppProject", "Application", "Application", "Application", "ConfigMap"]

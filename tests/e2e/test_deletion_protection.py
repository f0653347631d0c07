"""In-use protection by finalizer: `kubectl delete -f DIR` and `kubectl apply -f DIR` converge in
any order, on the embedded API server and on a real one.

A tree of queues: two KAI Queues written directly (``p-top``, ``p-mid`` under it) and a
QueueTree (``p-tree``, attached under ``p-mid``) compiled into ``p-team`` and its leaf
``p-leaf``, where a PodGroup has a running pod. The whole directory is deleted in the worst
order (parents first, one file after the other): every delete is accepted, every object stays
Terminating with the ``InUse`` condition and an ``InUse`` Event naming what holds it. The
controller is restarted in the middle; once the workload ends everything is gone within a
bounded time, and applying the directory again converges.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_helpers import both_servers

from helpers.polling import eventually
from kai.api.protection import FINALIZER, IN_USE
from kai.kube.client import ApiError, Kube, Resource
from kai.kube.events import EventRecorder
from kai.kube.resources import EVENTS, NAMESPACES, PODGROUPS, PODS, QUEUES
from kai.kube.writes import create_if_absent
from kai.reconcilers.gitops_controller import (
    DOCUMENTS,
    ControllerOptions,
    GitOpsController,
    start_controller,
)
from kai.sim.system import bootstrap
from kai.webhooks.app import Options, WebhookApp, free_port

ROOT = Path(__file__).resolve().parents[2]
TREES = DOCUMENTS["QueueTree"]
NAMESPACE = "p-work"
RAW = ("p-top", "p-mid")
COMPILED = ("p-team", "p-leaf")
GONE_WITHIN = 30.0
WRITES = (  # what the protection writes, as (verb, resource, subresource)
    ("patch", "queues.scheduling.run.ai", ""),
    ("patch", "queues.scheduling.run.ai", "status"),
    ("patch", "queuetrees.gitops.kai.scheduler", ""),
    ("update", "queuetrees.gitops.kai.scheduler", ""),
    ("patch", "queuetrees.gitops.kai.scheduler", "status"),
    ("create", "events", ""),
)  # seconds from the end of the workload until every object is gone

RESOURCES = """
  resources:
    gpu: {quota: 0, overQuotaWeight: 1, limit: -1}
    cpu: {quota: 0, overQuotaWeight: 1, limit: -1}
    memory: {quota: 0, overQuotaWeight: 1, limit: -1}
"""
FILES = {
    # kubectl reads a directory in file-name order: the parents are deleted first
    "1-top.yaml": "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata:\n  name: p-top\n"
    "spec:" + RESOURCES,
    "2-mid.yaml": "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata:\n  name: p-mid\n"
    "spec:\n  parentQueue: p-top" + RESOURCES,
    "3-tree.yaml": """apiVersion: gitops.kai.scheduler/v1alpha1
kind: QueueTree
metadata:
  name: p-tree
spec:
  parent: p-mid
  queues:
  - name: p-team
    children:
    - name: p-leaf
""",
}


@pytest.fixture(params=["embedded", "real"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Kube]]:
    yield from both_servers(request, tmp_path, cleanup=_clean)


def _clean(kube: Kube) -> None:
    """Leave the session's real cluster as we found it: the controller is stopped, so no
    Queue or QueueTree (this test's or another's that it protected meanwhile) keeps its
    finalizer, and this test's objects are gone."""
    for res in (TREES, QUEUES):
        for obj in kube.list(res).get("items") or []:
            finalizers = obj["metadata"].get("finalizers") or []
            if FINALIZER in finalizers:
                rest = [f for f in finalizers if f != FINALIZER] or None
                with contextlib.suppress(ApiError):
                    kube.patch(res, obj["metadata"]["name"], {"metadata": {"finalizers": rest}})
    for res, names in ((TREES, ("p-tree",)), (QUEUES, (*RAW, *COMPILED))):
        for name in names:
            with contextlib.suppress(ApiError):
                kube.delete(res, name)
    with contextlib.suppress(ApiError):
        kube.delete(NAMESPACES, NAMESPACE)


def _documented(heading: str, command: str) -> list[tuple[list[str], str]]:
    """The console commands of docs/gitops.md's section ``heading`` that start with
    ``command``, each with the output the page shows for it."""
    text = (ROOT / "docs" / "gitops.md").read_text()
    section = text.split(f"### {heading}\n", 1)[1].split("\n### ", 1)[0]
    found: list[tuple[list[str], str]] = []
    for block in section.split("```console\n")[1:]:
        lines = block.split("\n```", 1)[0].splitlines()
        for i, line in enumerate(lines):
            if line.startswith(f"$ {command}"):
                out = []
                for following in lines[i + 1 :]:
                    if following.startswith("$ "):
                        break
                    out.append(following)
                found.append((shlex.split(line[2:]), "\n".join(out)))
    assert found, f"docs/gitops.md, {heading}: no `{command}` command"
    return found


def _run_documented(kubectl: str, kubeconfig: str, heading: str, command: str) -> None:
    """Run them as the page shows them, and compare the output."""
    for argv, expected in _documented(heading, command):
        assert argv[0] == "kubectl", argv
        out = _kubectl(kubectl, kubeconfig, *argv[1:])
        assert out.strip() == expected.strip(), (argv, out, expected)


def _kubectl(kubectl: str, kubeconfig: str, *args: str) -> str:
    run = subprocess.run(
        [kubectl, "--kubeconfig", kubeconfig, *args], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    return run.stdout + run.stderr


def _controller(kube: Kube) -> tuple[GitOpsController, Callable[[], None]]:
    recorder = EventRecorder(kube, "kai-controller").start()
    controller, informers = start_controller(
        kube, recorder, ControllerOptions(resync=5, blocked_recheck=0.3)
    )

    def stop() -> None:
        controller.stop()
        informers.stop()
        recorder.stop()

    return controller, stop


def _get(kube: Kube, res: Resource, name: str) -> dict[str, Any] | None:
    try:
        return kube.get(res, name)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def _objects() -> list[tuple[Resource, str]]:
    return [(QUEUES, n) for n in (*RAW, *COMPILED)] + [(TREES, "p-tree")]


def _protected(kube: Kube) -> bool:
    for res, name in _objects():
        obj = _get(kube, res, name)
        assert obj is not None, name
        assert FINALIZER in (obj["metadata"].get("finalizers") or []), name
    return True


def _in_use(kube: Kube, res: Resource, name: str) -> dict[str, Any]:
    obj = _get(kube, res, name)
    assert obj is not None, f"{name} is gone while its workload runs"
    assert obj["metadata"].get("deletionTimestamp"), f"{name} is not Terminating"
    conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
    assert IN_USE in conditions, (name, obj.get("status"))
    assert conditions[IN_USE]["status"] == "True"
    return dict(conditions[IN_USE])


# what holds each object while the workload runs: (condition reason, a holder in the message)
HELD = {
    "p-leaf": ("Workloads", f"PodGroup {NAMESPACE}/train (1 live pods)"),
    "p-team": ("ChildQueues", "child queue p-leaf"),
    "p-mid": ("ChildQueues", "child queue p-team"),
    "p-top": ("ChildQueues", "child queue p-mid"),
}


def _held(kube: Kube) -> bool:
    """Every object Terminating, with the InUse condition naming what holds it."""
    for name, (reason, holder) in HELD.items():
        condition = _in_use(kube, QUEUES, name)
        assert condition["reason"] == reason, condition
        assert holder in condition["message"], condition
    tree = _in_use(kube, TREES, "p-tree")
    assert tree["reason"] == "Queues", tree
    assert f"queue p-leaf (held by PodGroup {NAMESPACE}/train (1 live pods))" in tree["message"]
    return True


def _events(kube: Kube, name: str) -> list[str]:
    return [
        e["message"]
        for e in kube.list(EVENTS, "default")["items"]
        if e["involvedObject"].get("name") == name and e.get("reason") == IN_USE
    ]


def _all_gone(kube: Kube) -> bool:
    left = [name for res, name in _objects() if _get(kube, res, name) is not None]
    assert not left, left
    return True


def _namespace_ready(kube: Kube) -> bool:
    """The workload's namespace exists and is not Terminating (a previous test's cleanup on
    the same real cluster may still be deleting it)."""
    current = _get(kube, NAMESPACES, NAMESPACE)
    if current is not None:
        return not current["metadata"].get("deletionTimestamp")
    create_if_absent(
        kube, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    return True


def _start_workload(kube: Kube) -> None:
    eventually(lambda: _namespace_ready(kube), timeout=60)
    kube.create(
        PODGROUPS,
        {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": NAMESPACE},
            "spec": {"minMember": 1, "queue": "p-leaf"},
        },
    )
    kube.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "train-0",
                "namespace": NAMESPACE,
                "annotations": {"pod-group-name": "train"},
            },
            "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    kube.patch(PODS, "train-0", {"status": {"phase": "Running"}}, NAMESPACE, sub="status")


def _end_workload(kube: Kube) -> None:
    kube.delete(PODS, "train-0", NAMESPACE, grace_period_seconds=0)
    kube.delete(PODGROUPS, "train", NAMESPACE)


def test_delete_in_the_worst_order_then_apply_again(
    api: tuple[str, Kube], kubectl: str, tmp_path: Path
) -> None:
    kubeconfig, kube = api
    folder = tmp_path / "queues"
    folder.mkdir()
    for name, text in FILES.items():
        (folder / name).write_text(text)
    _kubectl(kubectl, kubeconfig, "apply", "-f", str(folder))
    _start_workload(kube)
    controller, stop = _controller(kube)
    try:
        # every Queue (written directly or compiled) and the QueueTree carry the finalizer
        eventually(lambda: _protected(kube), timeout=30)

        # the whole directory, parents first: every delete is accepted
        out = _kubectl(kubectl, kubeconfig, "delete", "-f", str(folder), "--wait=false")
        for line in (
            'queue.scheduling.run.ai "p-top" deleted',
            'queue.scheduling.run.ai "p-mid" deleted',
            'queuetree.gitops.kai.scheduler "p-tree" deleted',
        ):
            assert line in out, out

        # everything Terminating, each naming what holds it
        expected = HELD
        eventually(lambda: _held(kube), timeout=30)
        eventually(
            lambda: (
                controller.m_held.value({"kind": "Queue"}) == len(expected)
                and controller.m_held.value({"kind": "QueueTree"}) == 1
            ),
            timeout=10,
        )
        # what docs/gitops.md shows for it
        eventually(
            lambda: (
                _run_documented(kubectl, kubeconfig, "Deleting in any order", "kubectl get") is None
            ),
            timeout=15,
        )
        tree = kube.get(TREES, "p-tree")
        ready = next(c for c in tree["status"]["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("False", IN_USE), ready

        def events() -> bool:
            for name, (_, holder) in expected.items():
                assert any(holder in m for m in _events(kube, name)), (name, _events(kube, name))
            assert any("queue p-team" in m for m in _events(kube, "p-tree"))
            return True

        eventually(events, timeout=15)
        # still there a while later: nothing is released while the workload runs
        time.sleep(1.0)
        _held(kube)
    finally:
        stop()

    # the controller is gone (a restart, an upgrade): the state is in the objects
    _end_workload(kube)
    time.sleep(0.5)
    assert _get(kube, QUEUES, "p-leaf") is not None  # nobody released it meanwhile
    _, stop = _controller(kube)
    try:
        started = time.monotonic()
        eventually(lambda: _all_gone(kube), timeout=GONE_WITHIN)
        print(f"\nworkload ended -> every object gone {time.monotonic() - started:.2f} s")

        # applying the directory again converges: the same objects, protected again
        _kubectl(kubectl, kubeconfig, "apply", "-f", str(folder))
        eventually(lambda: _protected(kube), timeout=30)
        leaf = kube.get(QUEUES, "p-leaf")
        assert leaf["spec"]["parentQueue"] == "p-team"
        assert kube.get(QUEUES, "p-team")["spec"]["parentQueue"] == "p-mid"
        # and with nothing running, a delete in any order is done at once
        _kubectl(kubectl, kubeconfig, "delete", "-f", str(folder), "--wait=false")
        eventually(lambda: _all_gone(kube), timeout=GONE_WITHIN)
        _kubectl(kubectl, kubeconfig, "apply", "-f", str(folder))
        eventually(lambda: _protected(kube), timeout=30)
    finally:
        stop()


def test_the_controllers_cluster_role_allows_the_protection(
    real_cluster: Any, kubectl: str
) -> None:
    """The ClusterRole of manifests/rbac/controller.yaml (rendered from the chart) grants every
    write of the protection: the finalizer of Queues and QueueTrees, the InUse condition, the
    Event. Bound here to a ServiceAccount of the test's own, under a name of its own, so an
    installation test on the same cluster never meets these objects."""
    kubeconfig = str(real_cluster.kubeconfig)
    kube = Kube.from_kubeconfig(kubeconfig)
    try:
        bootstrap(kube)  # the CRDs: can-i names their resources
    finally:
        kube.close()
    manifests = list(yaml.safe_load_all((ROOT / "manifests/rbac/controller.yaml").read_text()))
    role = next(m for m in manifests if m and m["kind"] == "ClusterRole")
    name = "p-protection-check"
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": name},
        },
        {**role, "metadata": {"name": name}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": name}],
        },
    ]
    stream = yaml.safe_dump_all(objects)
    run = subprocess.run(
        [kubectl, "--kubeconfig", kubeconfig, "apply", "-f", "-"],
        input=stream,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    try:
        who = f"--as=system:serviceaccount:{name}:{name}"

        def allowed(verb: str, resource: str, sub: str) -> bool:
            args = ["auth", "can-i", verb, resource, who, "-n", "default"]
            if sub:
                args.append(f"--subresource={sub}")
            answer = subprocess.run(
                [kubectl, "--kubeconfig", kubeconfig, *args],
                capture_output=True,
                text=True,
                timeout=60,
            )
            return answer.stdout.strip() == "yes"

        # the first answer waits until the new binding reaches the authorizer's cache
        eventually(lambda: allowed("get", "queues.scheduling.run.ai", ""), timeout=30)
        for verb, resource, sub in WRITES:
            assert allowed(verb, resource, sub), (verb, resource, sub)
    finally:
        subprocess.run(
            [kubectl, "--kubeconfig", kubeconfig, "delete", "-f", "-", "--wait=false"],
            input=stream,
            capture_output=True,
            text=True,
            timeout=60,
        )


def test_without_the_controller_the_documented_patch_releases(
    api: tuple[str, Kube], kubectl: str, tmp_path: Path
) -> None:
    """The controller is gone: a protected Queue and QueueTree deleted stay Terminating; the
    commands of docs/gitops.md take the finalizer off and they go."""
    kubeconfig, kube = api
    folder = tmp_path / "queues"
    folder.mkdir()
    for name, text in FILES.items():
        (folder / name).write_text(text)
    _kubectl(kubectl, kubeconfig, "apply", "-f", str(folder))
    _, stop = _controller(kube)
    try:
        eventually(lambda: _protected(kube), timeout=30)
    finally:
        stop()
    for name in ("1-top.yaml", "3-tree.yaml"):
        _kubectl(kubectl, kubeconfig, "delete", "-f", str(folder / name), "--wait=false")
    time.sleep(0.5)
    for res, name in ((QUEUES, "p-top"), (TREES, "p-tree")):
        obj = _get(kube, res, name)
        assert obj is not None and obj["metadata"].get("deletionTimestamp"), name
    _run_documented(kubectl, kubeconfig, "Deleting in any order", "kubectl patch")

    def released() -> bool:
        left = [n for r, n in ((QUEUES, "p-top"), (TREES, "p-tree")) if _get(kube, r, n)]
        assert not left, left
        return True

    eventually(released, timeout=15)


def test_worst_order_through_the_admission_webhook(
    real_cluster: Any, kubectl: str, tmp_path: Path
) -> None:
    """The same delete with `kai webhook` registered with the real API server (as installed
    by default): the webhook accepts every delete, each with a warning naming what still uses
    the queue, and lets every write of the controller's protection through."""
    kubeconfig = str(real_cluster.kubeconfig)
    kube = Kube.from_kubeconfig(kubeconfig)
    bootstrap(kube)
    create_if_absent(
        kube,
        NAMESPACES,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kai-scheduler"}},
    )
    port = free_port()
    app = WebhookApp(
        kube,
        Options(
            port=port,
            host="127.0.0.1",
            self_register=f"https://127.0.0.1:{port}",
            cert_secret=f"kai-webhook-certs-{uuid.uuid4().hex[:6]}",
            publish_delay=1.0,
        ),
    ).start()
    stop: Callable[[], None] | None = None
    try:
        folder = tmp_path / "queues"
        folder.mkdir()
        for name, text in FILES.items():
            (folder / name).write_text(text)
        _kubectl(kubectl, kubeconfig, "apply", "-f", str(folder))
        _, stop = _controller(kube)
        eventually(lambda: _protected(kube), timeout=30)
        _start_workload(kube)  # the PodGroup webhook wants its queue to exist: it does now
        out = _kubectl(kubectl, kubeconfig, "delete", "-f", str(folder), "--wait=false")
        for warning in (
            "Warning: Queue/p-top: queue 'p-top' still has child queues: p-mid; "
            f"it stays Terminating (finalizer {FINALIZER}) until they are gone",
            "Warning: QueueTree/p-tree: queue 'p-leaf' still has 1 workloads: "
            f"PodGroup/{NAMESPACE}/train",
        ):
            assert warning in out, out
        eventually(lambda: _held(kube), timeout=30)
        _end_workload(kube)
        eventually(lambda: _all_gone(kube), timeout=GONE_WITHIN)
    finally:
        if stop is not None:
            stop()
        app.stop()
        _clean(kube)
        kube.close()

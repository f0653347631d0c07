"""kai controller end to end, on the embedded API server and on a real one.

`kubectl apply -k examples/gitops` (what the bundled Argo CD Application syncs), the controller
running: the Queues, the Topology and the ConfigMap equal `kai render`'s output field for field;
a quota changed in the applied document reaches the Queue within seconds and the scheduler's
next cycle; a removed queue with a running pod is kept (PruneBlocked) until the pod ends; the
controller killed with SIGKILL at random moments 20 times converges to the same objects and
never deletes a Queue it does not own.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_helpers import both_servers

from helpers.polling import eventually
from kai.kube.client import ApiError, Kube
from kai.kube.events import EventRecorder
from kai.kube.resources import CONFIGMAPS, EVENTS, NAMESPACES, PODS, QUEUES, TOPOLOGIES
from kai.kube.writes import create_if_absent
from kai.reconcilers.gitops_controller import DOCUMENTS, ControllerOptions, start_controller
from kai.sim.system import System, SystemOptions

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "gitops"
KINDS = {"Queue": QUEUES, "Topology": TOPOLOGIES, "ConfigMap": CONFIGMAPS}
SOURCE = "gitops.kai.scheduler/source"


@pytest.fixture(params=["embedded", "real"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Kube]]:
    """(kubeconfig, client) of a fresh embedded API server, or of this worker's real one."""
    yield from both_servers(request, tmp_path, cleanup=_clean)


def _clean(kube: Kube) -> None:
    """Leave the session's real cluster as we found it: the controller is stopped, so its
    in-use finalizers are taken off first (nothing would remove them any more)."""
    for res in (*DOCUMENTS.values(), QUEUES):
        for obj in kube.list(res).get("items") or []:
            name = obj["metadata"]["name"]
            if obj["metadata"].get("finalizers"):
                with contextlib.suppress(ApiError):
                    kube.patch(res, name, {"metadata": {"finalizers": None}})
            with contextlib.suppress(ApiError):
                kube.delete(res, name)
    for topology in kube.list(TOPOLOGIES).get("items") or []:
        if SOURCE in (topology["metadata"].get("annotations") or {}):
            kube.delete(TOPOLOGIES, topology["metadata"]["name"])
    with contextlib.suppress(ApiError):
        kube.delete(CONFIGMAPS, "kai-scheduler-config", "kai-scheduler")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A copy of examples/gitops that the test edits, as a pull request would."""
    target = tmp_path / "gitops"
    shutil.copytree(EXAMPLES, target)
    return target


def _kubectl(kubectl: str, kubeconfig: str, *args: str) -> str:
    run = subprocess.run(
        [kubectl, "--kubeconfig", kubeconfig, *args], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def _render(path: Path) -> list[dict[str, Any]]:
    run = subprocess.run(
        [sys.executable, "-m", "kai.cli", "render", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [o for o in yaml.safe_load_all(run.stdout) if o]


def _mismatches(kube: Kube, rendered: list[dict[str, Any]]) -> list[str]:
    """Where the cluster differs from `kai render`'s objects (empty: equal field for field)."""
    out = []
    for want in rendered:
        md = want["metadata"]
        try:
            have = kube.get(KINDS[want["kind"]], md["name"], md.get("namespace"))
        except ApiError as exc:
            out.append(f"{want['kind']} {md['name']}: {exc.status}")
            continue
        for part in ("spec", "data"):
            if want.get(part) != have.get(part):
                out.append(f"{want['kind']} {md['name']} {part}: {have.get(part)} != {want[part]}")
        if not md["annotations"][SOURCE].startswith("Queue/"):  # a Queue written directly: as is
            for part in ("labels", "annotations"):
                have_part = have["metadata"].get(part) or {}
                for key, value in md.get(part, {}).items():
                    if have_part.get(key) != value:
                        out.append(f"{want['kind']} {md['name']} {part}.{key}")
    managed = {
        q["metadata"]["name"]
        for q in kube.list(QUEUES, label_selector="app.kubernetes.io/managed-by=kai")["items"]
        if not (q["metadata"].get("annotations") or {}).get(SOURCE, "Queue/").startswith("Queue/")
    }
    wanted = {o["metadata"]["name"] for o in rendered if o["kind"] == "Queue"}
    out += [f"Queue {name}: not in kai render's output" for name in sorted(managed - wanted)]
    return out


def _converged(kube: Kube, rendered: list[dict[str, Any]]) -> bool:
    mismatches = _mismatches(kube, rendered)
    assert not mismatches, mismatches
    assert _all_ready(kube), "some document is not Ready"
    return True


def _conditions(kube: Kube, kind: str, name: str) -> dict[str, dict[str, Any]]:
    doc = kube.get(DOCUMENTS[kind], name)
    status = doc.get("status") or {}
    if status.get("observedGeneration") != doc["metadata"].get("generation"):
        return {}
    return {c["type"]: c for c in status.get("conditions") or []}


def _all_ready(kube: Kube) -> bool:
    """Every document Ready at its current generation (AssertionError naming those that are
    not, for the failure message)."""
    waiting = []
    for kind, res in DOCUMENTS.items():
        for doc in kube.list(res)["items"]:
            ready = _conditions(kube, kind, doc["metadata"]["name"]).get("Ready") or {}
            if ready.get("status") != "True":
                waiting.append((kind, doc["metadata"]["name"], doc.get("status")))
    assert not waiting, waiting
    return True


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


NLP_QUOTA = 'quota: {gpu: 48, cpu: "768", memory: 12Ti}\n    namespaces: [team-nlp]'


def test_controller_end_to_end(  # noqa: PLR0915  (one story: each step builds on the last)
    api: tuple[str, Kube], kubectl: str, repo: Path
) -> None:
    kubeconfig, kube = api
    _kubectl(kubectl, kubeconfig, "apply", "-k", str(repo))
    hand_made_uid = kube.get(QUEUES, "default-queue")["metadata"]["uid"]
    recorder = EventRecorder(kube, "kai-controller").start()
    controller, informers = start_controller(
        kube, recorder, ControllerOptions(resync=5, blocked_recheck=0.5)
    )
    scheduler = System(
        kubeconfig,
        SystemOptions(components=("scheduler",), leader_election=False, period=0.2),
    ).start()
    try:
        # 1. the Queues equal kai render's output, field for field
        rendered = _render(repo)
        assert len([o for o in rendered if o["kind"] == "Queue"]) == 17
        eventually(lambda: _converged(kube, rendered), timeout=30)
        objects = kube.get(DOCUMENTS["QueueTree"], "research-teams")["status"]["objects"]
        assert len(objects) == 7  # 6 Queues and the ConfigMap (their namespaces)

        # 2. one quota changed in the applied document: Queue and scheduler follow
        _edit(repo / "queues" / "research.yaml", NLP_QUOTA, NLP_QUOTA.replace("48", "40", 1))
        _kubectl(kubectl, kubeconfig, "apply", "-f", str(repo / "queues" / "research.yaml"))
        started = time.monotonic()  # kubectl has returned: the document is stored
        eventually(
            lambda: kube.get(QUEUES, "nlp")["spec"]["resources"]["gpu"]["quota"] == 40,
            timeout=10,
        )
        queue_seconds = time.monotonic() - started

        def scheduler_sees() -> bool:
            built = scheduler.scheduler.last_built if scheduler.scheduler else None
            queues = {q.name: q for q in built.snapshot.queues} if built else {}
            return "nlp" in queues and queues["nlp"].resources["gpu"].quota == 40

        eventually(scheduler_sees, timeout=10)
        print(
            f"\nquota change -> Queue {queue_seconds:.2f} s, "
            f"-> scheduler cycle {time.monotonic() - started:.2f} s"
        )
        assert not _mismatches(kube, _render(repo))

        # 3. an invalid document changes nothing; the condition carries kai validate's rule
        _edit(repo / "queues" / "research.yaml", "quota: {gpu: 128,", "quota: {gpu: 1280,")
        _kubectl(kubectl, kubeconfig, "apply", "-f", str(repo / "queues" / "research.yaml"))
        invalid = eventually(
            lambda: (
                _conditions(kube, "QueueTree", "research-teams").get("Invalid", {}).get("status")
                == "True"
                and _conditions(kube, "QueueTree", "research-teams")["Invalid"]
            )
        )
        assert invalid["reason"] == "ChildrenQuotaSum", invalid
        assert invalid["message"].startswith(
            "[children-quota-sum] QueueTree/departments queues[0] (research) quota.gpu: "
            "the children's gpu quotas sum to 1400"
        ), invalid
        assert kube.get(QUEUES, "foundation-models")["spec"]["resources"]["gpu"]["quota"] == 128
        _edit(repo / "queues" / "research.yaml", "quota: {gpu: 1280,", "quota: {gpu: 128,")
        _kubectl(kubectl, kubeconfig, "apply", "-f", str(repo / "queues" / "research.yaml"))
        eventually(lambda: _all_ready(kube), timeout=15)

        # 4. a queue with a running pod is removed: PruneBlocked, pruned once the pod ends
        create_if_absent(
            kube, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ci"}}
        )
        pod = kube.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "bench",
                    "namespace": "ci",
                    "labels": {"kai.scheduler/queue": "ci"},
                },
                "spec": {
                    "schedulerName": "nobody",
                    "containers": [{"name": "c", "image": "busybox"}],
                },
            },
        )
        kube.patch(PODS, "bench", {"status": {"phase": "Running"}}, "ci", sub="status")
        platform = repo / "queues" / "platform.yaml"
        text = platform.read_text()
        start = text.index("  - name: ci\n")
        end = text.index("  - name: data-pipelines\n")
        platform.write_text(text[:start] + text[end:])
        _kubectl(kubectl, kubeconfig, "apply", "-f", str(platform))
        blocked = eventually(
            lambda: (
                _conditions(kube, "QueueTree", "platform-teams")
                .get("PruneBlocked", {})
                .get("status")
                == "True"
                and _conditions(kube, "QueueTree", "platform-teams")["PruneBlocked"]
            ),
            timeout=15,
        )
        assert "queue ci is kept: held by pod ci/bench" in blocked["message"], blocked
        assert kube.get(QUEUES, "ci")["metadata"]["uid"]

        def reasons() -> set[str]:
            return {
                e["reason"]
                for e in kube.list(EVENTS, "default")["items"]
                if e["involvedObject"].get("name") == "platform-teams"
            }

        eventually(lambda: "PruneBlocked" in reasons(), timeout=10)
        kube.patch(PODS, "bench", {"status": {"phase": "Succeeded"}}, "ci", sub="status")

        def gone() -> bool:
            try:
                kube.get(QUEUES, "ci")
            except ApiError as exc:
                return exc.status == 404
            return False

        eventually(gone, timeout=15)
        eventually(lambda: "Pruned" in reasons(), timeout=10)
        eventually(lambda: _all_ready(kube), timeout=15)
        assert not _mismatches(kube, _render(repo))
        assert pod["metadata"]["uid"]
        # the hand-made Queue was never touched
        assert kube.get(QUEUES, "default-queue")["metadata"]["uid"] == hand_made_uid
    finally:
        scheduler.stop()
        controller.stop()
        informers.stop()
        recorder.stop()


def _spawn(kubeconfig: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kai.cli",
            "controller",
            "--kubeconfig",
            kubeconfig,
            "--no-leader-election",
            "--log-level",
            "WARNING",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_kill_9_twenty_times(api: tuple[str, Kube], kubectl: str, repo: Path) -> None:
    kubeconfig, kube = api
    _kubectl(kubectl, kubeconfig, "apply", "-k", str(repo))
    hand = {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "hand-made", "labels": {"app.kubernetes.io/managed-by": "kai"}},
        "spec": {
            "parentQueue": "research",
            "resources": {
                r: {"quota": 0, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")
            },
        },
    }
    kube.create(QUEUES, hand)
    unowned = {
        q["metadata"]["name"]: q["metadata"]["uid"]
        for q in kube.list(QUEUES)["items"]
        if q["metadata"]["name"] in ("default-queue", "hand-made")
    }
    research = repo / "queues" / "research.yaml"
    platform = repo / "queues" / "platform.yaml"
    original = {research: research.read_text(), platform: platform.read_text()}
    rng = random.Random(12)
    kills = 0
    for round_ in range(20):
        # give every run work to do: quotas change, a queue comes and goes
        gpu = 40 + round_ % 5
        research.write_text(
            original[research].replace('gpu: 48, cpu: "768"', f'gpu: {gpu}, cpu: "768"', 1)
        )
        if round_ % 2:
            text = original[platform]
            start = text.index("  - name: notebooks\n")
            platform.write_text(text[:start])
        else:
            platform.write_text(original[platform])
        _kubectl(kubectl, kubeconfig, "apply", "-k", str(repo))
        proc = _spawn(kubeconfig)
        time.sleep(rng.uniform(0.8, 3.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        kills += 1
        for name, uid in unowned.items():
            assert kube.get(QUEUES, name)["metadata"]["uid"] == uid, name
    assert kills == 20
    # the final documents, then one run to the end
    research.write_text(original[research].replace('gpu: 48, cpu: "768"', 'gpu: 44, cpu: "768"', 1))
    platform.write_text(original[platform])
    _kubectl(kubectl, kubeconfig, "apply", "-k", str(repo))
    proc = _spawn(kubeconfig)
    try:
        rendered = _render(repo)
        eventually(lambda: _converged(kube, rendered), timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    for name, uid in unowned.items():
        assert kube.get(QUEUES, name)["metadata"]["uid"] == uid, name
    assert kube.get(QUEUES, "nlp")["spec"]["resources"]["gpu"]["quota"] == 44

"""kai explain / snapshot / simulate --snapshot / queues on snapshots: one built situation per
reason of the taxonomy, the numbers, the snapshot format and its errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from situations import situations

from kai.cli import main
from kai.insight.explain import TargetError, explain
from kai.reconcilers.cluster_snapshot import (
    KINDS,
    ClusterSnapshot,
    SnapshotFormatError,
    from_document,
    load,
)
from kai.reconcilers.snapshot_builder import parse_time
from kai.scheduler.reasons import PRECEDENCE, PendingReason, classify, node_counts
from kai.scheduler.result import Reason

NOW = parse_time("2026-12-01T12:00:00Z") or 0.0
SITUATIONS = situations()


def snapshot_of(world: dict[str, list[dict[str, Any]]]) -> ClusterSnapshot:
    snap = ClusterSnapshot(captured_at=NOW)
    for kind in KINDS:
        snap.objects[kind] = world.get(kind, [])
    return snap


@pytest.mark.parametrize("reason", list(SITUATIONS))
def test_first_reason_of_each_built_situation(reason: str) -> None:
    found = explain(snapshot_of(SITUATIONS[reason]), "work/target")
    assert found.reasons, reason
    assert found.reasons[0].reason.value == reason
    doc = found.as_dict()
    assert doc["firstReason"]["reason"] == reason
    assert doc["podGroup"] == "work/target"
    assert found.unblock, "every reason says what would unblock it"


def test_every_reason_of_the_taxonomy_has_a_situation() -> None:
    assert set(SITUATIONS) == {r.value for r in PendingReason}


def test_the_numbers() -> None:
    over = explain(snapshot_of(SITUATIONS["OverLimit"]), "target").as_dict()
    assert (
        "limit 4 GPUs, allocated 2 GPUs, the job requests 4 GPUs"
        in (over["firstReason"]["message"])
    )
    assert over["queuePath"][0]["queue"] == "team"
    gpu = over["queuePath"][0]["resources"]["gpu"]
    assert (gpu["quota"], gpu["limit"], gpu["allocated"]) == (2, 4, 2)
    assert "with a limit of at least 6" in over["unblock"][0]
    assert over["positionInQueue"] == {"position": 1, "of": 1}

    nofit = explain(snapshot_of(SITUATIONS["NoNodeFits"]), "work/target-0").as_dict()
    assert nofit["pod"] == "work/target-0"
    assert nofit["firstReason"]["nodes"] == {"insufficient gpu": 2}
    assert "no node has 16 GPUs (the largest has 8)" in nofit["unblock"][0]

    fair = explain(snapshot_of(SITUATIONS["WaitingForFairShare"]), "target").as_dict()
    assert "holds 8 GPUs of its fair share 8" in fair["firstReason"]["message"]
    assert [r["reason"] for r in fair["otherReasons"]] == ["NoNodeFits"]

    delayed = explain(snapshot_of(SITUATIONS["PreemptionDelayNotElapsed"]), "target").as_dict()
    assert "within its preemption delay window (21600s)" in delayed["firstReason"]["message"]
    assert "may evict other jobs from 2026-12-01T16:00:00Z" in delayed["unblock"][0]

    evict = explain(snapshot_of(SITUATIONS["WaitingForEviction"]), "target").as_dict()
    assert "work/b-run" in evict["unblock"][0]


def test_position_in_queue_follows_the_job_order() -> None:
    world = json.loads(json.dumps(SITUATIONS["NoNodeFits"]))
    early = json.loads(json.dumps(world["podgroups"][0]))
    early["metadata"]["name"] = "early"
    early["metadata"]["creationTimestamp"] = "2026-12-01T09:00:00Z"
    pod = json.loads(json.dumps(world["pods"][0]))
    pod["metadata"].update(name="early-0", uid="uid-early-0")
    pod["metadata"]["annotations"]["pod-group-name"] = "early"
    world["podgroups"].append(early)
    world["pods"].append(pod)
    found = explain(snapshot_of(world), "work/target").as_dict()
    assert found["positionInQueue"] == {"position": 2, "of": 2}


def test_unknown_and_ambiguous_targets() -> None:
    snap = snapshot_of(SITUATIONS["NoNodeFits"])
    with pytest.raises(TargetError, match="no PodGroup or pod 'nope'"):
        explain(snap, "nope")
    with pytest.raises(TargetError, match="no PodGroup or pod 'other/target'"):
        explain(snap, "other/target")


def test_precedence_and_node_counts() -> None:
    reasons = [
        Reason(
            "PodSchedulingErrors",
            "task 'x' does not fit: 0/3 nodes are available: "
            "2 nodes: insufficient gpu; 1 node: untolerated taint",
        ),
        Reason("OverLimit", "queue 'q' would exceed its gpu limit"),
        Reason("QueueDoesNotExist", "queue 'q' is not a leaf queue (children: a)"),
    ]
    got = [c.reason for c in classify(reasons)]
    assert got == [
        PendingReason.QUEUE_NOT_LEAF,
        PendingReason.OVER_LIMIT,
        PendingReason.NO_NODE_FITS,
    ]
    assert list(PRECEDENCE) == list(PendingReason)
    assert node_counts(reasons[0].message) == {"insufficient gpu": 2, "untolerated taint": 1}


def test_explain_names_the_untolerated_taints() -> None:
    """Not "untolerated taint" alone: which taint (key, value, effect) on how many nodes; a
    tolerated taint and a PreferNoSchedule one are not named."""
    world = json.loads(json.dumps(SITUATIONS["NoNodeFits"]))
    world["pods"][0]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    world["pods"][0]["spec"]["tolerations"] = [{"key": "team", "operator": "Exists"}]
    n0, n1 = world["nodes"]
    n0["spec"]["taints"] = [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "team", "value": "a", "effect": "NoSchedule"},
    ]
    n1["spec"]["taints"] = [
        {"key": "dedicated", "value": "infer", "effect": "NoExecute"},
        {"key": "soft", "effect": "PreferNoSchedule"},
    ]
    found = explain(snapshot_of(world), "work/target")
    doc = found.as_dict()
    assert doc["firstReason"]["nodes"] == {"untolerated taint": 2}
    assert doc["firstReason"]["untoleratedTaints"] == {
        "dedicated=infer:NoExecute": 1,
        "node.kubernetes.io/not-ready:NoSchedule": 1,
    }
    from kai.insight.explain import text

    out = text(found)
    assert "node.kubernetes.io/not-ready:NoSchedule (on 1 node(s))" in out
    assert "dedicated=infer:NoExecute (on 1 node(s))" in out
    assert "team=a" not in out
    # without a taint in the way, nothing is named
    plain = explain(snapshot_of(SITUATIONS["NoNodeFits"]), "work/target").as_dict()
    assert "untoleratedTaints" not in plain["firstReason"]


# -- the snapshot file ------------------------------------------------------------------------
def test_snapshot_round_trip_and_no_secrets(tmp_path: Path) -> None:
    from kai.reconcilers.cluster_snapshot import sanitize

    world = SITUATIONS["WaitingForEviction"]
    snap = snapshot_of({k: [sanitize(k, o) for o in v] for k, v in world.items()})
    path = tmp_path / "snap.json"
    snap.write(path)
    text = path.read_text()
    assert "s3cr3t" not in text and '"env"' not in text and '"command"' not in text
    again = load(path)
    assert again.objects == snap.objects
    assert again.captured_at == pytest.approx(NOW)
    first = explain(again, "target").reasons[0].reason
    assert first is PendingReason.WAITING_FOR_EVICTION


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"formatVersion": 2}, "formatVersion: 2 is not supported"),
        ({"kind": "Other"}, "apiVersion/kind: expected kai.scheduler/v1alpha1 ClusterSnapshot"),
        ({"capturedAt": "yesterday"}, "capturedAt: expected an RFC 3339 time"),
        ({"configMap": "nons"}, "configMap: expected NAMESPACE/NAME"),
        ({"objects": {"secrets": []}}, "objects: unknown kind(s) secrets"),
        ({"objects": {"pods": [{"metadata": {}}]}}, "objects.pods[0].metadata.name: missing"),
    ],
)
def test_snapshot_errors_name_the_field(change: dict[str, Any], message: str) -> None:
    doc = snapshot_of({}).to_document()
    doc.update(change)
    with pytest.raises(SnapshotFormatError, match=r"f\.json: ") as info:
        from_document(doc, "f.json")
    assert message in str(info.value)


def test_snapshot_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{\n  nope")
    with pytest.raises(SnapshotFormatError, match=r"bad.json:2:3: not JSON"):
        load(bad)
    with pytest.raises(SnapshotFormatError, match="cannot read"):
        load(tmp_path / "missing.json")


# -- the commands on a snapshot file ------------------------------------------------------
def _write(tmp_path: Path, reason: str) -> str:
    path = tmp_path / f"{reason}.json"
    snapshot_of(SITUATIONS[reason]).write(path)
    return str(path)


def test_explain_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "OverLimit")
    assert main(["explain", "work/target", "--snapshot", path, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["firstReason"]["reason"] == "OverLimit"
    assert main(["explain", "target", "--snapshot", path]) == 0
    out = capsys.readouterr().out
    assert "first reason: OverLimit: queue 'team' would exceed its gpu limit" in out
    assert "would unblock: queue 'team' at limit 4 GPUs" in out
    assert main(["explain", "ghost", "--snapshot", path]) == 1
    assert "no PodGroup or pod 'ghost'" in capsys.readouterr().err
    assert main(["explain", "x", "--snapshot", str(tmp_path / "none.json")]) == 2


def test_simulate_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "WaitingForEviction")
    assert main(["simulate", "--snapshot", path, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pipelined"] == [{"pod": "work/target-0", "node": "n1"}]
    assert [e["pod"] for e in doc["evictions"]] == ["work/b-run2-0"]
    assert main(["simulate", "--snapshot", path]) == 0
    assert "evict     work/b-run2-0 (reclaim" in capsys.readouterr().out
    assert main(["simulate"]) == 2
    assert main(["simulate", "--snapshot", path, "--check"]) == 2


def test_queues_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "WaitingForFairShare")
    assert main(["queues", "--snapshot", path, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_name = {q["name"]: q for q in doc["queues"]}
    assert by_name["a"]["quota"]["gpu"] == 8
    assert by_name["a"]["allocated"]["gpu"] == 8
    assert by_name["a"]["pending"]["gpu"] == 4
    assert by_name["a"]["fairShare"]["gpu"] == 8
    assert main(["queues", "--snapshot", path]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:4] == ["QUEUE", "PRIO", "GPU-QUOTA", "GPU-FAIR"]
    assert main(["queues", "--snapshot", path, "--watch"]) == 2

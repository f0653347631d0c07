"""kai plan: the Queue diff, the fair share before/after and the workloads it affects, on a
change to examples/gitops that lowers one queue's quota; exit statuses."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from situations import node, pod, podgroup

from kai.cli import main
from kai.reconcilers.cluster_snapshot import KINDS, ClusterSnapshot
from kai.reconcilers.snapshot_builder import parse_time

EXAMPLES = Path(__file__).parents[3] / "examples" / "gitops"
NOW = parse_time("2026-12-01T12:00:00Z") or 0.0


def _rendered_queues() -> list[dict[str, Any]]:
    from kai.gitops.compile import compile_documents
    from kai.gitops.validate import validate_paths

    report = validate_paths([str(EXAMPLES)])
    assert report.ok
    return [o for o in compile_documents(report.documents) if o["kind"] == "Queue"]


def _job(name: str, ns: str, queue: str, node_name: str | None) -> list[dict[str, Any]]:
    pg = podgroup(name, queue)
    pg["metadata"]["namespace"] = ns
    p = pod(f"{name}-0", name, queue, 8, node_name=node_name)
    p["metadata"]["namespace"] = ns
    p["metadata"]["uid"] = f"uid-{ns}-{name}"
    return [pg, p]


def cluster_snapshot(path: Path) -> str:
    """32 nodes x 8 GPUs: nlp runs 5 x 8 GPUs, vision runs 2 x 8 and waits for 30 x 8 more,
    pretraining waits for 25 x 8: research's 256 GPUs are contested."""
    objects: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    objects["queues"] = _rendered_queues()
    objects["nodes"] = [node(f"n{i:02}", i) for i in range(32)]
    placed = iter(f"n{i:02}" for i in range(32))
    jobs = [_job(f"nlp-{i}", "team-nlp", "nlp", next(placed)) for i in range(5)]
    jobs += [_job(f"vis-{i}", "team-vision", "vision", next(placed)) for i in range(2)]
    jobs += [_job(f"vis-wait-{i:02}", "team-vision", "vision", None) for i in range(30)]
    jobs += [_job(f"pre-{i:02}", "fm-pretraining", "pretraining", None) for i in range(25)]
    for objs in jobs:
        for obj in objs:
            objects["podgroups" if obj["kind"] == "PodGroup" else "pods"].append(obj)
    snap = ClusterSnapshot(captured_at=NOW, objects=objects)
    snap.write(path)
    return str(path)


def lowered(tmp_path: Path, gpu: int = 8) -> Path:
    target = tmp_path / "gitops"
    shutil.copytree(EXAMPLES, target)
    research = target / "queues" / "research.yaml"
    text = research.read_text()
    old = "  - name: nlp\n    displayName: NLP\n    quota: {gpu: 48,"
    assert old in text
    research.write_text(text.replace(old, old.replace("gpu: 48", f"gpu: {gpu}")))
    return target


def test_plan_names_the_queue_its_fair_share_and_the_reclaimable_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = cluster_snapshot(tmp_path / "snap.json")
    changed = lowered(tmp_path)
    code = main(
        ["plan", str(changed), "--base-dir", str(EXAMPLES), "--snapshot", snap, "-o", "json"]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["changed"] is True
    queues = {q["name"]: q for q in doc["queues"]}
    nlp = queues["nlp"]
    assert nlp["action"] == "changed"
    assert {"field": "spec.resources.gpu.quota", "before": 48, "after": 8} in nlp["changes"]
    assert nlp["allocated"]["gpu"] == 40
    assert nlp["fairShareBefore"]["gpu"] == 40
    assert nlp["fairShareAfter"]["gpu"] < 40
    reclaimable = [w for w in doc["workloads"] if w["effect"] == "reclaimable"]
    assert reclaimable and {w["queue"] for w in reclaimable} == {"nlp"}
    freed = 8 * len(reclaimable)
    assert 40 - freed <= nlp["fairShareAfter"]["gpu"] < 40 - freed + 8
    # every other queue is unchanged
    assert [q for q in doc["queues"] if q["action"] != "unchanged"] == [nlp]

    assert main(["plan", str(changed), "--base-dir", str(EXAMPLES), "--snapshot", snap]) == 0
    markdown = capsys.readouterr().out
    assert "| `nlp` | changed | `spec.resources.gpu.quota`: `48` → `8` |" in markdown
    assert "**reclaimable**" in markdown and "team-nlp/nlp-" in markdown


def test_plan_without_changes_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(EXAMPLES), "--base-dir", str(EXAMPLES), "-o", "text"]) == 0
    assert capsys.readouterr().out == "no changes\n"
    assert main(["plan", str(EXAMPLES), "--base-dir", str(EXAMPLES), "-o", "markdown"]) == 0
    assert "No Queue changes." in capsys.readouterr().out


def test_invalid_change_exits_1_with_validate_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = lowered(tmp_path, gpu=400)  # children's quotas above research's 256
    assert main(["plan", str(broken), "--base-dir", str(EXAMPLES)]) == 1
    captured = capsys.readouterr()
    assert "departments.yaml:17:18: error: [children-quota-sum]" in captured.out
    assert "nlp 400" in captured.out
    assert "validation error(s); no plan" in captured.err


def test_base_from_a_git_ref(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo / "gitops")

    def git(*argv: str) -> None:
        subprocess.run(["git", "-C", str(repo), *argv], check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "base")
    research = repo / "gitops" / "queues" / "research.yaml"
    research.write_text(
        research.read_text().replace(
            'quota: {gpu: 32, cpu: "512"', 'quota: {gpu: 24, cpu: "512"', 1
        )
    )
    assert main(["plan", str(repo / "gitops"), "-o", "json"]) == 0  # base: HEAD
    doc = json.loads(capsys.readouterr().out)
    changed = [q["name"] for q in doc["queues"] if q["action"] != "unchanged"]
    assert changed == ["alignment"]
    assert main(["plan", str(repo / "gitops"), "--base", "no-such-ref"]) == 2
    assert "--base no-such-ref" in capsys.readouterr().err


def test_removed_queue_with_workloads_is_prune_blocked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = cluster_snapshot(tmp_path / "snap.json")
    target = tmp_path / "gitops"
    shutil.copytree(EXAMPLES, target)
    research = target / "queues" / "research.yaml"
    text = research.read_text()
    start = text.index("  - name: nlp\n")
    end = text.index("  - name: vision\n")
    research.write_text(text[:start] + text[end:])
    (target / "policies" / "scheduler.yaml").write_text(
        (target / "policies" / "scheduler.yaml").read_text()
    )
    code = main(
        ["plan", str(target), "--base-dir", str(EXAMPLES), "--snapshot", snap, "-o", "json"]
    )
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    queues = {q["name"]: q for q in json.loads(out.out)["queues"]}
    assert queues["nlp"]["action"] == "removed"
    assert queues["nlp"]["pruneBlocked"] == "5 PodGroup(s) still use it"

"""Decision digests: prove that a refactor of the core changed no decision.

A digest is a SHA-256 over a session's decisions, each list sorted: binds (task, node, resource
type, devices, portion, GPU groups), pipelined tasks (task, node, groups, action) and evictions
(task, action). Reasons (why a job stays pending) get a digest of their own, so a deliberate change
of wording shows up separately from a change of decision.

Two families are covered:

- every scenario file under ``tests/scenarios/`` (all of its rounds, through ``kai simulate``'s
  JSON output, which names every task's status, node and GPU groups);
- the benchmark clusters (``generate_cluster`` with the allocate session and the full five-action
  cycle, ``bench_reclaim``'s full cluster with a 64-GPU gang, ``bench_topology``'s
  fractional/topology mix) at a small size, and at the benchmark sizes with ``--large``.

``python bench/digests.py --write`` records them in ``tests/digests.json``;
``python bench/digests.py --check [--large]`` compares (exit 1 on any difference, naming it).
The unit test ``tests/unit/test_decision_digests.py`` checks the small ones on every run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCENARIOS = ROOT / "tests" / "scenarios"
DIGESTS = ROOT / "tests" / "digests.json"
SMALL = 250  # nodes: every cluster family at this size runs in a few seconds together
LARGE = 1000

sys.path.insert(0, str(HERE))


def _sha(lines: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for line in sorted(lines):
        digest.update(line.encode())
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def result_digests(result: object) -> dict[str, str]:
    """Decision and reason digests of one :class:`kai.scheduler.result.SessionResult`."""
    binds = [
        f"bind {b.task} {b.node} {b.received_resource_type} {b.gpu_count} {b.gpu_portion:.6f} "
        f"{','.join(b.gpu_groups)}"
        for b in result.binds  # type: ignore[attr-defined]
    ]
    pipelined = [
        f"pipe {p.task} {p.node} {','.join(p.gpu_groups)} {p.action}"
        for p in result.pipelined  # type: ignore[attr-defined]
    ]
    evictions = [f"evict {e.task} {e.action}" for e in result.evictions]  # type: ignore[attr-defined]
    reasons = [
        f"{job} {r.code} {r.message}"
        for job, rs in result.job_reasons.items()  # type: ignore[attr-defined]
        for r in rs
    ]
    return {
        "decisions": _sha([*binds, *pipelined, *evictions]),
        "reasons": _sha(reasons),
        "counts": f"{len(binds)}b/{len(pipelined)}p/{len(evictions)}e",
    }


def _scenario_digest(path: Path) -> dict[str, str]:
    from kai.commands.simulate import execute

    outcome = execute(str(path), output="json", check=False)
    if outcome.code not in (0, 1):
        return {"decisions": f"exit {outcome.code}", "reasons": "", "counts": ""}
    data = json.loads(outcome.stdout)
    decisions = [
        f"{number} {json.dumps(round_.get('result'), sort_keys=True)}"
        for number, round_ in enumerate(data.get("rounds", []))
    ]
    return {"decisions": _sha(decisions), "reasons": "", "counts": f"{len(decisions)} rounds"}


def scenario_digests() -> dict[str, dict[str, str]]:
    return {
        path.relative_to(SCENARIOS).with_suffix("").as_posix(): _scenario_digest(path)
        for path in sorted(SCENARIOS.rglob("*.yaml"))
    }


def _clusters(nodes: int) -> dict[str, Callable[[], object]]:
    def generated(actions: list[str]) -> Callable[[], object]:
        def run() -> object:
            from generate_cluster import generate, to_snapshot
            from kai.scheduler.session import run_session

            return run_session(to_snapshot(generate(nodes, 1)), actions)

        return run

    def reclaim() -> object:
        from bench_reclaim import build
        from kai.scheduler.session import run_session

        return run_session(build(nodes, queues=3), ["reclaim"])

    def topology() -> object:
        from bench_topology import generate
        from kai.scheduler.session import run_session

        return run_session(generate(nodes, 1), ["allocate"])

    from kai.scheduler.errors import IMPLEMENTED_ACTIONS

    return {
        f"generated-{nodes}/allocate": generated(["allocate"]),
        f"generated-{nodes}/full-cycle": generated(list(IMPLEMENTED_ACTIONS)),
        f"reclaim-{nodes}/reclaim": reclaim,
        f"topology-{nodes}/allocate": topology,
    }


def cluster_digests(nodes: int) -> dict[str, dict[str, str]]:
    return {name: result_digests(run()) for name, run in _clusters(nodes).items()}


def compute(large: bool, scenarios: bool = True) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    if scenarios:
        found.update({f"scenario/{k}": v for k, v in scenario_digests().items()})
    found.update(cluster_digests(SMALL))
    if large:
        found.update(cluster_digests(LARGE))
    return found


def differences(expected: dict[str, dict[str, str]], found: dict[str, dict[str, str]]) -> list[str]:
    lines = []
    for name in sorted(found):
        if name not in expected:
            lines.append(f"{name}: no recorded digest (run --write after checking it)")
            continue
        for kind in ("decisions", "reasons"):
            if expected[name].get(kind) != found[name].get(kind):
                lines.append(
                    f"{name}: {kind} changed ({expected[name].get('counts')} -> "
                    f"{found[name].get('counts')})"
                )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="record the digests")
    mode.add_argument("--check", action="store_true", help="compare with the recorded digests")
    parser.add_argument(
        "--large", action="store_true", help=f"also the {LARGE}-node benchmark clusters"
    )
    args = parser.parse_args(argv)
    found = compute(args.large)
    recorded = json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {}
    if args.write:
        recorded.update(found)
        DIGESTS.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        print(f"digests: {len(found)} written to {DIGESTS.relative_to(ROOT)}")
        return 0
    lines = differences(recorded, found)
    for line in lines:
        print(line)
    print(f"digests: {len(found)} compared, {len(lines)} differ")
    return 1 if lines else 0


if __name__ == "__main__":
    raise SystemExit(main())

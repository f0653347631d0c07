"""``kai simulate`` end to end on generated scenarios (target: 1,000 nodes / 10,000 tasks < 5 s).

``python bench/simulate_end_to_end.py [NODES ...]`` (default 100 and 1000): writes a generated JSON
scenario per size (see ``generate_cluster.py``), runs ``kai simulate --output json`` as a real
process three times and prints the median wall time, then the in-process time of each phase
(load+validate, snapshot, core session, node figures + JSON output).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from generate_cluster import generate


def _kai() -> list[str]:
    script = Path(sys.executable).parent / "kai"
    return [str(script)] if script.exists() else [sys.executable, "-m", "kai.cli"]


def _phases(path: str) -> dict[str, float]:
    from kai.scenario import build_report, load_scenario, render_json, to_snapshot
    from kai.scenario.rounds import read_result
    from kai.scheduler.session import run_session

    marks = [time.perf_counter()]
    scenario = load_scenario(path)
    marks.append(time.perf_counter())
    snapshot = to_snapshot(scenario)
    marks.append(time.perf_counter())
    result = run_session(snapshot, scenario.actions)
    marks.append(time.perf_counter())
    from kai.scenario.convert import initial_state
    from kai.scenario.rounds import Round

    rounds = [Round(initial_state(scenario), read_result(scenario, result), None)]
    render_json(build_report(scenario, rounds, check=False))
    marks.append(time.perf_counter())
    names = ("load+validate", "snapshot", "core session", "figures+json")
    return {name: marks[i + 1] - marks[i] for i, name in enumerate(names)}


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [100, 1000]
    with tempfile.TemporaryDirectory() as tmp:
        for nodes in sizes:
            path = Path(tmp) / f"gen{nodes}.json"
            path.write_text(json.dumps(generate(nodes)))
            walls = []
            for _ in range(3):
                start = time.perf_counter()
                run = subprocess.run(
                    [*_kai(), "simulate", str(path), "--output", "json"],
                    capture_output=True,
                    check=False,
                )
                walls.append(time.perf_counter() - start)
                if run.returncode != 0:
                    print(run.stderr.decode(), file=sys.stderr)
                    raise SystemExit(f"kai simulate exited {run.returncode}")
            phases = _phases(str(path))
            detail = "  ".join(f"{k} {v:.2f}s" for k, v in phases.items())
            print(
                f"{nodes} nodes / {nodes * 10} tasks: kai simulate median "
                f"{statistics.median(walls):.2f}s (runs {', '.join(f'{w:.2f}' for w in walls)}); "
                f"{detail}"
            )


if __name__ == "__main__":
    main()

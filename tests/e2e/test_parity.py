"""Live = simulated: scenario files built as live clusters, scheduled by the live system until it
settles, and compared with ``kai simulate`` of the same file in rounds mode.

Each scenario is built on an API server (the embedded one, and this worker's real kube-apiserver
where the machine has one) in a node pool of its own (:mod:`kai.sim.scenario_live`) and scheduled
by a scheduler of that pool with the file's settings; one simulated kubelet serves every pool's
nodes. The harness plays the jobs' controllers (an evicted pod comes back pending, as the rounds
mode's update rule says) and waits until nothing changes for a while. The simulated side runs the
file's rounds (a single-session file gets rounds until its state stops changing). Per job, the
multiset of (status, node) of its tasks must be equal: tasks of one job are alike, and which of
two alike pods the live system takes first depends on creation times the file does not have.
A difference is a bug in one of the two paths. Then, for every pod the live scheduler marked
``PodScheduled=False``, `kai explain` of the same cluster must give the same reasons. The
scenarios run side by side (each pool is independent), so the whole set takes about as long as
its slowest few.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from e2e_helpers import system_starter

from kai.kube.client import Kube
from kai.kube.resources import PODS
from kai.reconcilers.cluster_snapshot import capture
from kai.scenario import load_scenario, model
from kai.scenario.convert import scheduler_config
from kai.scenario.rounds import run_scenario
from kai.scheduler.reasons import condition_text
from kai.scheduler.session import run_session
from kai.scheduler.snapshot import SchedulerConfig
from kai.sim import scenario_live
from kai.sim.system import System, bootstrap
from kube_emulator import ApiServer

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "tests" / "scenarios"
MAX_ROUNDS = 8
PARALLEL = 12  # scenarios built and scheduled at once on one server

State = dict[str, tuple[str, str | None]]


def _files() -> list[Path]:
    found = []
    for path in sorted(SCENARIOS.rglob("*.yaml")):
        with contextlib.suppress(Exception):
            if scenario_live.unsupported(load_scenario(str(path))) is None:
                found.append(path)
    return found


FILES = _files()
IDS = [str(p.relative_to(SCENARIOS)) for p in FILES]


def simulated(scenario: model.Scenario) -> State | None:
    """The file's final state: its own rounds, or rounds until the state stops changing (None
    when it still changes: nothing to compare a settled cluster with)."""
    if scenario.mode != "rounds":
        scenario = dataclasses.replace(
            scenario, mode="rounds", rounds=model.Rounds(until_match=MAX_ROUNDS, after_match=0)
        )
    rounds = run_scenario(scenario, lambda snap, actions: run_session(snap, actions))
    final = rounds[-1].next
    if final is None or rounds[-2].next != final:
        return None
    return {name: (task.status, task.node) for name, task in final.items()}


def by_job(scenario: model.Scenario, state: State) -> dict[str, list[tuple[str, str]]]:
    return {
        job.name: sorted((state[t.name][0], state[t.name][1] or "") for t in job.tasks)
        for job in scenario.jobs
    }


EXPLAINED: Counter[str] = Counter()  # kubeconfig -> pending pods whose explanation was compared


def run_live(kubeconfig: str, path: Path) -> str | None:
    """Build, schedule until settled, compare; the difference as text, or None."""
    scenario = load_scenario(str(path))
    expected = simulated(scenario)
    if expected is None:
        return "skip: the simulated state still changes after its rounds"
    prefix = f"p{uuid.uuid4().hex[:6]}"
    kube = Kube.from_kubeconfig(kubeconfig)
    systems: list[System] = []
    live = None
    try:
        live = scenario_live.build(kube, scenario, prefix, prefix)
        config = scheduler_config(scenario)
        system_starter(kubeconfig, systems)(config=config, shard=prefix, components=("scheduler",))
        state = scenario_live.settle(
            lambda: scenario_live.live_state(kube, live),
            lambda: scenario_live.recreate_missing(kube, live),
            quiet=3.0,
            timeout=90.0,
        )
        found, wanted = by_job(scenario, state), by_job(scenario, expected)
        differences = {
            job: {"live": found[job], "simulated": wanted[job]}
            for job in wanted
            if Counter(found[job]) != Counter(wanted[job])
        }
        if differences:
            return f"live and simulated differ: {differences}"
        # the live condition is written by the status writer after the cycle: a message may
        # be one cycle behind the settled state for a moment (a job placed in the last cycle
        # changes what the next one says of the others)
        for _ in range(4):
            disagreements, compared = explain_disagreements(kube, live, config)
            if not disagreements:
                break
            time.sleep(1.0)
        EXPLAINED[kubeconfig] += compared
        return f"kai explain disagrees: {disagreements}" if disagreements else None
    finally:
        for system in systems:
            system.stop()
        if live is not None:
            scenario_live.remove(kube, live)
        kube.close()


def on_real_server(name: str) -> bool:
    """The real server runs every scenario of the victim actions and the allocate files in
    rounds mode (78 files); the embedded one runs them all. The real one is the slower (a second
    of writes per scenario under load), and plain allocation is the same path on both."""
    return not name.startswith("allocate/") or "/cycle_" in name


def explain_disagreements(
    kube: Kube, live: scenario_live.LiveScenario, config: SchedulerConfig
) -> tuple[dict[str, dict[str, str]], int]:
    """For every pending pod the live scheduler marked ``PodScheduled=False``: what `kai explain`
    says of it (the same capture of the cluster, the scenario's node pool and settings) against
    the condition's message. Pods whose condition is not (yet) written are not compared."""
    from kai.insight.explain import Explanation, explain

    messages: dict[str, str] = {}
    for pod in kube.list(PODS, live.namespace)["items"]:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                messages[pod["metadata"]["name"]] = str(cond.get("message") or "")
    if not messages:
        return {}, 0
    snap = capture(kube)
    built = snap.build(config=config, node_pool=live.prefix)
    computed = (built, run_session(built.snapshot))
    out = {}
    for name, message in sorted(messages.items()):
        found = explain(snap, f"{live.namespace}/{name}", computed)
        said = condition_text(found.reasons) if isinstance(found, Explanation) else repr(found)
        if said != message:
            out[name] = {"live": message, "explain": said}
    return out, len(messages)


def run_all(kubeconfig: str, names: list[str]) -> dict[str, str | None]:
    kubelet: list[System] = []
    # one simulated kubelet and one binder (shared GPUs: reservation pods) for every pool
    system_starter(kubeconfig, kubelet)(components=("nodes", "binder"))
    paths = [SCENARIOS / name for name in names]
    try:
        with ThreadPoolExecutor(PARALLEL) as pool:
            outcomes = pool.map(lambda path: _guarded(kubeconfig, path), paths)
            return dict(zip(names, outcomes, strict=True))
    finally:
        for system in kubelet:
            system.stop()


def _guarded(kubeconfig: str, path: Path) -> str | None:
    try:
        return run_live(kubeconfig, path)
    except Exception as exc:  # reported by the scenario's own test case
        return f"{type(exc).__name__}: {exc}"


@pytest.fixture(params=["embedded", "real"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """(kubeconfig, the scenarios to run there)."""
    if request.param == "real":
        path = str(request.getfixturevalue("real_cluster").kubeconfig)
        kube = Kube.from_kubeconfig(path)
        bootstrap(kube)
        kube.close()
        yield path, [name for name in IDS if on_real_server(name)]
        return
    api = ApiServer(bookmark_interval=0.2).start()
    written = api.write_kubeconfig(tmp_path / "kubeconfig")
    kube = Kube.from_kubeconfig(str(written))
    bootstrap(kube)
    kube.close()
    try:
        yield str(written), IDS
    finally:
        api.stop()


@pytest.mark.parametrize("where", ["embedded", "real"])
def test_the_set_covers_every_action(where: str) -> None:
    names = [name for name in IDS if where == "embedded" or on_real_server(name)]
    actions = Counter(name.split("/")[0] for name in names)
    assert len(names) >= 40, actions
    for action in ("allocate", "reclaim", "preempt", "consolidation", "stalegangeviction"):
        assert actions[action] >= 1, actions


def test_live_settles_where_simulate_ends(server: tuple[str, list[str]]) -> None:
    """One test per server (the scenarios run side by side inside it): every scenario that
    settles in simulation settles live in the same place."""
    kubeconfig, names = server
    outcomes = run_all(kubeconfig, names)
    failed = {name: text for name, text in outcomes.items() if text and not text.startswith("skip")}
    compared = sum(1 for text in outcomes.values() if text is None or not text.startswith("skip"))
    assert compared >= 40, outcomes
    assert EXPLAINED[kubeconfig] >= 20, "too few pending pods to compare kai explain with"
    assert not failed, "\n".join(f"{name}: {text}" for name, text in sorted(failed.items()))

"""Validating a scenario document and building the typed :class:`Scenario` from it.

This module checks the top level and the cluster (config, topologies, nodes, queues); jobs, tasks
and ``expected`` are checked in :mod:`kai.scenario.validate_jobs`. Every problem of the
file is reported, each as ``FILE:LINE:COL: FIELD-PATH: message``.
"""

from __future__ import annotations

from typing import Any

from kai.api.untrusted_files import DEFAULT_LIMITS, FileLimits
from kai.scenario import model
from kai.scenario.field_checks import Checker, describe
from kai.scenario.source import Document, Path, ScenarioError, read_document
from kai.scenario.validate_cluster import check_nodes, check_queues, check_topologies
from kai.scenario.validate_expected import check_expected
from kai.scenario.validate_jobs import check_jobs
from kai.scenario.validate_tasks import Context

_TOP_REQUIRED = ("formatVersion", "id", "mode", "actions", "config", "nodes", "queues", "jobs")
_TOP_OPTIONAL = ("source", "notes", "rounds", "topologies", "expected")
_CONFIG_KEYS = (
    "kaiPlugins",
    "predicates",
    "proportion",
    "placement",
    "gpuSharingPlacement",
    "stalenessGracePeriodSeconds",
    "maxConsolidationPreemptees",
    "allowConsolidatingReclaim",
    "fairShareKValue",
)
_KAI_PLUGIN_SETS = ("default", "default-without-predicates")


def load_scenario(
    filename: str, *, require_expected: bool = False, limits: FileLimits = DEFAULT_LIMITS
) -> model.Scenario:
    """Read and validate one scenario file; raises :class:`ScenarioError` listing every problem."""
    return validate_document(read_document(filename, limits), require_expected=require_expected)


def validate_document(document: Document, *, require_expected: bool = False) -> model.Scenario:
    checker = Checker()
    checker.problems.extend(document.problems)
    scenario = _check_top(checker, document.data, require_expected)
    if checker.problems or scenario is None:
        located = sorted(
            ((document.position(p), i, p) for i, p in enumerate(checker.problems)),
            key=lambda item: (item[0], item[1]),
        )
        lines: list[str] = []
        for _, _, problem in located:
            line = document.format(problem)
            if line not in lines:
                lines.append(line)
        raise ScenarioError(lines or [f"{document.filename}:1:1: (document): invalid scenario"])
    return scenario


def _check_top(c: Checker, data: Any, require_expected: bool) -> model.Scenario | None:
    if not isinstance(data, dict):
        c.fail((), f"the top level must be a mapping, got {describe(data)}")
        return None
    top = c.mapping(data, (), _TOP_REQUIRED, _TOP_OPTIONAL)
    assert top is not None
    if "formatVersion" in top and not (
        isinstance(top["formatVersion"], int)
        and not isinstance(top["formatVersion"], bool)
        and top["formatVersion"] == 1
    ):
        c.fail(("formatVersion",), f"must be 1, got {describe(top['formatVersion'])}")
    scenario_id = c.string(top.get("id"), ("id",)) if "id" in top else None
    source = c.text(top["source"], ("source",)) if "source" in top else None
    notes = c.text(top["notes"], ("notes",)) if "notes" in top else None
    mode = c.choice(top["mode"], ("mode",), model.MODES) if "mode" in top else None
    actions = _check_actions(c, top.get("actions")) if "actions" in top else None
    rounds = _check_rounds(c, top, mode)
    config = _check_config(c, top["config"]) if "config" in top else None
    topologies = check_topologies(c, top.get("topologies", []))
    nodes = check_nodes(c, top["nodes"]) if "nodes" in top else None
    queues = check_queues(c, top["queues"]) if "queues" in top else None

    context = Context(
        topologies={t.name: t for t in topologies},
        topology_names=_raw_names(top.get("topologies")),
        node_names=_raw_names(top.get("nodes")),
        nodes_known=nodes is not None,
        queue_names=_raw_names(top.get("queues")),
        parent_queues=_raw_names(top.get("queues"), "parent"),
        queues_known=queues is not None,
    )
    jobs = check_jobs(c, top["jobs"], context) if "jobs" in top else None
    expected = None
    if "expected" in top:
        expected = check_expected(c, top["expected"], context)
    elif require_expected:
        c.fail_missing((), "expected", "required by --check (the file has no expected block)")
    if (
        scenario_id is None
        or mode is None
        or actions is None
        or config is None
        or nodes is None
        or queues is None
        or jobs is None
        or (mode == "rounds" and rounds is None)
    ):
        return None
    return model.Scenario(
        id=scenario_id,
        source=source,
        notes=notes,
        mode=mode,
        actions=actions,
        rounds=rounds,
        config=config,
        topologies=tuple(topologies),
        nodes=tuple(nodes),
        queues=tuple(queues),
        jobs=tuple(jobs),
        expected=expected,
    )


def _raw_names(items: Any, key: str = "name") -> set[str]:
    """Every string ``key`` of a list of mappings, whatever else is wrong with them."""
    if not isinstance(items, list):
        return set()
    return {
        item[key] for item in items if isinstance(item, dict) and isinstance(item.get(key), str)
    }


def _check_actions(c: Checker, value: Any) -> tuple[str, ...] | None:
    items = c.sequence(value, ("actions",), non_empty=True)
    if items is None:
        return None
    actions = [c.choice(item, ("actions", i), model.ACTIONS) for i, item in enumerate(items)]
    if any(a is None for a in actions):
        return None
    return tuple(a for a in actions if a is not None)


def _check_rounds(c: Checker, top: dict[str, Any], mode: str | None) -> model.Rounds | None:
    if "rounds" not in top:
        if mode == "rounds":
            c.fail_missing((), "rounds", "required key is missing (mode is rounds)")
        return None
    if mode == "single-session":
        c.fail(("rounds",), "only allowed with mode: rounds (mode is single-session)")
        return None
    path: Path = ("rounds",)
    spec = c.mapping(top["rounds"], path, ("untilMatch", "afterMatch"))
    if spec is None:
        return None
    until = (
        c.integer(spec["untilMatch"], (*path, "untilMatch"), 1) if "untilMatch" in spec else None
    )
    after = (
        c.integer(spec["afterMatch"], (*path, "afterMatch"), 0) if "afterMatch" in spec else None
    )
    if until is None or after is None:
        return None
    return model.Rounds(until_match=until, after_match=after)


def _check_config(c: Checker, value: Any) -> model.Config | None:
    path: Path = ("config",)
    spec = c.mapping(value, path, _CONFIG_KEYS)
    if spec is None:
        return None
    got: dict[str, Any] = {}
    if "kaiPlugins" in spec:
        plugins = spec["kaiPlugins"]
        if isinstance(plugins, list):
            got["kaiPlugins"] = c.string_list(plugins, (*path, "kaiPlugins"), non_empty=True)
            if got["kaiPlugins"] is not None:
                got["kaiPlugins"] = tuple(got["kaiPlugins"])
        else:
            got["kaiPlugins"] = c.choice(plugins, (*path, "kaiPlugins"), _KAI_PLUGIN_SETS)
    for key in ("predicates", "proportion", "allowConsolidatingReclaim"):
        if key in spec:
            got[key] = c.boolean(spec[key], (*path, key))
    if "placement" in spec:
        got["placement"] = _check_placement(c, spec["placement"], (*path, "placement"))
    if "gpuSharingPlacement" in spec:
        got["gpuSharingPlacement"] = c.choice(
            spec["gpuSharingPlacement"], (*path, "gpuSharingPlacement"), model.SHARING_PLACEMENTS
        )
    if "stalenessGracePeriodSeconds" in spec:
        got["stalenessGracePeriodSeconds"] = c.number(
            spec["stalenessGracePeriodSeconds"], (*path, "stalenessGracePeriodSeconds")
        )
    if "maxConsolidationPreemptees" in spec:
        got["maxConsolidationPreemptees"] = c.number(
            spec["maxConsolidationPreemptees"],
            (*path, "maxConsolidationPreemptees"),
            minus_one=True,
        )
    if "fairShareKValue" in spec:
        got["fairShareKValue"] = c.any_number(spec["fairShareKValue"], (*path, "fairShareKValue"))
    if len(got) != len(_CONFIG_KEYS) or any(v is None for v in got.values()):
        return None
    placement_gpu, placement_cpu = got["placement"]
    return model.Config(
        kai_plugins=got["kaiPlugins"],
        predicates=got["predicates"],
        proportion=got["proportion"],
        placement_gpu=placement_gpu,
        placement_cpu=placement_cpu,
        gpu_sharing_placement=got["gpuSharingPlacement"],
        staleness_grace_period_seconds=got["stalenessGracePeriodSeconds"],
        max_consolidation_preemptees=got["maxConsolidationPreemptees"],
        allow_consolidating_reclaim=got["allowConsolidatingReclaim"],
        fair_share_k_value=got["fairShareKValue"],
    )


def _check_placement(c: Checker, value: Any, path: Path) -> tuple[str, str] | None:
    if value == "none":
        return ("none", "none")
    if not isinstance(value, dict):
        c.fail(
            path,
            f"must be none or a mapping {{gpu: binpack|spread, cpu: ...}}, got {describe(value)}",
        )
        return None
    spec = c.mapping(value, path, ("gpu", "cpu"))
    assert spec is not None
    gpu = c.choice(spec["gpu"], (*path, "gpu"), model.PLACEMENTS) if "gpu" in spec else None
    cpu = c.choice(spec["cpu"], (*path, "cpu"), model.PLACEMENTS) if "cpu" in spec else None
    if gpu is None or cpu is None:
        return None
    return (gpu, cpu)

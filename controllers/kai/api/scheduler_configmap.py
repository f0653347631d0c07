"""The scheduler ConfigMap (``kai render`` / ``kai controller`` output), validated as a whole.

The ConfigMap holds one ``scheduler-policy.<name>.yaml`` per SchedulerPolicy (one per node pool,
i.e. per SchedulingShard), one ``sharing-policy.<name>.yaml`` per SharingPolicy and optionally
``namespace-queues.yaml``. A scheduler reads the section of its own node pool, but it checks
*every* key first: a ConfigMap with one bad document is refused whole (the caller keeps its last
good settings), so a typo in one shard's section can never half-apply to another.

:func:`read_scheduler_configmap` returns the session config of one pool plus the GPU sharing
modes of every pool (the SharingPolicies), or raises :class:`InvalidSchedulerConfig` listing every
problem as ``data[<key>].<field>: <message>``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from kai.api.duration import DurationError, parse_duration
from kai.api.scheduler_config import SchedulerConfig
from kai.api.scheduler_settings import to_scheduler_config

__all__ = [
    "KNOWN_ACTIONS",
    "KNOWN_PLUGINS",
    "SHARING_MODES",
    "InvalidSchedulerConfig",
    "SchedulerConfigMap",
    "read_scheduler_configmap",
]

KNOWN_ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
# KAI's plugins (its default plugin list); an unknown name is refused rather than ignored
KNOWN_PLUGINS = frozenset(
    {
        "predicates",
        "proportion",
        "priority",
        "nodeavailability",
        "resourcetype",
        "podaffinity",
        "elastic",
        "kubeflow",
        "ray",
        "subgrouporder",
        "taskorder",
        "nominatednode",
        "dynamicresources",
        "minruntime",
        "topology",
        "snapshot",
        "gpupack",
        "gpuspread",
        "nodeplacement",
        "gpusharingorder",
    }
)
SHARING_MODES = ("fraction", "gpu-memory", "mps", "mig")
STRATEGIES = ("binpack", "spread")

Collection = tuple[str, ...] | frozenset[str] | Mapping[str, Any]

_SCHEDULER_KEYS = frozenset(
    {
        "name",
        "nodePool",
        "placementStrategy",
        "actions",
        "plugins",
        "queueDepthPerAction",
        "minRuntime",
        "fairshare",
        "staleGangGracePeriod",
        "reclaimerUtilizationMultiplier",
        "maxConsolidationPreemptees",
    }
)
_SHARING_KEYS = frozenset(
    {"name", "nodePool", "modes", "defaultPlacement", "reservationRuntimeClassName"}
)


class InvalidSchedulerConfig(ValueError):
    """The ConfigMap cannot be used; ``problems`` holds one ``data[key].field: message`` each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass
class SchedulerConfigMap:
    """What one scheduler takes from the ConfigMap."""

    config: SchedulerConfig
    """The session knobs of the scheduler's node pool (KAI's defaults when it has no policy)."""
    sharing_modes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """GPU sharing modes per node pool (value of the node-pool label, "" = unlabelled nodes);
    empty = no SharingPolicy at all: every mode on every node."""
    policy: str | None = None
    """The name of the SchedulerPolicy that applies (None: defaults)."""


class _Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def mapping(self, where: str, value: Any) -> Mapping[str, Any] | None:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.add(where, f"expected a mapping, got {_kind(value)} {value!r}")
            return None
        return value

    def keys(self, where: str, value: Mapping[str, Any], known: Collection) -> None:
        for key in sorted(set(map(str, value)) - set(known)):
            self.add(f"{where}.{key}", f"unknown field (known: {', '.join(sorted(known))})")

    def string(self, where: str, value: Any, choices: tuple[str, ...] | None = None) -> None:
        if not isinstance(value, str):
            self.add(where, f"expected a string, got {_kind(value)} {value!r}")
        elif choices is not None and value not in choices:
            self.add(where, f"{value!r} is not one of {', '.join(choices)}")

    def integer(self, where: str, value: Any, minimum: int | None = None) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(where, f"expected an integer, got {_kind(value)} {value!r}")
        elif minimum is not None and value < minimum:
            self.add(where, f"must be >= {minimum}, got {value}")

    def number(self, where: str, value: Any, minimum: float | None = None) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            self.add(where, f"expected a number, got {_kind(value)} {value!r}")
        elif minimum is not None and value < minimum:
            self.add(where, f"must be >= {minimum:g}, got {value}")

    def boolean(self, where: str, value: Any) -> None:
        if not isinstance(value, bool):
            self.add(where, f"expected true or false, got {_kind(value)} {value!r}")

    def duration(self, where: str, value: Any) -> None:
        if not isinstance(value, str):
            self.add(where, f"expected a duration such as 90s, got {_kind(value)} {value!r}")
            return
        try:
            parse_duration(value)
        except DurationError as exc:
            self.add(where, str(exc))

    def fields(
        self,
        where: str,
        value: Any,
        checks: Mapping[str, Callable[[str, Any], None]],
    ) -> None:
        """A mapping whose every key has a check; unknown keys are problems."""
        mapping = self.mapping(where, value)
        if mapping is None:
            return
        self.keys(where, mapping, checks)
        for key, check in checks.items():
            if mapping.get(key) is not None:
                check(f"{where}.{key}", mapping[key])


def _kind(value: Any) -> str:
    return {
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)


def _check_scheduler_policy(c: _Checker, where: str, doc: Mapping[str, Any]) -> None:
    c.keys(where, doc, _SCHEDULER_KEYS)
    if doc.get("name") is not None:
        c.string(f"{where}.name", doc["name"])
    c.string(f"{where}.nodePool", doc.get("nodePool") or "")
    c.fields(
        f"{where}.placementStrategy",
        doc.get("placementStrategy"),
        {
            "gpu": lambda w, v: c.string(w, v, STRATEGIES),
            "cpu": lambda w, v: c.string(w, v, STRATEGIES),
        },
    )
    actions = doc.get("actions")
    if actions is not None:
        if not isinstance(actions, list):
            c.add(
                f"{where}.actions",
                f"expected a list of action names, got {_kind(actions)} {actions!r} "
                f"(write [{actions}] if that is one action)"
                if isinstance(actions, str)
                else f"expected a list of action names, got {_kind(actions)} {actions!r}",
            )
        else:
            for i, action in enumerate(actions):
                c.string(f"{where}.actions[{i}]", action, KNOWN_ACTIONS)
            duplicates = sorted({a for a in actions if isinstance(a, str) and actions.count(a) > 1})
            if duplicates:
                c.add(f"{where}.actions", f"listed more than once: {', '.join(duplicates)}")
    plugins = c.mapping(f"{where}.plugins", doc.get("plugins"))
    for name, plugin in (plugins or {}).items():
        pwhere = f"{where}.plugins.{name}"
        if name not in KNOWN_PLUGINS:
            c.add(pwhere, f"unknown plugin (known: {', '.join(sorted(KNOWN_PLUGINS))})")
            continue
        c.fields(
            pwhere,
            plugin,
            {
                "enabled": c.boolean,
                "priority": c.integer,
                "arguments": lambda w, v: _check_arguments(c, w, v),
            },
        )
    c.fields(
        f"{where}.queueDepthPerAction",
        doc.get("queueDepthPerAction"),
        {a: (lambda w, v: c.integer(w, v, 1)) for a in KNOWN_ACTIONS if a != "stalegangeviction"},
    )
    c.fields(
        f"{where}.minRuntime",
        doc.get("minRuntime"),
        {
            "preemptMinRuntime": c.duration,
            "reclaimMinRuntime": c.duration,
            "reclaimResolveMethod": lambda w, v: c.string(w, v, ("lca", "queue")),
        },
    )
    c.fields(
        f"{where}.fairshare",
        doc.get("fairshare"),
        {
            "kValue": lambda w, v: c.number(w, v, 0),
            "halfLifePeriod": c.duration,
            "windowSize": c.string,
            "windowType": lambda w, v: c.string(w, v, ("sliding", "tumbling", "cron")),
        },
    )
    if doc.get("staleGangGracePeriod") is not None:
        c.duration(f"{where}.staleGangGracePeriod", doc["staleGangGracePeriod"])
    if doc.get("reclaimerUtilizationMultiplier") is not None:
        c.number(f"{where}.reclaimerUtilizationMultiplier", doc["reclaimerUtilizationMultiplier"])
    if doc.get("maxConsolidationPreemptees") is not None:
        c.integer(f"{where}.maxConsolidationPreemptees", doc["maxConsolidationPreemptees"], -1)


def _check_arguments(c: _Checker, where: str, value: Any) -> None:
    arguments = c.mapping(where, value)
    for key, argument in (arguments or {}).items():
        if not isinstance(argument, (str, int, float)) or isinstance(argument, bool):
            c.add(f"{where}.{key}", f"expected a string, got {_kind(argument)} {argument!r}")


def _check_sharing_policy(c: _Checker, where: str, doc: Mapping[str, Any]) -> None:
    c.keys(where, doc, _SHARING_KEYS)
    if doc.get("name") is not None:
        c.string(f"{where}.name", doc["name"])
    c.string(f"{where}.nodePool", doc.get("nodePool") or "")
    modes = doc.get("modes")
    if modes is not None and not isinstance(modes, list):
        c.add(f"{where}.modes", f"expected a list of modes, got {_kind(modes)} {modes!r}")
    else:
        for i, mode in enumerate(modes or []):
            c.string(f"{where}.modes[{i}]", mode, SHARING_MODES)
    if doc.get("defaultPlacement") is not None:
        c.string(f"{where}.defaultPlacement", doc["defaultPlacement"], ("pack", "spread"))
    if doc.get("reservationRuntimeClassName") is not None:
        c.string(f"{where}.reservationRuntimeClassName", doc["reservationRuntimeClassName"])


def _load(c: _Checker, key: str, text: Any) -> Mapping[str, Any] | None:
    where = f"data[{key}]"
    if not isinstance(text, str):
        c.add(where, "expected a string")
        return None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        c.add(where, f"not YAML: {exc}")
        return None
    if not isinstance(doc, Mapping):
        c.add(where, f"expected a mapping, got {_kind(doc)}")
        return None
    return doc


Sections = dict[str, tuple[str, Mapping[str, Any]]]  # node pool -> (key, document)


def _sections(c: _Checker, data: Mapping[str, Any]) -> tuple[Sections, Sections]:
    """Every key checked; the scheduler and sharing policies by node pool."""
    policies: Sections = {}
    sharing: Sections = {}
    for key in sorted(data):
        if key == "namespace-queues.yaml":
            doc = _load(c, key, data[key])
            for namespace, queue in (doc or {}).items():
                if not isinstance(namespace, str) or not isinstance(queue, str):
                    c.add(f"data[{key}].{namespace}", "expected namespace: queue-name strings")
            continue
        kind = next((k for k in ("scheduler-policy.", "sharing-policy.") if key.startswith(k)), "")
        if not kind:
            c.add(
                f"data[{key}]",
                "unknown key (expected scheduler-policy.<name>.yaml, "
                "sharing-policy.<name>.yaml or namespace-queues.yaml)",
            )
            continue
        doc = _load(c, key, data[key])
        if doc is None:
            continue
        check = _check_scheduler_policy if kind == "scheduler-policy." else _check_sharing_policy
        check(c, f"data[{key}]", doc)
        target = policies if kind == "scheduler-policy." else sharing
        pool = doc.get("nodePool") or ""
        if not isinstance(pool, str):
            continue
        if pool in target:
            c.add(
                f"data[{key}].nodePool",
                f"node pool {pool!r} already has data[{target[pool][0]}]; one per pool",
            )
            continue
        target[pool] = (key, doc)
    return policies, sharing


def read_scheduler_configmap(cm: Mapping[str, Any], node_pool: str = "") -> SchedulerConfigMap:
    """Check every key of the ConfigMap, then build the settings of ``node_pool`` (the value of
    the node-pool label this scheduler serves, "" = the default pool). Raises
    :class:`InvalidSchedulerConfig` with every problem found; nothing is returned half-read."""
    c = _Checker()
    policies, sharing = _sections(c, cm.get("data") or {})
    configs: dict[str, SchedulerConfig] = {}
    if not c.problems:  # every pool's settings are built, so that bad plugin arguments of
        for pool, (key, doc) in policies.items():  # another pool refuse the whole ConfigMap too
            pool_sharing = sharing.get(pool)
            try:
                configs[pool] = to_scheduler_config(doc, pool_sharing[1] if pool_sharing else None)
            except (TypeError, ValueError) as exc:
                c.add(f"data[{key}]", str(exc))
    if c.problems:
        raise InvalidSchedulerConfig(c.problems)
    modes = {pool: tuple(doc.get("modes") or ()) for pool, (_, doc) in sharing.items()}
    own = policies.get(node_pool)
    if own is None:
        config = SchedulerConfig()
        own_sharing = sharing.get(node_pool)
        if own_sharing is not None:
            config.gpu_sharing_placement = str(own_sharing[1].get("defaultPlacement", "pack"))
        return SchedulerConfigMap(config, modes)
    key, doc = own
    return SchedulerConfigMap(configs[node_pool], modes, str(doc.get("name") or key))

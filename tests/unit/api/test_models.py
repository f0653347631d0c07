"""The KAI-compatible models: registry, strictness, field types and KAI's webhook rules."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kai.api.podgroup import PodGroup, PodGroupSpec
from kai.api.queue import Queue
from kai.api.registry import all_kinds, json_schema, known_groups, known_versions, lookup
from kai.api.scheduling_shard import SchedulingShard
from kai.api.topology import Topology, TopologySpec, topology_update_problems

# --- registry ----------------------------------------------------------------------------------


def test_lookup_and_versions() -> None:
    info = lookup("scheduling.run.ai/v2", "Queue")
    assert info is not None and info.model is Queue
    assert info.crd_name == "queues.scheduling.run.ai"
    assert info.schema_path == "schemas/scheduling.run.ai/Queue.v2.json"
    assert lookup("scheduling.run.ai/v3", "Queue") is None
    assert lookup("scheduling.run.ai/v2", "Nope") is None
    assert known_versions("scheduling.run.ai", "Queue") == ["v2"]
    assert known_versions("scheduling.run.ai", "PodGroup") == ["v2alpha2"]
    assert known_versions("scheduling.run.ai", "Nope") == []
    assert {"scheduling.run.ai", "kai.scheduler", "gitops.kai.scheduler"} <= set(known_groups())


def test_all_kinds_is_stable_and_complete() -> None:
    kinds = [(i.api_version, i.kind) for i in all_kinds()]
    assert kinds == [(i.api_version, i.kind) for i in all_kinds()]
    assert kinds[:5] == [
        ("scheduling.run.ai/v2", "Queue"),
        ("scheduling.run.ai/v2alpha2", "PodGroup"),
        ("scheduling.run.ai/v1alpha2", "BindRequest"),
        ("kai.scheduler/v1alpha1", "Topology"),
        ("kai.scheduler/v1", "SchedulingShard"),
    ]
    for kind in ("QueueTree", "TopologyPolicy", "SharingPolicy", "SchedulerPolicy"):
        assert ("gitops.kai.scheduler/v1alpha1", kind) in kinds


def test_json_schema_is_a_private_copy() -> None:
    info = all_kinds()[0]
    json_schema(info)["properties"].clear()
    assert json_schema(info)["properties"]


def _object_nodes(
    node: Any, defs: dict[str, Any], path: str, seen: frozenset[str]
) -> list[tuple[str, dict[str, Any]]]:
    """Every object schema below node (refs followed once per path)."""
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, list):
        for i, sub in enumerate(node):
            out += _object_nodes(sub, defs, f"{path}[{i}]", seen)
        return out
    if not isinstance(node, dict):
        return out
    if "$ref" in node:
        name = node["$ref"].split("/")[-1]
        if name not in seen:
            out += _object_nodes(defs[name], defs, f"{path}->{name}", seen | {name})
    if "properties" in node:
        out.append((path, node))
        for key, sub in node["properties"].items():
            out += _object_nodes(sub, defs, f"{path}.{key}", seen)
    for key in ("items", "anyOf", "additionalProperties"):
        if key in node:
            out += _object_nodes(node[key], defs, f"{path}/{key}", seen)
    return out


@pytest.mark.parametrize("info", all_kinds(), ids=lambda i: i.kind)
def test_json_schema_forbids_unknown_fields_throughout_spec(info: Any) -> None:
    schema = json_schema(info)
    props = schema["properties"]
    assert props["apiVersion"]["const"] == info.api_version
    assert props["kind"]["const"] == info.kind
    assert schema["additionalProperties"] is False
    for part in ("spec", "status"):
        if part not in props:
            continue
        for path, node in _object_nodes(props[part], schema.get("$defs", {}), part, frozenset()):
            assert node.get("additionalProperties") is False, f"{info.kind} {path}"


# --- identity, strictness, field types ---------------------------------------------------------


def _queue(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "q"},
        "spec": {"resources": {"gpu": {"quota": 1, "limit": -1}}, **spec},
    }


def _errors(model: Any, obj: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as info:
        model.model_validate(obj)
    return [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in info.value.errors()]


def test_identity_must_match_the_kind() -> None:
    errors = _errors(Queue, {**_queue(), "apiVersion": "scheduling.run.ai/v1"})
    assert "apiVersion must be 'scheduling.run.ai/v2' for kind Queue" in errors[0][1]
    errors = _errors(Queue, {**_queue(), "kind": "PodGroup"})
    assert "kind must be 'Queue'" in errors[0][1]


def test_unknown_fields_are_named_wherever_they_are() -> None:
    obj = _queue()
    obj["spec"]["resources"]["gpu"]["quotas"] = 3
    assert _errors(Queue, obj) == [("spec.resources.gpu.quotas", "Extra inputs are not permitted")]


def test_objects_read_back_from_a_cluster_validate() -> None:
    obj = _queue()
    obj["metadata"].update(
        uid="0d5f",
        resourceVersion="12",
        generation=4,
        creationTimestamp="2026-01-01T00:00:00Z",
        managedFields=[{"manager": "kubectl", "operation": "Apply"}],
        finalizers=["x/y"],
    )
    obj["status"] = {"allocated": {"nvidia.com/gpu": "1500m", "memory": "64Gi"}, "childQueues": []}
    assert Queue.model_validate(obj).status is not None


def test_queue_needs_resources() -> None:
    obj = _queue()
    del obj["spec"]["resources"]
    assert _errors(Queue, obj) == [("spec.resources", "Field required")]


@pytest.mark.parametrize(
    ("field", "value"),
    [("priority", "100"), ("priority", 2.5), ("priority", True), ("displayName", 7)],
)
def test_types_are_strict(field: str, value: Any) -> None:
    loc, _ = _errors(Queue, _queue(**{field: value}))[0]
    assert loc == f"spec.{field}"


def test_numbers_keep_their_written_form() -> None:
    queue = Queue.model_validate(_queue(resources={"gpu": {"quota": 2, "limit": 2.5}}))
    assert queue.spec.resources.gpu is not None
    assert queue.spec.resources.gpu.quota == 2 and isinstance(queue.spec.resources.gpu.quota, int)
    assert queue.spec.resources.gpu.limit == 2.5
    loc, _ = _errors(Queue, _queue(resources={"gpu": {"quota": "2"}}))[0]
    assert loc == "spec.resources.gpu.quota"


@pytest.mark.parametrize("good", ["10m", "1h30m", "-1s", "0", "1.5h", "300ms", "2us"])
def test_durations(good: str) -> None:
    Queue.model_validate(_queue(preemptMinRuntime=good))


@pytest.mark.parametrize("bad", ["10", "10 minutes", "1d", "m", "", "1h 30m"])
def test_bad_durations(bad: str) -> None:
    loc, _ = _errors(Queue, _queue(preemptMinRuntime=bad))[0]
    assert loc == "spec.preemptMinRuntime"


def _shard(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kai.scheduler/v1",
        "kind": "SchedulingShard",
        "metadata": {"name": "s"},
        "spec": spec,
    }


@pytest.mark.parametrize("good", ["6Gi", 1073741824, "512M", "1e9"])
def test_quantity_fields(good: Any) -> None:
    assert SchedulingShard.model_validate(_shard(goMemLimit=good)).spec.goMemLimit == good


@pytest.mark.parametrize("bad", ["6 Gi", "6GB", True, "", [1]])
def test_bad_quantities(bad: Any) -> None:
    loc, msg = _errors(SchedulingShard, _shard(goMemLimit=bad))[0]
    assert loc.startswith("spec.goMemLimit")
    assert "quantity" in msg


def test_timestamps_from_yaml_loaders_are_normalised() -> None:
    stamp = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    obj = _queue()
    obj["status"] = {
        "conditions": [{"type": "Orphan", "status": "True", "lastTransitionTime": stamp}]
    }
    queue = Queue.model_validate(obj)
    assert queue.status is not None and queue.status.conditions is not None
    assert queue.status.conditions[0].lastTransitionTime == "2026-01-02T03:04:05Z"
    obj["status"]["conditions"][0]["lastTransitionTime"] = "yesterday"
    loc, _ = _errors(Queue, obj)[0]
    assert loc == "status.conditions.0.lastTransitionTime"


def test_go_mem_limit_ratio_range() -> None:
    SchedulingShard.model_validate(_shard(goMemLimitRatio=1))
    for bad in (0, 1.5, -0.1):
        loc, _ = _errors(SchedulingShard, _shard(goMemLimitRatio=bad))[0]
        assert loc == "spec.goMemLimitRatio"


# --- PodGroup subgroup rules (KAI's webhook) ------------------------------------------------------


def _sg(name: str, parent: str | None = None, **kw: int) -> dict[str, Any]:
    return {"name": name, **({"parent": parent} if parent else {}), **kw}


def _pg(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ns"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("spec", "path", "words"),
    [
        ({"minMember": 1, "minSubGroup": 1}, "minSubGroup", "not both"),
        (
            {"subGroups": [_sg("a", minMember=1), _sg("a", minMember=1)]},
            "subGroups[1].name",
            "already used by subGroups[0]",
        ),
        (
            {"subGroups": [_sg("a", "nope", minMember=1)]},
            "subGroups[0].parent",
            "'nope', which is not a subgroup",
        ),
        (
            {"subGroups": [_sg("a", "b"), _sg("b", "a"), _sg("c", "a", minMember=1)]},
            "subGroups[0].parent",
            "cycle through their parents: a -> b",
        ),
        (
            {"subGroups": [_sg("a", minMember=1, minSubGroup=1)]},
            "subGroups[0].minSubGroup",
            "not both",
        ),
        ({"subGroups": [_sg("a")]}, "subGroups[0].minMember", "leaf subgroup 'a' needs minMember"),
        (
            {"subGroups": [_sg("a", minSubGroup=0)]},
            "subGroups[0].minSubGroup",
            "has no child subgroups",
        ),
    ],
)
def test_podgroup_rejects(spec: dict[str, Any], path: str, words: str) -> None:
    errors = _errors(PodGroup, _pg(**spec))
    assert len(errors) == 1
    loc, msg = errors[0]
    assert loc == "spec"
    assert f"{path}: " in msg and words in msg, msg


def test_podgroup_reports_every_error_at_once() -> None:
    spec = {"subGroups": [_sg("a"), _sg("b", "x", minMember=1), _sg("a", minMember=1)]}
    msg = _errors(PodGroup, _pg(**spec))[0][1]
    for path in ("subGroups[2].name", "subGroups[1].parent", "subGroups[0].minMember"):
        assert path in msg


def test_mid_level_min_member_is_an_error_on_create_and_a_warning_on_update() -> None:
    spec = PodGroupSpec.model_validate(
        {"subGroups": [_sg("mid", minMember=2), _sg("leaf", "mid", minMember=1)]}
    )
    (update,) = spec.problems("UPDATE")
    assert (update.path, update.severity) == ("subGroups[0].minMember", "warning")
    (create,) = spec.problems("CREATE")
    assert (create.path, create.severity) == ("subGroups[0].minMember", "error")


def test_podgroup_warnings() -> None:
    spec = PodGroupSpec.model_validate(
        {
            "minSubGroup": 3,
            "subGroups": [
                _sg("mid", minSubGroup=2),
                _sg("leaf", "mid", minMember=0),
                _sg("other", minMember=1),
            ],
        }
    )
    assert [(p.path, p.severity) for p in spec.problems()] == [
        ("subGroups[0].minSubGroup", "warning"),
        ("minSubGroup", "warning"),
    ]
    flat = PodGroupSpec.model_validate({"minSubGroup": 1})
    assert [p.message for p in flat.problems()] == ["minSubGroup has no effect without subGroups"]


def test_podgroup_accepts_kai_shapes() -> None:
    # root minMember together with subGroups is accepted by KAI (its own example does this)
    PodGroup.model_validate(_pg(minMember=3, subGroups=[_sg("a", minMember=1)]))
    PodGroup.model_validate(_pg(minMember=0))
    PodGroup.model_validate(_pg())
    loc, _ = _errors(PodGroup, _pg(minMember=-1))[0]
    assert loc == "spec.minMember"
    loc, _ = _errors(PodGroup, _pg(subGroups=[_sg("Upper", minMember=1)]))[0]
    assert loc == "spec.subGroups.0.name"
    loc, _ = _errors(PodGroup, _pg(preemptibility="semi-preemptible"))[0]
    assert loc == "spec.preemptibility"


# --- Topology rules ----------------------------------------------------------------------------


def _levels(*levels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": "t"},
        "spec": {"levels": list(levels)},
    }


ZONE = {"nodeLabel": "topology.kubernetes.io/zone"}
HOST = {"nodeLabel": "kubernetes.io/hostname"}


@pytest.mark.parametrize(
    ("levels", "words"),
    [
        (
            (ZONE, ZONE),
            "levels[1].nodeLabel: nodeLabel 'topology.kubernetes.io/zone' is already used by",
        ),
        ((HOST, ZONE), "levels[0].nodeLabel: kubernetes.io/hostname may only be the last"),
        (
            ({**ZONE, "alias": "z"}, {**HOST, "alias": "z"}),
            "levels[1].alias: alias 'z' is already used by levels[0]",
        ),
        (
            (ZONE, {**HOST, "alias": "topology.kubernetes.io/zone"}),
            "alias 'topology.kubernetes.io/zone' equals the nodeLabel of levels[0]",
        ),
    ],
)
def test_topology_rejects(levels: tuple[dict[str, str], ...], words: str) -> None:
    loc, msg = _errors(Topology, _levels(*levels))[0]
    assert loc == "spec" and words in msg, msg


def test_topology_level_count() -> None:
    assert _errors(Topology, _levels())[0][0] == "spec.levels"
    many = [{"nodeLabel": f"example.com/l{i}"} for i in range(17)]
    assert _errors(Topology, _levels(*many))[0][0] == "spec.levels"
    Topology.model_validate(_levels(*many[:16]))


def test_topology_update_rules() -> None:
    old = TopologySpec.model_validate({"levels": [ZONE, HOST]})
    aliased = TopologySpec.model_validate({"levels": [{**ZONE, "alias": "zone"}, HOST]})
    assert topology_update_problems(old, aliased) == []
    changed = TopologySpec.model_validate({"levels": [HOST]})
    ((path, message),) = topology_update_problems(old, changed)
    assert path == "levels" and "immutable" in message


@pytest.mark.parametrize("info", all_kinds()[:5], ids=lambda i: i.kind)
def test_kai_models_are_documented(info: Any) -> None:
    """Every KAI-compatible kind, model and field carries a description into its schema."""
    schema = json_schema(info)
    assert schema.get("description")
    undocumented: list[str] = []
    nodes = _object_nodes(schema, schema.get("$defs", {}), info.kind, frozenset())
    for path, node in nodes:
        for name, prop in node["properties"].items():
            if not prop.get("description"):
                undocumented.append(f"{path}.{name}")
    for name, definition in schema.get("$defs", {}).items():
        if name != "ObjectMeta" and not definition.get("description"):
            undocumented.append(name)
    assert undocumented == []


_NAMES = ["a", "b", "c", "d"]


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(_NAMES),
            st.none() | st.sampled_from([*_NAMES, "zz"]),
            st.none() | st.integers(0, 3),
            st.none() | st.integers(0, 3),
        ),
        max_size=5,
    ),
    root=st.tuples(st.none() | st.integers(0, 3), st.none() | st.integers(0, 3)),
)
def test_subgroup_rules_never_crash_and_agree_with_a_plain_reading(
    rows: list[tuple[str, str | None, int | None, int | None]],
    root: tuple[int | None, int | None],
) -> None:
    groups = [
        {
            "name": n,
            **({"parent": p} if p else {}),
            **({"minMember": m} if m is not None else {}),
            **({"minSubGroup": s} if s is not None else {}),
        }
        for n, p, m, s in rows
    ]
    spec: dict[str, Any] = {"subGroups": groups}
    if root[0] is not None:
        spec["minMember"] = root[0]
    if root[1] is not None:
        spec["minSubGroup"] = root[1]
    names = [n for n, _, _, _ in rows]
    parents = {p for _, p, _, _ in rows if p}
    parent_of = {n: p for n, p, _, _ in reversed(rows)}

    def in_cycle(name: str) -> bool:
        seen: set[str] = set()
        node: str | None = name
        while node is not None and node in parent_of:
            if node in seen:
                return True
            seen.add(node)
            node = parent_of[node]
        return False

    expected_ok = (
        len(set(names)) == len(names)
        and parents <= set(names)
        and not any(in_cycle(n) for n in names)
        and not (root[0] is not None and root[1] is not None)
        and all(m is None or s is None for _, _, m, s in rows)
        and all(m is not None and s is None for n, _, m, s in rows if n not in parents)
    )
    try:
        PodGroup.model_validate(_pg(**spec))
        ok = True
    except ValidationError:
        ok = False
    assert ok == expected_ok

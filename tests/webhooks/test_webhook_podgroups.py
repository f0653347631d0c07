"""The PodGroup webhook: KAI's subgroup rules and topology constraints."""

from __future__ import annotations

from fakes import FakeCluster, example_objects, request

from kai.webhooks.podgroups import PodGroupValidator


def _pg(spec: dict) -> dict:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ns"},
        "spec": {"queue": "nlp", **spec},
    }


def _check(spec: dict, operation: str = "CREATE"):
    return PodGroupValidator(FakeCluster(example_objects()))(request(_pg(spec), operation))


def test_subgroup_rules() -> None:
    dup = _check({"subGroups": [{"name": "a", "minMember": 1}, {"name": "a", "minMember": 1}]})
    assert not dup.allowed and "spec.subGroups[1].name" in dup.message
    orphan = _check({"subGroups": [{"name": "a", "minMember": 1, "parent": "x"}]})
    assert "names parent 'x'" in orphan.message
    cycle = _check({"subGroups": [{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}]})
    assert "cycle" in cycle.message
    assert _check({"minMember": 2}).allowed


def test_mid_level_min_member_is_refused_on_create_warned_on_update() -> None:
    spec = {
        "subGroups": [
            {"name": "top", "minMember": 2},
            {"name": "leaf", "parent": "top", "minMember": 1},
        ]
    }
    assert not _check(spec).allowed
    update = _check(spec, "UPDATE")
    assert update.allowed and any("minMember is ignored" in w for w in update.warnings)


def test_topology_constraints_name_existing_levels() -> None:
    by_alias = {"topologyConstraint": {"topology": "datacenter", "requiredTopologyLevel": "rack"}}
    assert _check(by_alias).allowed
    by_label = {
        "topologyConstraint": {
            "topology": "datacenter",
            "preferredTopologyLevel": "kubernetes.io/hostname",
        }
    }
    assert _check(by_label).allowed
    unknown = _check({"topologyConstraint": {"topology": "nope", "requiredTopologyLevel": "x"}})
    assert "topology 'nope' does not exist" in unknown.message
    level = _check(
        {
            "subGroups": [
                {
                    "name": "w",
                    "minMember": 1,
                    "topologyConstraint": {
                        "topology": "datacenter",
                        "requiredTopologyLevel": "pod",
                    },
                }
            ]
        }
    )
    assert "spec.subGroups[0].topologyConstraint: requiredTopologyLevel 'pod'" in level.message
    no_name = _check({"topologyConstraint": {"requiredTopologyLevel": "rack"}})
    assert "no topology is named" in no_name.message

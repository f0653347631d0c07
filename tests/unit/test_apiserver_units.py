"""Pure-function pieces of the embedded API server (kube_emulator): patches, selectors,
the CEL subset, schema validation, server-side apply field sets, and the store's history
window. The HTTP behaviour is covered by tests/integration/."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kube_emulator import apply as ssa
from kube_emulator.cel import CelError, UnsupportedRule, evaluate
from kube_emulator.errors import ApiError
from kube_emulator.patch import json_patch, merge_patch, strategic_merge_patch
from kube_emulator.schema_validation import validate_custom_resource
from kube_emulator.selectors import labels_match, parse_label_selector
from kube_emulator.storage import Store

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
objects = st.dictionaries(st.text(max_size=3), json_values, max_size=4)


def _without_nulls(value):
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


@given(objects, objects)
@settings(max_examples=200, deadline=None)
def test_merge_patch_is_idempotent_and_leaves_its_input_alone(target, patch):
    before = copy.deepcopy(target)
    once = merge_patch(target, patch)
    assert target == before
    assert merge_patch(once, patch) == once
    for key, value in patch.items():
        if value is None:
            assert key not in once
        elif not isinstance(value, dict):
            assert once[key] == value


@given(objects)
@settings(max_examples=100, deadline=None)
def test_merge_patch_with_itself_minus_nulls(obj):
    assert merge_patch({}, obj) == _without_nulls(obj)


@given(objects, st.text(min_size=1, max_size=3), json_values)
@settings(max_examples=100, deadline=None)
def test_json_patch_add_then_remove_restores(obj, key, value):
    if key in obj:
        return
    pointer = "/" + key.replace("~", "~0").replace("/", "~1")
    added = json_patch(obj, [{"op": "add", "path": pointer, "value": value}])
    assert added[key] == value
    assert json_patch(added, [{"op": "remove", "path": pointer}]) == obj


def test_json_patch_errors_are_422():
    with pytest.raises(ApiError) as err:
        json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 2}])
    assert err.value.code == 422
    with pytest.raises(ApiError):
        json_patch({"a": 1}, [{"op": "move", "path": "/b"}])


def test_strategic_merge_by_key_and_directives():
    live = {
        "spec": {
            "containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}],
            "tolerations": [{"key": "x"}],
        },
        "metadata": {"finalizers": ["f1"]},
    }
    out = strategic_merge_patch(
        live,
        {
            "spec": {
                "containers": [
                    {"name": "b", "image": "2"},
                    {"name": "a", "$patch": "delete"},
                    {"name": "c", "image": "3"},
                ],
                "tolerations": [{"key": "y"}],
                "$setElementOrder/containers": [{"name": "b"}],
            },
            "metadata": {"finalizers": ["f2"]},
        },
    )
    assert out["spec"]["containers"] == [{"name": "b", "image": "2"}, {"name": "c", "image": "3"}]
    assert out["spec"]["tolerations"] == [{"key": "y"}]
    assert out["metadata"]["finalizers"] == ["f1", "f2"]
    assert live["spec"]["containers"][1]["image"] == "1"


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=1", {"a": "1"}, True),
        ("a!=1", {}, True),
        ("a in (1, 2),b", {"a": "2", "b": ""}, True),
        ("a notin (1)", {"a": "1"}, False),
        ("!a", {"a": "x"}, False),
        ("a,!b", {"a": "x"}, True),
    ],
)
def test_label_selectors(selector, labels, expected):
    assert labels_match(parse_label_selector(selector), labels) is expected


@pytest.mark.parametrize(
    ("rule", "value", "old", "expected"),
    [
        ("self.a > 1 && self.b == 'x'", {"a": 2, "b": "x"}, None, True),
        ("!has(self.a) || self.a == 2.0", {"a": 2}, None, True),
        ("self.l.all(x, x > 0) && self.l.exists_one(x, x == 2)", {"l": [1, 2, 3]}, None, True),
        ("self.l.map(x, x * 2) == [2, 4]", {"l": [1, 2]}, None, True),
        ("size(self.l.filter(x, x > 1)) == 1", {"l": [1, 2]}, None, True),
        ("self.s.startsWith('ab') ? self.s.size() == 3 : false", {"s": "abc"}, None, True),
        ("self >= oldSelf", 3, 4, False),
        ("self.m['k'] == 1 && 'k' in self.m", {"m": {"k": 1}}, None, True),
    ],
)
def test_cel_subset(rule, value, old, expected):
    assert evaluate(rule, value, old) is expected


def test_cel_missing_field_and_unsupported_rule():
    with pytest.raises(CelError, match="no such key"):
        evaluate("self.missing == 1", {})
    assert evaluate("self.missing == 1 || true", {}) is True  # error absorbed by ||
    with pytest.raises(UnsupportedRule):
        evaluate("self.timestamp < now()", {})


def test_schema_validation_paths_and_unknown_fields():
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "n": {"type": "integer", "minimum": 1},
                    "m": {"type": "object", "additionalProperties": {"type": "string"}},
                    "items": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {"name": {"type": "string"}},
                        },
                    },
                },
            }
        },
    }
    obj = {"spec": {"n": 0, "m": {"k": 5}, "items": [{}], "extra": True}}
    errors, unknown = validate_custom_resource(copy.deepcopy(obj), schema, prune=False)
    assert sorted(e["field"] for e in errors) == ["spec.items[0].name", "spec.m.k", "spec.n"]
    assert unknown == ["spec.extra"]
    pruned = copy.deepcopy(obj)
    validate_custom_resource(pruned, schema, prune=True)
    assert "extra" not in pruned["spec"]


def test_apply_field_sets_round_trip_through_fieldsv1():
    config = {
        "metadata": {"name": "x", "labels": {"a": "1"}, "finalizers": ["f"]},
        "spec": {"containers": [{"name": "c", "image": "i"}], "tolerations": [{}]},
    }
    fields = ssa.field_set(config, custom=False)
    assert ("f:spec", "f:containers", 'k:{"name":"c"}', "f:image") in fields
    assert ("f:spec", "f:tolerations") in fields  # a list without a merge key is atomic
    assert ("f:metadata", "f:finalizers", 'v:"f"') in fields
    assert ssa.decode(ssa.encode(fields)) == fields


def test_store_history_window_and_snapshots():
    store = Store(history_size=3, max_snapshots=2)
    key = ("", "configmaps")
    for i in range(10):
        with store.lock:
            store.next_rv()
            store.commit(
                key,
                "ADDED",
                {"metadata": {"name": f"c{i}", "resourceVersion": str(store.rv)}},
                None,
            )
    assert len(store.history) <= 6 and store.compacted_rv > 1
    with pytest.raises(LookupError):
        store.open_watch(key, 1, None, None)
    tokens = [store.save_snapshot(store.rv, []) for _ in range(3)]
    assert store.load_snapshot(tokens[0]) is None and store.load_snapshot(tokens[2]) is not None
    store.compact()  # like etcd: a read at the compaction revision itself still works
    assert store.load_snapshot(tokens[2]) is not None
    with store.lock:
        store.next_rv()
        store.commit(
            key, "ADDED", {"metadata": {"name": "later", "resourceVersion": str(store.rv)}}, None
        )
    store.compact()
    assert store.load_snapshot(tokens[2]) is None

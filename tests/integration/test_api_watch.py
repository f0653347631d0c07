"""Watches: event order, resuming from a resourceVersion, bookmarks, 410 Gone, timeouts and
selector transitions."""

from __future__ import annotations

import threading
import time

import pytest
from k8s_helpers import SYSTEM_CONFIGMAPS, pod
from kubernetes import client, watch


def _collect(func, *args, stop_after=None, **kwargs):
    events = []
    w = watch.Watch()
    for ev in w.stream(func, *args, **kwargs):
        if ev["raw_object"].get("metadata", {}).get("name") in SYSTEM_CONFIGMAPS:
            continue  # a real cluster's own ConfigMaps in the new namespace
        events.append(ev)
        if stop_after is not None and len(events) >= stop_after:
            w.stop()
    return events


def test_watch_from_resource_version(core, ns):
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "w"}, "data": {"a": "1"}})
    core.patch_namespaced_config_map("w", ns, {"data": {"a": "2"}})
    core.delete_namespaced_config_map("w", ns)
    events = _collect(
        core.list_namespaced_config_map, ns, resource_version=start, timeout_seconds=5, stop_after=3
    )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "w"),
        ("MODIFIED", "w"),
        ("DELETED", "w"),
    ]
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    assert rvs == sorted(rvs)
    assert events[1]["object"].data == {"a": "2"}


def test_watch_without_resource_version_starts_with_current_state(core, ns):
    core.create_namespaced_config_map(ns, {"metadata": {"name": "existing"}})
    events = _collect(core.list_namespaced_config_map, ns, timeout_seconds=5, stop_after=1)
    assert events[0]["type"] == "ADDED" and events[0]["object"].metadata.name == "existing"


def test_watch_sees_live_changes(core, ns):
    rv = core.list_namespaced_config_map(ns).metadata.resource_version

    def writer():
        time.sleep(0.3)
        core.create_namespaced_config_map(ns, {"metadata": {"name": "live"}})

    t = threading.Thread(target=writer)
    t.start()
    events = _collect(
        core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=10, stop_after=1
    )
    t.join()
    assert events[0]["object"].metadata.name == "live"


def test_watch_timeout_seconds_ends_the_stream(core, ns):
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    began = time.monotonic()
    resp = core.list_namespaced_config_map(
        ns, watch=True, resource_version=rv, timeout_seconds=1, _preload_content=False
    )
    body = resp.read()
    assert time.monotonic() - began < 10
    assert b"ERROR" not in body


def test_bookmarks(cluster, core, ns):
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    resp = core.list_namespaced_config_map(
        ns,
        watch=True,
        resource_version=rv,
        allow_watch_bookmarks=True,
        # a real server's watch cache sends a bookmark about once a minute and one shortly
        # before the watch's deadline (if the deadline is far enough: 12 s is)
        timeout_seconds=2 if cluster.embedded else 12,
        _preload_content=False,
    )
    import json

    lines = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    bookmarks = [e for e in lines if e["type"] == "BOOKMARK"]
    assert bookmarks
    assert int(bookmarks[-1]["object"]["metadata"]["resourceVersion"]) >= int(rv)
    assert bookmarks[-1]["object"]["kind"] == "ConfigMap"


def test_too_old_resource_version_is_410(cluster, core, ns):
    server = cluster.need_embedded("forces a compaction")
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    server.compact()
    w = watch.Watch()
    with pytest.raises(client.ApiException) as err:
        for _ in w.stream(
            core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=5
        ):
            pass
    assert err.value.status == 410


def test_field_selector_watch_reports_leaving_as_deleted(core, ns):
    rv = core.list_namespaced_pod(ns).metadata.resource_version
    core.create_namespaced_pod(ns, pod("p"))
    core.create_namespaced_pod_binding(
        "p",
        ns,
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "p"},
            "target": {"kind": "Node", "name": "n1"},
        },
        _preload_content=False,
    )
    unbound = _collect(
        core.list_namespaced_pod,
        ns,
        resource_version=rv,
        field_selector="spec.nodeName=",
        timeout_seconds=5,
        stop_after=2,
    )
    assert [e["type"] for e in unbound] == ["ADDED", "DELETED"]
    on_node = _collect(
        core.list_namespaced_pod,
        ns,
        resource_version=rv,
        field_selector="spec.nodeName=n1",
        timeout_seconds=5,
        stop_after=1,
    )
    assert on_node[0]["type"] == "ADDED" and on_node[0]["object"].spec.node_name == "n1"


def test_label_selector_watch(core, ns):
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "no"}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "yes", "labels": {"w": "1"}}})
    events = _collect(
        core.list_namespaced_config_map,
        ns,
        resource_version=rv,
        label_selector="w=1",
        timeout_seconds=5,
        stop_after=1,
    )
    assert events[0]["object"].metadata.name == "yes"


def test_watch_all_namespaces_and_single_object(core, ns):
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "one"}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "two"}})
    events = _collect(
        core.list_config_map_for_all_namespaces,
        resource_version=rv,
        field_selector="metadata.name=two",
        timeout_seconds=5,
        stop_after=1,
    )
    assert events[0]["object"].metadata.name == "two"


def test_send_initial_events_ends_with_a_bookmark(core, ns):
    import json

    core.create_namespaced_config_map(ns, {"metadata": {"name": "first"}})
    resp = core.list_namespaced_config_map(
        ns,
        watch=True,
        send_initial_events=True,
        allow_watch_bookmarks=True,
        resource_version_match="NotOlderThan",
        timeout_seconds=2,
        _preload_content=False,
    )
    events = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "first"
    marks = [
        e
        for e in events
        if e["type"] == "BOOKMARK"
        and (e["object"]["metadata"].get("annotations") or {}).get("k8s.io/initial-events-end")
    ]
    assert marks and int(marks[0]["object"]["metadata"]["resourceVersion"]) >= int(
        events[0]["object"]["metadata"]["resourceVersion"]
    )

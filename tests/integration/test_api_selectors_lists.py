"""Label and field selectors, paged lists with continue tokens, resourceVersion on lists."""

from __future__ import annotations

import time

import pytest
from k8s_helpers import ours, pod, status_of
from kubernetes import client


@pytest.fixture
def labelled(core, ns):
    for name, labels in {
        "a": {"tier": "web", "env": "prod"},
        "b": {"tier": "db", "env": "prod"},
        "c": {"tier": "web", "env": "dev"},
        "d": {"other": "x"},
    }.items():
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})
    return ns


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=web", "ac"),
        ("tier==web", "ac"),
        ("tier!=web", "bd"),
        ("tier in (web,db)", "abc"),
        ("tier notin (web)", "bd"),
        ("tier", "abc"),
        ("!tier", "d"),
        ("tier=web,env=prod", "a"),
        ("env in (prod), tier notin (db)", "a"),
    ],
)
def test_label_selectors(core, labelled, selector, expected):
    items = core.list_namespaced_config_map(labelled, label_selector=selector).items
    assert "".join(sorted(ours([c.metadata.name for c in items]))) == expected


def test_bad_label_selector_is_400(core, ns):
    with pytest.raises(client.ApiException) as err:
        core.list_namespaced_config_map(ns, label_selector="a b c")
    assert err.value.status == 400


def test_field_selectors_on_pods(core, ns):
    core.create_namespaced_pod(ns, pod("unbound", schedulerName="kai-scheduler"))
    core.create_namespaced_pod(ns, pod("bound"))
    core.create_namespaced_pod_binding(
        "bound",
        ns,
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "bound"},
            "target": {"kind": "Node", "name": "node-1"},
        },
        _preload_content=False,
    )

    def names(sel):
        return sorted(
            p.metadata.name for p in core.list_namespaced_pod(ns, field_selector=sel).items
        )

    assert names("spec.nodeName=") == ["unbound"]
    assert names("spec.nodeName=node-1") == ["bound"]
    assert names("spec.nodeName!=node-1") == ["unbound"]
    assert names("spec.schedulerName=kai-scheduler") == ["unbound"]
    assert names("status.phase=Pending") == ["bound", "unbound"]
    assert names(f"metadata.name=bound,metadata.namespace={ns}") == ["bound"]
    across = core.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={ns}")
    assert len(across.items) == 2


def test_unsupported_field_selector_is_400(core, ns):
    with pytest.raises(client.ApiException) as err:
        core.list_namespaced_pod(ns, field_selector="spec.containers=x")
    assert err.value.status == 400
    assert "field label not supported" in status_of(err.value)["message"]


def test_limit_and_continue_give_a_consistent_snapshot(core, ns):
    for i in range(7):
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"cm-{i}"}})
    first = core.list_namespaced_config_map(ns, limit=3)
    assert len(first.items) == 3 and first.metadata._continue
    # changes after the first page do not show up in the later pages
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cm-late"}})
    core.delete_namespaced_config_map("cm-6", ns)
    names = [c.metadata.name for c in first.items]
    token = first.metadata._continue
    while token:
        page = core.list_namespaced_config_map(ns, limit=3, _continue=token)
        assert page.metadata.resource_version == first.metadata.resource_version
        names += [c.metadata.name for c in page.items]
        token = page.metadata._continue
    assert ours(names) == [f"cm-{i}" for i in range(7)]


def test_limit_reports_remaining_items(core, ns):
    # Secrets: no controller adds any to a new namespace, so the count is exactly ours
    for i in range(5):
        core.create_namespaced_secret(ns, {"metadata": {"name": f"r{i}"}})
    page = core.list_namespaced_secret(ns, limit=2)
    assert page.metadata.remaining_item_count == 3


def test_expired_continue_token_is_410(cluster, core, ns):
    server = cluster.need_embedded("forces a compaction")
    for i in range(4):
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"x{i}"}})
    first = core.list_namespaced_config_map(ns, limit=2)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "bump"}})
    server.compact()
    with pytest.raises(client.ApiException) as err:
        core.list_namespaced_config_map(ns, limit=2, _continue=first.metadata._continue)
    assert err.value.status == 410
    assert status_of(err.value)["reason"] == "Expired"


def test_list_resource_version_zero_and_too_new(core, ns):
    made = core.create_namespaced_config_map(ns, {"metadata": {"name": "z"}})
    # "0" means any version the server holds: kube-apiserver answers from its watch cache,
    # which may not have seen the create yet; it catches up within moments
    deadline = time.monotonic() + 10
    while True:
        listing = core.list_namespaced_config_map(ns, resource_version="0")
        if ours([c.metadata.name for c in listing.items]) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert ours([c.metadata.name for c in listing.items]) == ["z"]
    # not older than the create's version: the create is in the answer at once
    fresh = core.list_namespaced_config_map(
        ns, resource_version=made.metadata.resource_version, resource_version_match="NotOlderThan"
    )
    assert ours([c.metadata.name for c in fresh.items]) == ["z"]
    current = int(listing.metadata.resource_version)
    with pytest.raises(client.ApiException) as err:
        core.list_namespaced_config_map(
            ns,
            resource_version=str(current + 10_000_000),
            resource_version_match="NotOlderThan",
            _request_timeout=30,
        )
    assert err.value.status == 504

"""Behaviours that depend on the server's settings: node taints at registration, the
pod-deletion rule, Warn-mode field validation, and the tables kubectl asks for."""

from __future__ import annotations

import json
import uuid

import pytest
from k8s_helpers import pod
from kubernetes import client, config


def test_new_nodes_start_not_ready_tainted(core):
    name = f"node-{uuid.uuid4().hex[:8]}"
    made = core.create_node({"metadata": {"name": name}})
    try:
        taints = [(t.key, t.effect) for t in made.spec.taints or []]
        assert ("node.kubernetes.io/not-ready", "NoSchedule") in taints
    finally:
        core.delete_node(name)


def test_warn_mode_prunes_and_warns(core, ns):
    resp = core.create_namespaced_config_map(
        ns,
        {"metadata": {"name": "w"}, "data": {"a": "1"}},
        field_validation="Warn",
        _preload_content=False,
    )
    assert resp.status == 201
    body = json.loads(resp.data)
    assert body["data"] == {"a": "1"}
    raw = client.CoreV1Api(core.api_client).api_client
    # an unknown top-level field: accepted, dropped, and reported in a Warning header
    made = raw.call_api(
        "POST",
        f"{raw.configuration.host}/api/v1/namespaces/{ns}/configmaps?fieldValidation=Warn",
        header_params={
            "Content-Type": "application/json",
            "Accept": "application/json",
            **_auth(raw),
        },
        body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w2"}, "bogus": 1},
    )
    made.read()
    assert made.status == 201
    # 299 - "<text>", the text an HTTP quoted-string (its quotes escaped) as the real server sends
    assert 'unknown field \\"bogus\\"' in (made.getheader("Warning") or "")
    assert "bogus" not in json.loads(made.data)


def _auth(api):
    token = (api.configuration.api_key or {}).get("authorization") or (
        api.configuration.api_key or {}
    ).get("BearerToken")
    return {"Authorization": token} if token else {}


def test_immediate_pod_deletion_rule(tmp_path):
    from kube_emulator import ApiServer

    with ApiServer(pod_deletion="immediate") as server:
        api = config.new_client_from_config(str(server.write_kubeconfig(tmp_path / "kc")))
        v1 = client.CoreV1Api(api)
        v1.create_namespaced_pod("default", pod("p"))
        v1.create_namespaced_pod_binding(
            "p",
            "default",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "p"},
                "target": {"kind": "Node", "name": "n"},
            },
            _preload_content=False,
        )
        v1.delete_namespaced_pod("p", "default")
        with pytest.raises(client.ApiException) as err:
            v1.read_namespaced_pod("p", "default")
        assert err.value.status == 404
        api.close()


def test_tables_for_kubectl(cluster, core, ns):
    core.create_namespaced_pod(ns, pod("t"))
    api = cluster.api
    resp = api.call_api(
        "GET",
        f"{api.configuration.host}/api/v1/namespaces/{ns}/pods",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io", **_auth(api)},
    )
    resp.read()
    table = json.loads(resp.data)
    assert table["kind"] == "Table"
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names[0] == "Name" and "Status" in names and "Age" in names
    assert table["rows"][0]["cells"][0] == "t"
    assert table["rows"][0]["object"]["metadata"]["name"] == "t"

"""The embedded server's fault mode: injected 500s and 409s at a seeded rate, dropped watches,
switchable at run time (in process or over HTTP)."""

from __future__ import annotations

import json
import urllib.request

import pytest
import urllib3
from kubernetes import client, watch


@pytest.fixture
def faults(cluster):
    server = cluster.need_embedded("fault injection is an embedded-server feature")
    server.faults.clear()
    yield server.faults
    server.faults.clear()


def _outcomes(core, ns, n):
    seen = []
    for _i in range(n):
        try:
            core.read_namespace(ns)
            seen.append("ok")
        except client.ApiException as exc:
            seen.append(exc.status)
    return seen


def test_error_rate_is_seeded_and_reproducible(core, ns, faults):
    faults.configure(error_rate=0.3, seed=7)
    first = _outcomes(core, ns, 60)
    faults.configure(error_rate=0.3, seed=7)
    second = _outcomes(core, ns, 60)
    assert first == second
    assert 5 < first.count(500) < 35 and set(first) == {"ok", 500}
    faults.clear()
    assert _outcomes(core, ns, 10) == ["ok"] * 10


def test_discovery_is_spared(cluster, faults):
    faults.configure(error_rate=1.0)
    assert client.CoreV1Api(cluster.api).get_api_resources().resources


def test_conflicts_on_updates_only(core, ns, faults):
    core.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    faults.configure(conflict_rate=1.0)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "d"}})
    with pytest.raises(client.ApiException) as err:
        core.patch_namespaced_config_map("c", ns, {"data": {"a": "1"}})
    assert err.value.status == 409 and json.loads(err.value.body)["reason"] == "Conflict"
    assert faults.injected["conflicts"] >= 1


def test_watch_dropped_after_n_events(core, ns, faults):
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    for i in range(5):
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"w{i}"}})
    faults.configure(watch_drop_after=2)
    got = []
    with pytest.raises((urllib3.exceptions.ProtocolError, urllib3.exceptions.HTTPError)):
        for ev in watch.Watch().stream(
            core.list_namespaced_config_map,
            ns,
            resource_version=rv,
            timeout_seconds=5,
            _request_timeout=10,
        ):
            got.append(ev["object"].metadata.name)
            if len(got) > 5:
                break
    assert got[:2] == ["w0", "w1"] and len(got) < 5


def test_switch_over_http(cluster, faults):
    request = urllib.request.Request(
        cluster.server.url + "/kai-sim/faults",
        method="PUT",
        data=json.dumps({"error_rate": 0.5, "seed": 3}).encode(),
        headers={"Content-Type": "application/json", **cluster.server.auth_headers()},
    )
    context = cluster.server.ssl_context()
    answer = json.loads(urllib.request.urlopen(request, timeout=10, context=context).read())
    assert answer["error_rate"] == 0.5 and faults.settings.seed == 3
    bad = urllib.request.Request(
        cluster.server.url + "/kai-sim/faults",
        method="PUT",
        data=b'{"error_rat": 1}',
        headers=cluster.server.auth_headers(),
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(bad, timeout=10, context=context)
    assert err.value.code == 400

"""Discovery, CRUD and object metadata semantics through the official client."""

from __future__ import annotations

import json

import pytest
from k8s_helpers import eventually, pod, status_of
from kubernetes import client


def test_version_and_discovery(cluster):
    info = client.VersionApi(cluster.api).get_code()
    assert info.major and info.git_version.startswith("v")
    core = client.CoreApi(cluster.api).get_api_versions()
    assert "v1" in core.versions
    resources = {r.name: r for r in client.CoreV1Api(cluster.api).get_api_resources().resources}
    assert resources["pods"].namespaced and resources["pods"].kind == "Pod"
    assert "po" in resources["pods"].short_names
    assert {"create", "list", "watch", "patch"} <= set(resources["pods"].verbs)
    assert resources["pods/status"].verbs and resources["pods/binding"].kind == "Binding"
    assert resources["nodes"].namespaced is False
    groups = {g.name for g in client.ApisApi(cluster.api).get_api_versions().groups}
    assert {
        "coordination.k8s.io",
        "batch",
        "apps",
        "scheduling.k8s.io",
        "events.k8s.io",
        "apiextensions.k8s.io",
        "admissionregistration.k8s.io",
    } <= groups
    leases = client.CoordinationV1Api(cluster.api).get_api_resources()
    assert [r.name for r in leases.resources if r.name == "leases"]


def test_create_get_list_update_delete(core, ns):
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}, "data": {"k": "1"}})
    md = cm.metadata
    assert md.uid and md.creation_timestamp and md.namespace == ns
    rv1 = int(md.resource_version)
    got = core.read_namespaced_config_map("a", ns)
    assert got.data == {"k": "1"} and got.metadata.uid == md.uid
    got.data["k"] = "2"
    updated = core.replace_namespaced_config_map("a", ns, got)
    assert int(updated.metadata.resource_version) > rv1
    assert updated.metadata.uid == md.uid
    listing = core.list_namespaced_config_map(ns)
    assert [c.metadata.name for c in listing.items if c.metadata.name == "a"] == ["a"]
    assert int(listing.metadata.resource_version) >= int(updated.metadata.resource_version)
    core.delete_namespaced_config_map("a", ns)
    with pytest.raises(client.ApiException) as err:
        core.read_namespaced_config_map("a", ns)
    assert err.value.status == 404


def test_not_found_status_shape(core, ns):
    with pytest.raises(client.ApiException) as err:
        core.read_namespaced_pod("missing", ns)
    status = status_of(err.value)
    assert err.value.status == 404
    assert status["kind"] == "Status" and status["apiVersion"] == "v1"
    assert status["status"] == "Failure" and status["reason"] == "NotFound"
    assert status["code"] == 404 and status["details"]["name"] == "missing"
    assert status["details"]["kind"] == "pods"
    assert status["message"] == 'pods "missing" not found'


def test_already_exists(core, ns):
    core.create_namespaced_config_map(ns, {"metadata": {"name": "dup"}})
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "dup"}})
    status = status_of(err.value)
    assert err.value.status == 409 and status["reason"] == "AlreadyExists"
    assert status["details"] == {"name": "dup", "kind": "configmaps"}


def test_stale_update_conflicts(core, ns):
    first = core.create_namespaced_config_map(ns, {"metadata": {"name": "c"}, "data": {"v": "0"}})
    newer = core.read_namespaced_config_map("c", ns)
    newer.data["v"] = "1"
    core.replace_namespaced_config_map("c", ns, newer)
    first.data = {"v": "stale"}
    with pytest.raises(client.ApiException) as err:
        core.replace_namespaced_config_map("c", ns, first)
    status = status_of(err.value)
    assert err.value.status == 409 and status["reason"] == "Conflict"
    assert "the object has been modified" in status["message"]
    assert core.read_namespaced_config_map("c", ns).data == {"v": "1"}


def test_resource_versions_are_monotonic(core, ns):
    seen = []
    for i in range(5):
        cm = core.create_namespaced_config_map(ns, {"metadata": {"name": f"m{i}"}})
        seen.append(int(cm.metadata.resource_version))
    assert seen == sorted(seen) and len(set(seen)) == 5


def test_generate_name(core, ns):
    a = core.create_namespaced_config_map(ns, {"metadata": {"generateName": "gen-"}})
    b = core.create_namespaced_config_map(ns, {"metadata": {"generateName": "gen-"}})
    assert a.metadata.name.startswith("gen-") and len(a.metadata.name) == len("gen-") + 5
    assert a.metadata.name != b.metadata.name


def test_invalid_name_is_422(core, ns):
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "Bad_Name"}})
    status = status_of(err.value)
    assert err.value.status == 422 and status["reason"] == "Invalid"
    assert status["details"]["causes"][0]["field"] == "metadata.name"


def test_pod_without_containers_is_422(core, ns):
    body = pod("p")
    body["spec"]["containers"] = []
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_pod(ns, body)
    status = status_of(err.value)
    assert err.value.status == 422 and status["reason"] == "Invalid"
    assert status["details"]["kind"] == "Pod"
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.containers"]


def test_namespace_must_exist(core):
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map("no-such-ns-kai", {"metadata": {"name": "x"}})
    assert err.value.status == 404
    assert status_of(err.value)["details"]["kind"] == "namespaces"


def test_pod_defaults_and_pending_status(core, ns):
    created = core.create_namespaced_pod(ns, pod("p"))
    assert created.status.phase == "Pending"
    assert created.spec.scheduler_name == "default-scheduler"
    assert created.spec.priority == 0
    assert created.metadata.generation == 1


def test_priority_class_resolves(cluster, core, ns):
    sched = client.SchedulingV1Api(cluster.api)
    name = f"{ns}-high"
    sched.create_priority_class({"metadata": {"name": name}, "value": 1000})
    try:
        created = core.create_namespaced_pod(ns, pod("p", priorityClassName=name))
        assert created.spec.priority == 1000
        with pytest.raises(client.ApiException) as err:
            core.create_namespaced_pod(ns, pod("q", priorityClassName=f"{ns}-missing"))
        assert err.value.status == 403
    finally:
        sched.delete_priority_class(name)


def test_generation_follows_spec_not_status(cluster, ns):
    batch = client.BatchV1Api(cluster.api)
    job = {
        "metadata": {"name": "j"},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox:1.36"}],
                }
            },
        },
    }
    created = batch.create_namespaced_job(ns, job)
    assert created.metadata.generation == 1
    after_status = batch.patch_namespaced_job_status("j", ns, {"status": {"active": 0}})
    assert after_status.metadata.generation == 1
    after_spec = batch.patch_namespaced_job("j", ns, {"spec": {"parallelism": 2}})
    assert after_spec.metadata.generation == 2
    after_labels = batch.patch_namespaced_job("j", ns, {"metadata": {"labels": {"a": "b"}}})
    assert after_labels.metadata.generation == 2


def test_status_subresource_ignores_spec_and_main_ignores_status(core, ns):
    core.create_namespaced_pod(ns, pod("p"))
    via_status = core.patch_namespaced_pod_status(
        "p", ns, {"status": {"phase": "Running"}, "spec": {"activeDeadlineSeconds": 5}}
    )
    assert via_status.status.phase == "Running"
    assert via_status.spec.active_deadline_seconds is None
    via_main = core.patch_namespaced_pod("p", ns, {"status": {"phase": "Failed"}})
    assert via_main.status.phase == "Running"


def test_pod_spec_is_mostly_immutable(core, ns):
    core.create_namespaced_pod(ns, pod("p"))
    with pytest.raises(client.ApiException) as err:
        core.patch_namespaced_pod("p", ns, {"spec": {"nodeName": "somewhere"}})
    assert err.value.status == 422


def test_dry_run_stores_nothing(core, ns):
    core.create_namespaced_config_map(ns, {"metadata": {"name": "dry"}}, dry_run="All")
    with pytest.raises(client.ApiException) as err:
        core.read_namespaced_config_map("dry", ns)
    assert err.value.status == 404


def test_delete_collection(core, ns):
    for i in range(3):
        core.create_namespaced_config_map(
            ns, {"metadata": {"name": f"d{i}", "labels": {"grp": "x" if i < 2 else "y"}}}
        )
    core.delete_collection_namespaced_config_map(ns, label_selector="grp=x")
    left = {c.metadata.name for c in core.list_namespaced_config_map(ns).items}
    assert "d2" in left and not {"d0", "d1"} & left


def test_leases(cluster, ns):
    coord = client.CoordinationV1Api(cluster.api)
    lease = coord.create_namespaced_lease(
        ns,
        {
            "metadata": {"name": "leader"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
        },
    )
    lease.spec.holder_identity = "b"
    coord.replace_namespaced_lease("leader", ns, lease)
    lease.spec.holder_identity = "c"  # stale resourceVersion: a second candidate loses
    with pytest.raises(client.ApiException) as err:
        coord.replace_namespaced_lease("leader", ns, lease)
    assert err.value.status == 409
    assert coord.read_namespaced_lease("leader", ns).spec.holder_identity == "b"


def test_events_core_and_events_k8s_io(cluster, core, ns):
    core.create_namespaced_event(
        ns,
        {
            "metadata": {"name": "e1"},
            "involvedObject": {"kind": "Pod", "name": "p1", "namespace": ns},
            "reason": "Scheduled",
            "message": "bound",
            "type": "Normal",
        },
    )
    core.create_namespaced_event(
        ns,
        {
            "metadata": {"name": "e2"},
            "involvedObject": {"kind": "Pod", "name": "p2", "namespace": ns},
            "reason": "FailedScheduling",
            "message": "no nodes",
            "type": "Warning",
        },
    )
    found = core.list_namespaced_event(ns, field_selector="involvedObject.name=p2")
    assert [e.metadata.name for e in found.items] == ["e2"]
    found = core.list_namespaced_event(ns, field_selector="reason=Scheduled,type=Normal")
    assert [e.metadata.name for e in found.items] == ["e1"]
    ev = client.EventsV1Api(cluster.api)
    ev.create_namespaced_event(
        ns,
        {
            "metadata": {"name": "e3"},
            "eventTime": "2026-01-01T00:00:00.000001Z",  # the client re-serialises it
            "reportingController": "kai",
            "reportingInstance": "kai-1",
            "action": "Binding",
            "reason": "Scheduled",
            "type": "Normal",
            "regarding": {"kind": "Pod", "name": "p3", "namespace": ns},
        },
    )
    # one storage behind both groups, each field in its group's spelling
    # (raw JSON: core events have no eventTime, which the typed model insists on)
    raw = json.loads(ev.list_namespaced_event(ns, _preload_content=False).data)
    via_v1 = {e["metadata"]["name"]: e for e in raw["items"]}
    assert set(via_v1) == {"e1", "e2", "e3"}
    assert via_v1["e1"]["note"] == "bound" and via_v1["e1"]["regarding"]["name"] == "p1"
    assert "message" not in via_v1["e1"] and "involvedObject" not in via_v1["e1"]
    via_core = core.read_namespaced_event("e3", ns)
    assert via_core.message is None and via_core.involved_object.name == "p3"
    assert via_core.reporting_component == "kai" and via_core.action == "Binding"
    found = core.list_namespaced_event(ns, field_selector="involvedObject.name=p3")
    assert [e.metadata.name for e in found.items] == ["e3"]


def test_service_accounts_and_secrets(core, ns):
    # on a real cluster the service-account controller creates "default" a moment later
    eventually(
        lambda: (
            "default" in {s.metadata.name for s in core.list_namespaced_service_account(ns).items}
        )
    )
    core.create_namespaced_secret(
        ns, {"metadata": {"name": "s"}, "type": "Opaque", "stringData": {"a": "b"}}
    )
    secret = core.list_namespaced_secret(ns, field_selector="type=Opaque").items[0]
    assert secret.data == {"a": "Yg=="} and secret.string_data is None


def test_deployments_are_stored(cluster, ns):
    apps = client.AppsV1Api(cluster.api)
    apps.create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": "d"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
                },
            },
        },
    )
    assert apps.read_namespaced_deployment("d", ns).spec.replicas == 1


def test_events_k8s_io_watch_sees_core_events(cluster, core, ns):
    ev = client.EventsV1Api(cluster.api)
    rv = core.list_namespaced_event(ns).metadata.resource_version
    core.create_namespaced_event(
        ns,
        {
            "metadata": {"name": "w1"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns},
            "reason": "Started",
            "message": "hello",
            "type": "Normal",
        },
    )
    resp = ev.list_namespaced_event(
        ns, watch=True, resource_version=rv, timeout_seconds=1, _preload_content=False
    )
    events = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "w1")]
    obj = events[0]["object"]
    assert obj["apiVersion"] == "events.k8s.io/v1" and obj["note"] == "hello"


def test_self_subject_access_review(cluster):
    authz = client.AuthorizationV1Api(cluster.api)
    answer = authz.create_self_subject_access_review(
        {
            "spec": {
                "resourceAttributes": {"verb": "create", "resource": "pods", "namespace": "default"}
            }
        }
    )
    assert answer.status.allowed is True


def test_rbac_and_workload_kinds_are_stored(cluster, ns):
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    rbac.create_namespaced_role(
        ns,
        {
            "metadata": {"name": "reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
        },
    )
    assert rbac.read_namespaced_role("reader", ns).rules[0].verbs == ["get", "list"]
    apps = client.AppsV1Api(cluster.api)
    apps.create_namespaced_stateful_set(
        ns,
        {
            "metadata": {"name": "db"},
            "spec": {
                "serviceName": "db",
                "replicas": 0,
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
                },
            },
        },
    )
    assert apps.read_namespaced_stateful_set("db", ns).spec.service_name == "db"

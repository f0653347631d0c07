"""Admission webhooks: the server calls them over HTTPS with AdmissionReview v1 and honours
their answers, patches, failurePolicy, timeouts and selectors."""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from k8s_helpers import pod, status_of
from kubernetes import client

from kube_emulator.tls import make_certificates


class _Hook(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append((self.path, review))
        req = review["request"]
        obj = req.get("object") or req.get("oldObject") or {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        response = {"uid": req["uid"], "allowed": True}
        if self.path.startswith("/slow"):
            time.sleep(3)
        if self.path.startswith("/validate") and "deny" in labels:
            response = {
                "uid": req["uid"],
                "allowed": False,
                "status": {"code": 403, "message": f"label deny={labels['deny']}"},
            }
        if self.path.startswith("/validate-binding"):
            response = {
                "uid": req["uid"],
                "allowed": False,
                "status": {"message": f"no binding to {obj['target']['name']}"},
            }
        if self.path.startswith("/mutate"):
            ops = [{"op": "add", "path": "/metadata/labels", "value": {**labels, "mutated": "yes"}}]
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        data = json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        ).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the API server gave up waiting (the timeout test)
            self.close_connection = True


@pytest.fixture(scope="module")
def hook_server():
    certs = make_certificates(["localhost", "hooks.kai-system.svc"], ["127.0.0.1"])
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    httpd.daemon_threads = True
    httpd.seen = []
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "c.pem").write_bytes(certs.cert_pem)
        (Path(tmp) / "k.pem").write_bytes(certs.key_pem)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(Path(tmp) / "c.pem"), str(Path(tmp) / "k.pem"))
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    httpd.ca_bundle = base64.b64encode(certs.ca_pem).decode()
    httpd.url = f"https://127.0.0.1:{httpd.server_address[1]}"
    yield httpd
    httpd.shutdown()


@pytest.fixture
def webhooks(cluster, hook_server):
    cluster.need_embedded("the webhook listens on this test machine")
    reg = client.AdmissionregistrationV1Api(cluster.api)
    made = []

    def add(kind, name, hooks):
        body = {"metadata": {"name": name}, "webhooks": hooks}
        if kind == "validating":
            reg.create_validating_webhook_configuration(body)
        else:
            reg.create_mutating_webhook_configuration(body)
        made.append((kind, name))

    yield add
    for kind, name in made:
        if kind == "validating":
            reg.delete_validating_webhook_configuration(name)
        else:
            reg.delete_mutating_webhook_configuration(name)
    hook_server.seen.clear()


def _hook(
    name,
    url_or_service,
    ca,
    ns_label,
    resources=("configmaps",),
    operations=("CREATE", "UPDATE"),
    **extra,
):
    config = {"caBundle": ca}
    if isinstance(url_or_service, dict):
        config["service"] = url_or_service
    else:
        config["url"] = url_or_service
    return {
        "name": name,
        "clientConfig": config,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "namespaceSelector": {"matchLabels": {"hooks": ns_label}},
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": list(operations),
                "resources": list(resources),
            }
        ],
        **extra,
    }


@pytest.fixture
def hooked_ns(core, ns):
    core.patch_namespace(ns, {"metadata": {"labels": {"hooks": ns}}})
    return ns


def test_validating_webhook_denies_with_message(core, hooked_ns, webhooks, hook_server):
    ns = hooked_ns
    webhooks(
        "validating",
        f"{ns}-v",
        [_hook("deny.kai.test", hook_server.url + "/validate", hook_server.ca_bundle, ns)],
    )
    core.create_namespaced_config_map(ns, {"metadata": {"name": "ok"}})
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(
            ns, {"metadata": {"name": "no", "labels": {"deny": "please"}}}
        )
    assert err.value.status == 403
    assert status_of(err.value)["message"] == (
        'admission webhook "deny.kai.test" denied the request: label deny=please'
    )
    _path, review = hook_server.seen[0]
    req = review["request"]
    assert review["apiVersion"] == "admission.k8s.io/v1" and req["operation"] == "CREATE"
    assert req["kind"] == {"group": "", "version": "v1", "kind": "ConfigMap"}
    assert req["resource"] == {"group": "", "version": "v1", "resource": "configmaps"}
    assert req["namespace"] == ns and req["object"]["metadata"]["name"] == "ok"


def test_update_sends_old_object(core, hooked_ns, webhooks, hook_server):
    ns = hooked_ns
    core.create_namespaced_config_map(ns, {"metadata": {"name": "u"}, "data": {"a": "1"}})
    webhooks(
        "validating",
        f"{ns}-v",
        [_hook("v.kai.test", hook_server.url + "/validate", hook_server.ca_bundle, ns)],
    )
    core.patch_namespaced_config_map("u", ns, {"data": {"a": "2"}})
    req = hook_server.seen[-1][1]["request"]
    assert req["operation"] == "UPDATE"
    assert req["oldObject"]["data"] == {"a": "1"} and req["object"]["data"] == {"a": "2"}


def test_mutating_webhook_patch_is_applied(core, hooked_ns, webhooks, hook_server):
    ns = hooked_ns
    webhooks(
        "mutating",
        f"{ns}-m",
        [_hook("mutate.kai.test", hook_server.url + "/mutate", hook_server.ca_bundle, ns)],
    )
    made = core.create_namespaced_config_map(ns, {"metadata": {"name": "m", "labels": {"a": "b"}}})
    assert made.metadata.labels == {"a": "b", "mutated": "yes"}


def test_failure_policy(core, hooked_ns, webhooks, hook_server):
    ns = hooked_ns
    dead = "https://127.0.0.1:1/validate"
    webhooks(
        "validating",
        f"{ns}-ignore",
        [_hook("ignore.kai.test", dead, hook_server.ca_bundle, ns, failurePolicy="Ignore")],
    )
    core.create_namespaced_config_map(ns, {"metadata": {"name": "passes"}})
    webhooks(
        "validating",
        f"{ns}-fail",
        [_hook("fail.kai.test", dead, hook_server.ca_bundle, ns, failurePolicy="Fail")],
    )
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "blocked"}})
    assert err.value.status == 500
    assert 'failed calling webhook "fail.kai.test"' in status_of(err.value)["message"]


def test_timeout(core, hooked_ns, webhooks, hook_server):
    ns = hooked_ns
    webhooks(
        "validating",
        f"{ns}-slow",
        [
            _hook(
                "slow.kai.test",
                hook_server.url + "/slow",
                hook_server.ca_bundle,
                ns,
                timeoutSeconds=1,
            )
        ],
    )
    began = time.monotonic()
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "late"}})
    assert time.monotonic() - began < 2.8
    assert err.value.status == 500 and "deadline" in status_of(err.value)["message"]


def test_selectors_limit_what_is_sent(core, hooked_ns, webhooks, hook_server):
    ns = hooked_ns
    webhooks(
        "validating",
        f"{ns}-sel",
        [
            _hook(
                "sel.kai.test",
                hook_server.url + "/validate",
                hook_server.ca_bundle,
                ns,
                objectSelector={"matchExpressions": [{"key": "checked", "operator": "Exists"}]},
            )
        ],
    )
    core.create_namespaced_config_map(ns, {"metadata": {"name": "skip", "labels": {"deny": "x"}}})
    with pytest.raises(client.ApiException):
        core.create_namespaced_config_map(
            ns, {"metadata": {"name": "hit", "labels": {"deny": "x", "checked": "1"}}}
        )
    other = f"{ns}-other"
    core.create_namespace({"metadata": {"name": other}})
    try:
        core.create_namespaced_config_map(
            other, {"metadata": {"name": "hit", "labels": {"deny": "x", "checked": "1"}}}
        )
    finally:
        core.delete_namespace(other)


def test_service_reference_and_subresource_rule(cluster, core, hooked_ns, webhooks, hook_server):
    ns = hooked_ns
    port = hook_server.server_address[1]
    cluster.server.options.webhook_services["kai-system/hooks"] = f"127.0.0.1:{port}"
    try:
        webhooks(
            "validating",
            f"{ns}-bind",
            [
                _hook(
                    "bind.kai.test",
                    {
                        "namespace": "kai-system",
                        "name": "hooks",
                        "path": "/validate-binding",
                        "port": 443,
                    },
                    hook_server.ca_bundle,
                    ns,
                    resources=("pods/binding",),
                    operations=("CREATE",),
                )
            ],
        )
        core.create_namespaced_pod(ns, pod("p"))  # pods themselves are not matched
        with pytest.raises(client.ApiException) as err:
            core.create_namespaced_pod_binding(
                "p",
                ns,
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": "p"},
                    "target": {"kind": "Node", "name": "n9"},
                },
                _preload_content=False,
            )
        assert err.value.status == 403
        assert "no binding to n9" in status_of(err.value)["message"]
        req = hook_server.seen[-1][1]["request"]
        assert req["subResource"] == "binding" and req["kind"]["kind"] == "Binding"
    finally:
        del cluster.server.options.webhook_services["kai-system/hooks"]

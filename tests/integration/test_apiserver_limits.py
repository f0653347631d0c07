"""The embedded API server refuses what the real one refuses: request body and object sizes,
YAML alias expansion, label and annotation keys; it takes ``kind: List`` files from kubectl.

Every test that takes ``cluster`` runs against the embedded and the real server (ids
``[embedded]``/``[real]``) and asserts the real server's own answer (status code, reason,
message as recorded from kube-apiserver v1.36), so a pass on both proves the verdicts equal.
Large bodies are built once per test and kept under a few MiB.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

REPO = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def _request(
    cluster: Any, method: str, path: str, body: bytes | None, ctype: str = "application/json"
) -> tuple[int, dict[str, Any]]:
    """Send ``body`` as is (the typed client would re-encode it) and return code and JSON."""
    code, data = _raw(cluster, method, path, body, ctype)
    return code, json.loads(data)


def _raw(
    cluster: Any, method: str, path: str, body: bytes | None, ctype: str = "application/json"
) -> tuple[int, bytes]:
    api = cluster.api
    headers = {"Content-Type": ctype, "Accept": "application/json"}
    api.update_params_for_auth(headers, [], ["BearerToken"], path, method, None)
    answer = api.rest_client.pool_manager.request(
        method,
        api.configuration.host + path,
        body=body,
        headers=headers,
        preload_content=True,
        timeout=60,
    )
    return answer.status, answer.data


def _configmap(name: str, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **fields}


def _gone(core: client.CoreV1Api, kind: str, ns: str, name: str) -> bool:
    read = getattr(core, f"read_namespaced_{kind}")
    try:
        read(name, ns)
    except client.ApiException as exc:
        return exc.status == 404
    return False


# -- sizes ----------------------------------------------------------------------------------


def test_body_over_3_mib_is_413(cluster, core, ns):
    body = json.dumps(_configmap("big", data={"a": "x" * (3 * MIB)})).encode()
    code, status = _request(cluster, "POST", f"/api/v1/namespaces/{ns}/configmaps", body)
    assert code == 413, status
    assert status["reason"] == "RequestEntityTooLarge"
    assert status["message"] == "Request entity too large: limit is 3145728"
    assert _gone(core, "config_map", ns, "big")


@pytest.mark.parametrize(
    ("fields", "accepted"),
    [
        ({"data": {"a": "x" * MIB}}, True),  # exactly 1 MiB of values: keys are not counted
        ({"data": {"a": "x" * (MIB - 1), "b": "y"}}, True),
        ({"data": {"a": "x" * MIB, "b": "y"}}, False),
        ({"data": {"a": "x" * (MIB - 1)}, "binaryData": {"b": "eXk="}}, False),  # 2 bytes
        ({"data": {"a": "x" * 1_500_000}}, False),  # the size the issue found accepted
    ],
    ids=["1MiB", "1MiB-two-keys", "1MiB+1", "with-binaryData", "1.5MB"],
)
def test_configmap_data_is_at_most_1_mib(cluster, core, ns, fields, accepted):
    body = json.dumps(_configmap("cm", **fields)).encode()
    code, status = _request(cluster, "POST", f"/api/v1/namespaces/{ns}/configmaps", body)
    if accepted:
        assert code == 201, status
        return
    assert code == 422, status
    assert status["message"] == (
        'ConfigMap "cm" is invalid: []: Too long: may not be more than 1048576 bytes'
    )
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueTooLong",
            "message": "Too long: may not be more than 1048576 bytes",
            "field": "[]",
        }
    ]
    assert _gone(core, "config_map", ns, "cm")


@pytest.mark.parametrize("field", ["data", "stringData"])
def test_secret_data_is_at_most_1_mib(cluster, core, ns, field):
    import base64

    value = "x" * (MIB + 1)
    data = {"a": base64.b64encode(value.encode()).decode() if field == "data" else value}
    body = json.dumps(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, field: data}
    ).encode()
    code, status = _request(cluster, "POST", f"/api/v1/namespaces/{ns}/secrets", body)
    assert code == 422, status
    assert status["message"] == (
        'Secret "s" is invalid: data: Too long: may not be more than 1048576 bytes'
    )
    assert _gone(core, "secret", ns, "s")


def _pod(name: str, env_bytes: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "c", "image": "i", "env": [{"name": "E", "value": "x" * env_bytes}]}
            ]
        },
    }


def test_objects_over_etcds_limits_are_500(cluster, core, ns):
    """etcd refuses a request over 1.5 MiB; the API server's etcd client a message over
    2 MiB. Both come back as a 500 without a reason, with etcd's words."""
    path = f"/api/v1/namespaces/{ns}/pods"
    code, status = _request(cluster, "POST", path, json.dumps(_pod("ok", 1_400_000)).encode())
    assert code == 201, status
    code, status = _request(cluster, "POST", path, json.dumps(_pod("big", 1_600_000)).encode())
    assert (code, status["message"]) == (500, "etcdserver: request is too large"), status
    assert "reason" not in status
    code, status = _request(cluster, "POST", path, json.dumps(_pod("huge", 2_500_000)).encode())
    assert code == 500, status
    assert status["message"].startswith(
        "rpc error: code = ResourceExhausted desc = trying to send message larger than max ("
    )
    assert status["message"].endswith(" vs. 2097152)")
    assert _gone(core, "pod", ns, "big") and _gone(core, "pod", ns, "huge")


def test_an_update_past_etcds_limit_is_500_and_changes_nothing(cluster, ns):
    """A Deployment's pod template (paused, no replicas) grown from 1.4 MB to 1.6 MB."""
    path = f"/apis/apps/v1/namespaces/{ns}/deployments"

    def deployment(env_bytes: int) -> bytes:
        spec = _pod("d", env_bytes)["spec"]
        return json.dumps(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "d"},
                "spec": {
                    "replicas": 0,
                    "paused": True,
                    "selector": {"matchLabels": {"app": "d"}},
                    "template": {"metadata": {"labels": {"app": "d"}}, "spec": spec},
                },
            }
        ).encode()

    code, status = _request(cluster, "POST", path, deployment(1_400_000))
    assert code == 201, status
    code, status = _request(cluster, "PUT", f"{path}/d", deployment(1_600_000))
    assert (code, status["message"]) == (500, "etcdserver: request is too large"), status
    stored = client.AppsV1Api(cluster.api).read_namespaced_deployment("d", ns)
    assert len(stored.spec.template.spec.containers[0].env[0].value) == 1_400_000


# -- YAML aliases ---------------------------------------------------------------------------


def _nested_bomb(levels: int, width: int = 9) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        refs = ", ".join(f"*a{i - 1}" for _ in range(width))
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "".join(f"  {line}\n" for line in lines)


def _flat_aliases(name: str, value_bytes: int, aliases: int, plain: int = 0) -> str:
    return (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata:\n"
        + "".join(f"  b{i}: v\n" for i in range(plain))
        + f"  a0: &a {'x' * value_bytes}\n"
        + "".join(f"  a{i}: *a\n" for i in range(1, aliases + 1))
    )


@pytest.mark.parametrize("levels", [4, 9])
def test_nested_yaml_aliases_are_refused_as_go_yaml_does(cluster, core, ns, levels):
    doc = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\nbomb:\n" + _nested_bomb(levels)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    code, status = _request(cluster, "POST", path, doc.encode(), "application/yaml")
    assert code == 400, status
    assert "yaml: document contains excessive aliasing" in status["message"]
    code, status = _request(
        cluster,
        "PATCH",
        f"{path}/bomb?fieldManager=t",
        doc.encode(),
        "application/apply-patch+yaml",
    )
    assert code == 400, status
    assert status["message"] == (
        "error decoding YAML: error converting YAML to JSON: "
        "yaml: document contains excessive aliasing"
    )
    assert _gone(core, "config_map", ns, "bomb")


@pytest.mark.parametrize(
    ("aliases", "plain"),
    [(100, 1000), (101, 1000), (999, 5)],
    ids=["100-aliases", "101-aliases", "999-aliases-few-nodes"],
)
def test_yaml_aliases_go_yaml_accepts_are_accepted(cluster, core, ns, aliases, plain):
    doc = _flat_aliases("ok", 100, aliases, plain)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    code, status = _request(cluster, "POST", path, doc.encode(), "application/yaml")
    assert code == 201, status
    data = core.read_namespaced_config_map("ok", ns).data
    assert len(data) == aliases + 1 + plain and data[f"a{aliases}"] == "x" * 100


def test_an_anchor_inside_itself_is_400(cluster, ns):
    doc = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: r}\ndata: &a\n  a0: *a\n"
    path = f"/api/v1/namespaces/{ns}/configmaps"
    code, status = _request(cluster, "POST", path, doc.encode(), "application/yaml")
    assert code == 400, status
    assert "value contains itself" in status["message"]


def test_yaml_aliases_are_counted_expanded_against_the_size_limits(cluster, core, ns):
    """A 100 KB value repeated 30 times is a 3 MB ConfigMap (422, its 1 MiB); a 600 KB value
    repeated 3 times a 1.8 MB pod (500, etcd's 1.5 MiB). Nothing is stored, and a LIST of the
    namespace stays small."""
    path = f"/api/v1/namespaces/{ns}"
    code, status = _request(
        cluster,
        "POST",
        f"{path}/configmaps",
        _flat_aliases("cm", 100_000, 30).encode(),
        "application/yaml",
    )
    assert code == 422, status
    assert status["message"].endswith("[]: Too long: may not be more than 1048576 bytes")
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
        "  - name: c\n    image: i\n    env:\n"
        f"    - {{name: A, value: &a {'x' * 600_000}}}\n"
        "    - {name: B, value: *a}\n    - {name: C, value: *a}\n"
    )
    code, status = _request(cluster, "POST", f"{path}/pods", pod.encode(), "application/yaml")
    assert (code, status["message"]) == (500, "etcdserver: request is too large"), status
    code, listed = _raw(cluster, "GET", f"{path}/configmaps", None)
    assert code == 200 and len(listed) < 20_000


def test_a_yaml_body_expanding_past_16_mib_is_413_and_nothing_is_stored(cluster, core, ns):
    """The issue's shape, scaled down: a 1 MiB value repeated 40 times (a 1 MB body for a
    40 MB object). The embedded server refuses it before building it; a real server would
    build it and then refuse it (see above), so this runs on the embedded server only."""
    server = cluster.need_embedded("the real server builds the expanded object first")
    doc = _flat_aliases("boom", MIB, 40)
    started = time.monotonic()
    path = f"/api/v1/namespaces/{ns}/configmaps"
    code, status = _request(cluster, "POST", path, doc.encode(), "application/yaml")
    assert code == 413, status
    assert status["reason"] == "RequestEntityTooLarge"
    assert "16777216 bytes" in status["message"]
    assert time.monotonic() - started < 20
    assert _gone(core, "config_map", ns, "boom")
    assert server.core.store.count(("", "configmaps"), ns) <= 1  # kube-root-ca.crt at most


# -- label and annotation keys --------------------------------------------------------------

_NAME_RULE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_PREFIX_RULE = (
    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
    "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
    "'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)

# key -> the problems the real server reports (empty: accepted), for labels and annotations
KEYS: list[tuple[str, list[str]]] = [
    ("a" * 63, []),
    ("d" * 64 + ".com/x", []),  # a prefix's labels are not limited to 63 on their own
    ("c" * 250 + "/x", []),
    ("a" * 64, ["name part must be no more than 63 bytes"]),
    ("a" * 300, ["name part must be no more than 63 bytes"]),  # the case
    ("x/" + "a" * 64, ["name part must be no more than 63 bytes"]),
    ("b" * 254 + "/x", ["prefix part must be no more than 253 bytes"]),
    ("bad key", [f"name part {_NAME_RULE}"]),
    ("_a", [f"name part {_NAME_RULE}"]),
    ("a_b/x", [_PREFIX_RULE]),
    ("a..b/x", [_PREFIX_RULE]),
    ("/a", ["prefix part must be non-empty"]),
    ("a/", ["name part must be non-empty", f"name part {_NAME_RULE}"]),
    (
        "a/b/c",
        [
            f"a valid label key {_NAME_RULE} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ],
    ),
]


@pytest.mark.parametrize(("key", "problems"), KEYS, ids=[f"key{i}" for i in range(len(KEYS))])
@pytest.mark.parametrize("where", ["labels", "annotations"])
def test_label_and_annotation_keys_are_qualified_names(cluster, core, ns, where, key, problems):
    body = _configmap("k")
    body["metadata"][where] = {key: "v"}
    code, status = _request(
        cluster, "POST", f"/api/v1/namespaces/{ns}/configmaps", json.dumps(body).encode()
    )
    if not problems:
        assert code == 201, status
        return
    assert code == 422, status
    causes = [(c["field"], c["message"]) for c in status["details"]["causes"]]
    assert causes == [(f"metadata.{where}", f'Invalid value: "{key}": {p}') for p in problems]
    assert _gone(core, "config_map", ns, "k")


def test_annotation_keys_are_checked_lower_cased_label_keys_are_not(cluster, ns):
    path = f"/api/v1/namespaces/{ns}/configmaps"
    ok = _configmap("a", metadata={"name": "a", "annotations": {"Example.COM/x": "v"}})
    assert _request(cluster, "POST", path, json.dumps(ok).encode())[0] == 201
    bad = _configmap("b", metadata={"name": "b", "labels": {"Example.COM/x": "v"}})
    code, status = _request(cluster, "POST", path, json.dumps(bad).encode())
    assert code == 422, status
    assert status["details"]["causes"][0]["message"] == (
        f'Invalid value: "Example.COM/x": {_PREFIX_RULE}'
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("a" * 63, None),
        ("", None),
        ("a" * 64, "must be no more than 63 bytes"),
        (
            "a b",
            "a valid label must be an empty string or consist of alphanumeric characters, '-', "
            "'_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',"
            "  or 'my_value',  or '12345', regex used for validation is "
            "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
        ),
    ],
    ids=["63", "empty", "64", "space"],
)
def test_label_values(cluster, ns, value, problem):
    body = _configmap("v", metadata={"name": "v", "labels": {"k": value}})
    code, status = _request(
        cluster, "POST", f"/api/v1/namespaces/{ns}/configmaps", json.dumps(body).encode()
    )
    if problem is None:
        assert code == 201, status
        return
    assert code == 422, status
    assert status["details"]["causes"][0]["message"] == f'Invalid value: "{value}": {problem}'


@pytest.mark.parametrize(
    ("sizes", "accepted"),
    [((256 * 1024 - 2,), True), ((256 * 1024,), False), ((128 * 1024, 128 * 1024), False)],
    ids=["256KiB-with-key", "256KiB+key", "two-halves+keys"],
)
def test_annotations_total_at_most_256_kib(cluster, ns, sizes, accepted):
    annotations = {f"k{i}": "x" * n for i, n in enumerate(sizes, start=1)}
    body = _configmap("t", metadata={"name": "t", "annotations": annotations})
    code, status = _request(
        cluster, "POST", f"/api/v1/namespaces/{ns}/configmaps", json.dumps(body).encode()
    )
    if accepted:
        assert code == 201, status
        return
    assert code == 422, status
    assert status["message"] == (
        'ConfigMap "t" is invalid: metadata.annotations: Too long: may not be more than '
        "262144 bytes"
    )


# -- kind: List -----------------------------------------------------------------------------


def _kubectl(kubectl, cluster, *args, stdin=None):
    return subprocess.run(
        [kubectl, "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
    )


def test_kubectl_applies_a_list(kubectl, cluster, core, ns):
    """kubectl validates a ``kind: List`` file against the OpenAPI v2 document, then sends
    each item on its own; an item with an unknown field fails on both servers."""
    items = [_configmap(f"l{i}", data={"i": str(i)}) for i in range(2)]
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    for _ in range(2):  # created, then unchanged
        proc = _kubectl(kubectl, cluster, "-n", ns, "apply", "-f", "-", stdin=doc)
        assert proc.returncode == 0, proc.stderr
    assert "configmap/l1 unchanged" in proc.stdout
    assert core.read_namespaced_config_map("l1", ns).data == {"i": "1"}
    bad = {"apiVersion": "v1", "kind": "List", "items": [{**_configmap("l9"), "bogus": 1}]}
    proc = _kubectl(kubectl, cluster, "-n", ns, "apply", "-f", "-", stdin=json.dumps(bad))
    assert proc.returncode != 0 and 'unknown field "bogus"' in proc.stderr
    assert _gone(core, "config_map", ns, "l9")


def test_a_list_posted_as_such_is_400(cluster, core, ns):
    """What kubectl never does (it sends the items): the real server's 400."""
    body = {"apiVersion": "v1", "kind": "List", "items": [_configmap("l1")]}
    path = f"/api/v1/namespaces/{ns}/configmaps"
    code, status = _request(cluster, "POST", path, json.dumps(body).encode())
    assert (code, status["reason"]) == (400, "BadRequest"), status
    assert status["message"] == (
        'List in version "v1" cannot be handled as a ConfigMap: converting (v1.List) to '
        "(core.ConfigMap): unknown conversion"
    )
    assert _gone(core, "config_map", ns, "l1")


def test_kai_render_json_pipes_into_kubectl_apply(kubectl, cluster, core, tmp_path):
    """The documented pipe: ``kai render -o json | kubectl apply -f -``."""
    from kubernetes import dynamic

    crds = REPO / "manifests" / "crds"
    proc = _kubectl(kubectl, cluster, "apply", "-k", str(crds))
    assert proc.returncode == 0, proc.stderr
    proc = _kubectl(
        kubectl,
        cluster,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/queues.scheduling.run.ai",
    )
    assert proc.returncode == 0, proc.stderr
    rendered = subprocess.run(
        [
            sys.executable,
            "-m",
            "kai.cli",
            "render",
            "-o",
            "json",
            str(REPO / "examples" / "gitops"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    listed = json.loads(rendered)
    assert listed["kind"] == "List"
    namespaces = {i["metadata"].get("namespace") for i in listed["items"]} - {None}
    created = []
    for space in sorted(namespaces):
        try:
            core.create_namespace({"metadata": {"name": space}})
            created.append(space)
        except client.ApiException as exc:
            assert exc.status == 409, exc
    queues = [i["metadata"]["name"] for i in listed["items"] if i["kind"] == "Queue"]
    try:
        proc = _kubectl(kubectl, cluster, "apply", "-f", "-", stdin=rendered)
        assert proc.returncode == 0, proc.stderr
        dyn = dynamic.DynamicClient(cluster.api)
        queue_api = dyn.resources.get(api_version="scheduling.run.ai/v2", kind="Queue")
        names = {q.metadata.name for q in queue_api.get().items}
        assert set(queues) <= names
    finally:
        for kind in sorted({i["kind"] for i in listed["items"] if i["kind"] != "ConfigMap"}):
            names = [i["metadata"]["name"] for i in listed["items"] if i["kind"] == kind]
            _kubectl(kubectl, cluster, "delete", kind.lower(), "--ignore-not-found", *names)
        for space in created:
            core.delete_namespace(space)


# -- half-open connections ------------------------------------------------------------------


def test_a_half_open_tls_connection_logs_one_line(cluster, caplog):
    """A client that sends part of a request over TLS and goes away: one warning line naming
    the peer, no traceback."""
    server = cluster.need_embedded("reads the embedded server's log")
    caplog.set_level(logging.WARNING, logger="kube_emulator")
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    for _ in range(3):
        raw = socket.create_connection(("127.0.0.1", server.options.port), timeout=5)
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"GET /api HTTP/1.1\r\nHost: x\r\n")
            time.sleep(0.05)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not caplog.records:
        time.sleep(0.05)
    time.sleep(0.3)
    records = [r for r in caplog.records if r.name.startswith("kube_emulator")]
    assert all(r.exc_info is None for r in records), [r.getMessage() for r in records]
    assert all("\n" not in r.getMessage() for r in records)
    assert len(records) <= 3


def test_socket_and_tls_failures_log_one_line_bugs_keep_their_traceback(cluster, caplog):
    server = cluster.need_embedded("calls the embedded server's error hook")
    httpd = server._httpd
    caplog.set_level(logging.WARNING, logger="kube_emulator")
    try:
        raise ssl.SSLEOFError(8, "EOF occurred in violation of protocol (_ssl.c:2427)")
    except ssl.SSLError:
        httpd.handle_error(None, ("10.0.0.7", 4242))
    try:
        raise ConnectionResetError("reset")
    except ConnectionResetError:
        httpd.handle_error(None, ("10.0.0.7", 4243))
    try:
        raise KeyError("a bug")
    except KeyError:
        httpd.handle_error(None, ("10.0.0.7", 4244))
    lines = [(r.levelno, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert lines[0] == (
        logging.WARNING,
        "connection from 10.0.0.7:4242 closed: SSLEOFError: EOF occurred in violation of "
        "protocol (_ssl.c:2427)",
        False,
    )
    assert lines[1] == (logging.ERROR, "error on a connection from 10.0.0.7:4244", True)
    assert len(lines) == 2

"""The lean plain-HTTP client path of ``Kube`` and the server's request counters."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kai.kube.client import ApiError, Kube, TransientError
from kai.kube.plainhttp import ConnectionLost, PlainHTTP
from kai.kube.resources import PODS
from kai.sim.workloads import ensure_namespace, pod_manifest
from kube_emulator import ApiServer
from kube_emulator.options import ServerOptions


def test_kube_uses_the_plain_path_and_round_trips(kube: Kube) -> None:
    assert kube._plain is not None
    ensure_namespace(kube, "plain")
    created = kube.create(PODS, pod_manifest("p", "plain", "default", gpus=1))
    assert created["metadata"]["uid"]
    patched = kube.patch(PODS, "p", {"metadata": {"annotations": {"a": "1"}}}, "plain")
    assert patched["metadata"]["annotations"]["a"] == "1"
    assert kube.get(PODS, "p", "plain")["metadata"]["annotations"]["a"] == "1"
    with pytest.raises(ApiError) as err:
        kube.get(PODS, "missing", "plain")
    assert err.value.status == 404 and err.value.reason == "NotFound"
    listed = kube.list(PODS, "plain", limit=1)
    assert [p["metadata"]["name"] for p in listed["items"]] == ["p"]


def test_server_counts_requests_by_verb_and_resource(kube: Kube) -> None:
    ensure_namespace(kube, "count")
    kube.create(PODS, pod_manifest("c", "count", "default", gpus=1))
    kube.get(PODS, "c", "count")
    kube.list(PODS, "count")
    kube.patch(PODS, "c", {"status": {"phase": "Running"}}, "count", sub="status")
    status, text = kube.get_text("/metrics")
    assert status == 200
    for line in (
        'apiserver_request_total{verb="POST",resource="pods",subresource=""} 1',
        'apiserver_request_total{verb="GET",resource="pods",subresource=""} 1',
        'apiserver_request_total{verb="LIST",resource="pods",subresource=""} 1',
        'apiserver_request_total{verb="PATCH",resource="pods",subresource="status"} 1',
    ):
        assert line in text.splitlines()


def test_a_restarted_server_is_reached_on_a_fresh_connection(tmp_path: Path) -> None:
    first = ApiServer().start()
    port = first.options.port
    kube = Kube.from_kubeconfig(str(first.write_kubeconfig(tmp_path / "kubeconfig")))
    try:
        assert kube.list(PODS, "default")["items"] == []  # leaves a kept-alive connection
        first.stop()
        second = ApiServer(port=port).start()
        try:
            # the old connection is dead: the request goes out again on a new one
            assert kube.list(PODS, "default")["items"] == []
        finally:
            second.stop()
    finally:
        kube.close()


class _Scripted:
    """A one-thread TCP server that answers each connection with scripted raw responses."""

    def __init__(self, answers: list[list[bytes]]) -> None:
        self.answers = answers  # per connection: the responses, one per request
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for script in self.answers:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                for answer in script:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    conn.sendall(answer)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def scripted() -> Iterator[list[_Scripted]]:
    made: list[_Scripted] = []
    yield made
    for s in made:
        s.close()


def test_chunked_and_closed_connections_are_handled(scripted: list[_Scripted]) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n"
        b'\r\n3\r\n{"a\r\n4\r\n":1}\r\n0\r\n\r\n'
    )
    plain = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"
    # connection 1: a chunked answer, then the server closes the idle connection without
    # answering the second request; connection 2 (the client's retry): a normal answer
    server = _Scripted([[chunked], [plain]])
    scripted.append(server)
    client = PlainHTTP(f"http://127.0.0.1:{server.port}")
    assert client.request("GET", "/x", b"", None, 5.0) == (200, b'{"a":1}')
    assert client.request("POST", "/y", b"", b"{}", 5.0) == (201, b"{}")
    assert server.connections == 2


def test_connection_close_header_is_honoured(scripted: list[_Scripted]) -> None:
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n[]"
    server = _Scripted([[closing], [closing]])
    scripted.append(server)
    client = PlainHTTP(f"http://127.0.0.1:{server.port}")
    assert client.request("GET", "/a", b"", None, 5.0) == (200, b"[]")
    assert client.request("GET", "/b", b"", None, 5.0) == (200, b"[]")
    assert server.connections == 2


def test_a_truncated_body_is_an_error(scripted: list[_Scripted]) -> None:
    server = _Scripted([[b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}"]])
    scripted.append(server)
    client = PlainHTTP(f"http://127.0.0.1:{server.port}")
    with pytest.raises(ConnectionLost):
        client.request("GET", "/a", b"", None, 5.0)


def test_no_server_is_a_transient_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    from kubernetes import client as k8s

    cfg = k8s.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    kube = Kube(k8s.ApiClient(cfg), request_timeout=2.0)
    assert kube._plain is not None
    with pytest.raises(TransientError):
        kube.get(PODS, "p", "default")


def test_watch_batch_delay_is_checked() -> None:
    with pytest.raises(ValueError, match="watch_batch_delay"):
        ServerOptions(watch_batch_delay=2.0).check()


def test_merge_patches_still_check_what_they_change(kube: Kube) -> None:
    """Fields a merge patch leaves alone are not re-validated; the ones it changes are."""
    ensure_namespace(kube, "shape")
    kube.create(PODS, pod_manifest("s", "shape", "default", gpus=1))
    with pytest.raises(ApiError) as err:
        kube.patch(PODS, "s", {"status": {"phase": 5}}, "shape", sub="status")
    assert err.value.status in (400, 422)
    with pytest.raises(ApiError):
        kube.patch(PODS, "s", {"spec": {"containers": "not a list"}}, "shape")
    patched = kube.patch(PODS, "s", {"metadata": {"labels": {"l": "v"}}}, "shape")
    assert patched["metadata"]["labels"]["l"] == "v"
    assert patched["spec"]["containers"][0]["name"] == "main"
    cleared = kube.patch(
        PODS, "s", {"status": {"phase": "Running", "message": None}}, "shape", sub="status"
    )
    assert cleared["status"]["phase"] == "Running" and "message" not in cleared["status"]

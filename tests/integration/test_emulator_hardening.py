"""The embedded API server against hostile requests: bodies that try to escape the size limit
(negative Content-Length, negative or malformed chunk sizes) and YAML alias bombs. Each is
refused quickly, and the server keeps serving. Embedded server only: the inputs are raw HTTP
requests against its plain-HTTP port."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from kubernetes import client, config

from kube_emulator import ApiServer
from kube_emulator.yamlbody import YamlBodyError, load_yaml


@pytest.fixture
def server() -> Iterator[ApiServer]:
    srv = ApiServer().start()
    try:
        yield srv
    finally:
        srv.stop()


def _raw(server: ApiServer, request: bytes, timeout: float = 10, auth: bool = True) -> bytes:
    """Send ``request`` as is (with the server's token after its first line unless ``auth`` is
    False); the server's answer up to its close (or ``timeout``)."""
    if auth:
        line, _, rest = request.partition(b"\r\n")
        request = line + f"\r\nAuthorization: Bearer {server.token}\r\n".encode() + rest
    parts = urlsplit(server.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        try:
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)  # a server reading "until EOF" gets EOF, not a hang
        except OSError:
            pass  # the server answered and closed before reading it all: its answer counts
        chunks = []
        while True:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)


def _post_head(path: str, extra: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}\r\n"
    ).encode()


def _still_serving(server: ApiServer, tmp_path) -> None:
    api = config.new_client_from_config(str(server.write_kubeconfig(tmp_path / "kc")))
    try:
        assert client.CoreV1Api(api).list_namespaced_config_map("default").items == []
    finally:
        api.close()


def test_negative_content_length_is_400(server, tmp_path):
    body = b'{"metadata":{"name":"x"}}' + b" " * 100_000
    started = time.monotonic()
    answer = _raw(
        server,
        _post_head("/api/v1/namespaces/default/configmaps", "Content-Length: -1\r\n") + body,
    )
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"Content-Length must not be negative" in answer
    assert time.monotonic() - started < 5
    _still_serving(server, tmp_path)


@pytest.mark.parametrize("size_line", [b"-1", b"-7fffffff", b"zz", b"", b"g" * 5000])
def test_bad_chunk_sizes_are_400(server, tmp_path, size_line):
    head = _post_head("/api/v1/namespaces/default/configmaps", "Transfer-Encoding: chunked\r\n")
    answer = _raw(server, head + size_line + b"\r\n" + b"{" * 100_000)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"bad chunk size" in answer
    _still_serving(server, tmp_path)


def test_chunk_extensions_are_allowed(server):
    body = b'{"metadata":{"name":"chunked"}}'
    head = _post_head("/api/v1/namespaces/default/configmaps", "Transfer-Encoding: chunked\r\n")
    answer = _raw(
        server,
        head + f"{len(body):x};name=value\r\n".encode() + body + b"\r\n0\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 201"), answer[:300]


def _bomb(levels: int = 9, width: int = 9) -> str:
    """A few hundred bytes that expand to width**levels nodes."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        refs = ", ".join(f"*a{i - 1}" for _ in range(width))
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


def test_yaml_bomb_helper_refuses_excessive_aliasing():
    started = time.monotonic()
    with pytest.raises(YamlBodyError, match="excessive aliasing"):
        load_yaml(_bomb())
    assert time.monotonic() - started < 2
    # aliases that stay small are fine
    assert load_yaml("a: &x [1, 2]\nb: *x\n") == {"a": [1, 2], "b": [1, 2]}
    with pytest.raises(YamlBodyError):
        load_yaml("a: [unclosed\n")


@pytest.mark.parametrize(
    ("method", "path", "ctype"),
    [
        ("POST", "/api/v1/namespaces/default/configmaps", "application/yaml"),
        (
            "PATCH",
            "/api/v1/namespaces/default/configmaps/bomb?fieldManager=t",
            "application/apply-patch+yaml",
        ),
    ],
)
def test_yaml_bomb_body_is_refused_and_nothing_stored(server, tmp_path, method, path, ctype):
    # the bomb under an unknown top-level field (before this limit it was stored, pruned or not)
    doc = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\n"
        "data:\n  k: v\nbomb:\n" + "".join(f"  {line}\n" for line in _bomb().splitlines())
    )
    body = doc.encode()
    assert len(body) < 1000
    started = time.monotonic()
    answer = _raw(
        server,
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body,
    )
    assert answer.startswith(b"HTTP/1.1 400"), answer[:300]
    assert b"excessive aliasing" in answer
    assert time.monotonic() - started < 5
    _still_serving(server, tmp_path)

"""The embedded API server's defences (docs/security.md): the bearer token, the test endpoints
behind a flag, read deadlines and the connection cap against slow and half-open clients, exact
410 Gone at the history window, and ``--data-dir`` persistence that survives a kill. Embedded
server only: each test starts its own server with the settings it needs; every input is made
here, and each test is bounded in time and memory."""

from __future__ import annotations

import json
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from kubernetes import client, config

from kube_emulator import ApiServer


@pytest.fixture
def server() -> Iterator[ApiServer]:
    srv = ApiServer().start()
    try:
        yield srv
    finally:
        srv.stop()


def _ask(
    server: ApiServer, method: str, path: str, token: str | None, body: bytes = b""
) -> tuple[int, bytes]:
    return _ask_url(server.url, method, path, token, body)


def _ask_url(
    url: str, method: str, path: str, token: str | None, body: bytes = b""
) -> tuple[int, bytes]:
    """One request over a fresh plain-HTTP connection; the status code and the body."""
    import http.client

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=body or None, headers=headers)
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def _api(server: ApiServer, tmp_path: Path) -> client.ApiClient:
    return config.new_client_from_config(str(server.write_kubeconfig(tmp_path / "kubeconfig")))


# -- the token -------------------------------------------------------------------------------
@pytest.mark.parametrize("token", [None, "", "wrong", "kai-sim"])
def test_requests_without_the_token_get_401(server, token):
    for method, path in [
        ("GET", "/api/v1/namespaces"),
        ("GET", "/api/v1/namespaces/default/configmaps?watch=1"),
        ("GET", "/apis"),
        ("GET", "/metrics"),
        ("POST", "/api/v1/namespaces/default/configmaps"),
    ]:
        code, body = _ask(server, method, path, token, b'{"metadata":{"name":"x"}}')
        assert code == 401, (method, path, body)
        assert json.loads(body) == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }
    assert server.core.store.get(("", "configmaps"), "default", "x") is None


def test_health_and_version_need_no_token(server):
    for path in ("/healthz", "/livez", "/readyz", "/version"):
        assert _ask(server, "GET", path, None)[0] == 200, path


def test_the_kubeconfig_carries_a_new_random_token(server, tmp_path):
    path = server.write_kubeconfig(tmp_path / "kc")
    assert path.stat().st_mode & 0o777 == 0o600  # it is a credential
    token = yaml.safe_load(path.read_text())["users"][0]["user"]["token"]
    assert token == server.token and len(token) >= 40
    assert _ask(server, "GET", "/api/v1/namespaces", token)[0] == 200
    with ApiServer() as other:
        assert other.token != token
        assert _ask(other, "GET", "/api/v1/namespaces", token)[0] == 401


def test_without_auth_any_request_is_served():
    with ApiServer(require_auth=False) as open_server:
        assert open_server.token is None
        assert _ask(open_server, "GET", "/api/v1/namespaces", None)[0] == 200


# -- the test endpoints ----------------------------------------------------------------------
def test_test_endpoints_are_404_unless_enabled(server):
    for method, path in [
        ("PUT", "/kai-sim/faults"),
        ("GET", "/kai-sim/faults"),
        ("POST", "/kai-sim/compact"),
    ]:
        code, body = _ask(server, method, path, server.token, b'{"error_rate": 1}')
        assert code == 404, (path, body)
    assert server.faults.settings.error_rate == 0
    with ApiServer(enable_test_endpoints=True) as enabled:
        assert _ask(enabled, "POST", "/kai-sim/compact", None)[0] == 401
        code, body = _ask(enabled, "PUT", "/kai-sim/faults", enabled.token, b'{"seed": 5}')
        assert code == 200 and json.loads(body)["seed"] == 5
        assert _ask(enabled, "POST", "/kai-sim/compact", enabled.token)[0] == 200


# -- slow and half-open clients --------------------------------------------------------------
def _flood(address: tuple[str, int], count: int, sockets: list[socket.socket]) -> None:
    """Half-open connections: every other one sends nothing, the rest half a request head."""
    for i in range(count):
        try:
            sock = socket.create_connection(address, timeout=5)
        except OSError:
            continue
        if i % 2:
            sock.sendall(b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        sockets.append(sock)


def test_slow_and_half_open_connections_do_not_lock_out_a_client(tmp_path):
    """Connections that send nothing or half a header, opened while a normal client keeps
    asking: the client gets every answer, the server holds at most its cap."""
    server = ApiServer(max_connections=100, idle_timeout=30, header_timeout=30).start()
    sockets: list[socket.socket] = []
    api = _api(server, tmp_path)
    try:
        parts = urlsplit(server.url)
        flooder = threading.Thread(
            target=_flood, args=((parts.hostname, parts.port), 400, sockets), daemon=True
        )
        flooder.start()
        v1 = client.CoreV1Api(api)
        httpd = server._httpd
        answered = 0
        started = time.monotonic()
        # until the server has taken every flood connection from its backlog
        while flooder.is_alive() or answered < 20 or httpd.evicted_connections < 300:
            assert v1.list_namespace(_request_timeout=10).items  # a kept-alive connection
            assert _ask(server, "GET", "/api/v1/namespaces", server.token)[0] == 200  # a new one
            answered += 1
            assert time.monotonic() - started < 60
        assert len(sockets) == 400
        # at most the cap is held; the oldest waiting ones were closed to make room
        assert len(httpd.connections) <= 100
    finally:
        for sock in sockets:
            sock.close()
        api.close()
        server.stop()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the RSS from /proc")
def test_the_cap_spares_a_connection_whose_request_has_arrived():
    """At the cap, a just-accepted connection whose client has already sent its request (its
    thread has not read it yet) is not taken for an idle one: an older-looking, truly idle
    connection is closed instead (the suite's load once delayed a handler thread long enough
    for the flood to make a fresh client connection the oldest idle one)."""
    server = ApiServer(max_connections=2).start()
    pairs = [socket.socketpair() for _ in range(3)]
    try:
        httpd = server._httpd
        sent, silent, new = (ours for ours, _ in pairs)
        with httpd.connections_lock:
            httpd.connections.clear()  # only the three sockets of this test
        assert httpd._admit(sent) and httpd._admit(silent)
        pairs[0][1].sendall(b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\n\r\n")
        # the request is waiting in the socket: the connection admitted first is spared
        assert httpd._admit(new)
        assert set(httpd.connections) == {id(sent), id(new)}
        assert httpd.evicted_connections == 1
        # the silent one was evicted: its thread's next read sees the end, but a request it
        # had read just before (still marked idle) can still be answered
        assert httpd.connections.get(id(silent)) is None
        assert silent.recv(1) == b""
        silent.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
        assert pairs[1][1].recv(64).startswith(b"HTTP/1.1 200")
        # when every waiting connection has input, a new one is refused, none cut
        pairs[2][1].sendall(b"G")
        assert not httpd._admit(socket.socketpair()[0])
        assert httpd.evicted_connections == 1
    finally:
        with server._httpd.connections_lock:
            server._httpd.connections.clear()
        for a, b in pairs:
            a.close()
            b.close()
        server.stop()


def test_the_cap_closes_a_slow_request_head_whole():
    """A connection still sending its request head when it is chosen to make room is closed
    both ways (its partial request is never served); only idle ones keep their writing half."""
    server = ApiServer(max_connections=2).start()
    (slow, slow_peer), (busy, busy_peer) = socket.socketpair(), socket.socketpair()
    new, new_peer = socket.socketpair()
    try:
        httpd = server._httpd
        with httpd.connections_lock:
            httpd.connections.clear()
        assert httpd._admit(slow) and httpd._admit(busy)
        httpd.connections[id(slow)].mark("head")
        httpd.connections[id(busy)].mark("busy")
        assert httpd._admit(new)
        assert set(httpd.connections) == {id(busy), id(new)}
        slow_peer.settimeout(5)
        assert slow_peer.recv(1) == b""  # the server's FIN: the client sees the end at once
    finally:
        with server._httpd.connections_lock:
            server._httpd.connections.clear()
        for sock in (slow, slow_peer, busy, busy_peer, new, new_peer):
            sock.close()
        server.stop()


def test_1500_half_open_connections_under_a_1024_descriptor_limit(tmp_path):
    """The report: about 1,100 idle connections took the server down (a process limited to 1,024
    file descriptors). Now the cap follows the limit: 1,500 of them, and a client still gets
    answers, within bounded memory."""
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kai.cli",
            "apiserver",
            "--no-tls",
            "--kubeconfig-out",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_low_fd_limit,
    )
    sockets: list[socket.socket] = []
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("kubeconfig: ")
        url = proc.stdout.readline().strip().removeprefix("serving: ")
        parts = urlsplit(url)
        api = config.new_client_from_config(str(kubeconfig))
        v1 = client.CoreV1Api(api)
        rss_before = _rss_mb(proc.pid)
        flooder = threading.Thread(
            target=_flood, args=((parts.hostname, parts.port), 1500, sockets), daemon=True
        )
        flooder.start()
        token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
        answered, started = 0, time.monotonic()
        while flooder.is_alive() or answered < 20:
            assert v1.list_namespace(_request_timeout=10).items  # a kept-alive connection
            assert _ask_url(url, "GET", "/api/v1/namespaces", token)[0] == 200  # a new one
            answered += 1
            assert time.monotonic() - started < 90
        flooder.join(30)
        assert len(sockets) == 1500
        assert v1.read_namespace("default", _request_timeout=10).metadata.name == "default"
        assert _rss_mb(proc.pid) - rss_before < 150
        api.close()
    finally:
        for sock in sockets:
            sock.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def test_a_request_head_that_never_ends_is_cut_at_the_deadline():
    with ApiServer(header_timeout=1.0, idle_timeout=2.0) as srv:
        parts = urlsplit(srv.url)
        with (
            socket.create_connection((parts.hostname, parts.port), timeout=10) as partial,
            socket.create_connection((parts.hostname, parts.port), timeout=10) as idle,
        ):
            started = time.monotonic()
            partial.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            for _ in range(3):  # a slowloris drip: one header line now and then
                time.sleep(0.2)
                partial.sendall(b"X-Drip: 1\r\n")
            assert partial.recv(1024) == b""  # the server closed it, without an answer
            waited_partial = time.monotonic() - started
            assert idle.recv(1024) == b""
            waited_idle = time.monotonic() - started
        assert waited_partial < 4 and 1.5 <= waited_idle < 5
        assert srv._httpd.timed_out_connections >= 2


def test_when_every_connection_is_busy_a_new_one_gets_503(tmp_path):
    with ApiServer(max_connections=3) as srv:
        api = _api(srv, tmp_path)
        v1 = client.CoreV1Api(api)
        streams = []
        try:
            for _ in range(3):  # watches keep their connections busy
                response = v1.list_namespaced_config_map(
                    "default", watch=True, timeout_seconds=30, _preload_content=False
                )
                streams.append(response)
            deadline = time.monotonic() + 10
            while any(c.state != "busy" for c in list(srv._httpd.connections.values())):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            code, body = _ask(srv, "GET", "/api/v1/namespaces", srv.token)
            assert code == 503 and json.loads(body)["reason"] == "ServiceUnavailable"
        finally:
            for response in streams:
                response.close()
            api.close()


# -- 410 Gone --------------------------------------------------------------------------------
def _watch_lines(v1: client.CoreV1Api, rv: str) -> list[dict]:
    response = v1.list_namespaced_config_map(
        "default", watch=True, resource_version=rv, timeout_seconds=1, _preload_content=False
    )
    try:
        return [json.loads(line) for line in response.data.splitlines() if line]
    finally:
        response.close()


def test_a_watch_older_than_the_history_window_is_410(tmp_path):
    with ApiServer(history_size=10) as srv:
        api = _api(srv, tmp_path)
        v1 = client.CoreV1Api(api)
        start = v1.list_namespaced_config_map("default").metadata.resource_version
        for i in range(15):  # more than the window, less than twice it
            v1.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
        (gone,) = _watch_lines(v1, start)
        assert gone["type"] == "ERROR" and gone["object"]["code"] == 410
        assert gone["object"]["reason"] == "Expired"
        # the oldest resourceVersion still in the window resumes, with the 10 events after it
        events = _watch_lines(v1, str(srv.core.store.oldest_rv()))
        assert [e["type"] for e in events] == ["ADDED"] * 10
        assert [e["object"]["metadata"]["name"] for e in events] == [f"c{i}" for i in range(5, 15)]
        older = _watch_lines(v1, str(srv.core.store.oldest_rv() - 1))
        assert [e["type"] for e in older] == ["ERROR"]
        api.close()


def test_a_continue_token_older_than_the_window_is_410(tmp_path):
    with ApiServer(history_size=10) as srv:
        api = _api(srv, tmp_path)
        v1 = client.CoreV1Api(api)
        for i in range(4):
            v1.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
        page = v1.list_namespaced_config_map("default", limit=2)
        for i in range(11):
            v1.create_namespaced_config_map("default", {"metadata": {"name": f"d{i}"}})
        with pytest.raises(client.ApiException) as err:
            v1.list_namespaced_config_map("default", limit=2, _continue=page.metadata._continue)
        assert err.value.status == 410 and json.loads(err.value.body)["reason"] == "Expired"
        api.close()


# -- --data-dir ------------------------------------------------------------------------------
def _kai() -> list[str]:
    return [sys.executable, "-m", "kai.cli"]


def _start(data_dir: Path, kubeconfig: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [*_kai(), "apiserver", "--data-dir", str(data_dir), "--kubeconfig-out", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("kubeconfig: "):
        proc.kill()
        raise AssertionError(f"kai apiserver did not start: {line!r} {proc.stderr.read()}")
    assert proc.stdout.readline().startswith("serving: https://")
    return proc


def test_objects_survive_a_restart_and_a_kill(tmp_path):
    data, kubeconfig = tmp_path / "data", tmp_path / "kubeconfig"
    proc = _start(data, kubeconfig)
    try:
        api = config.new_client_from_config(str(kubeconfig))
        v1 = client.CoreV1Api(api)
        v1.create_namespace({"metadata": {"name": "kept"}})
        for i in range(20):
            v1.create_namespaced_config_map(
                "kept", {"metadata": {"name": f"c{i}"}, "data": {"i": str(i)}}
            )
        v1.delete_namespaced_config_map("c0", "kept")
        v1.patch_namespaced_config_map("c1", "kept", {"data": {"i": "patched"}})
        seen = int(v1.list_namespaced_config_map("kept").metadata.resource_version)
        api.close()
    finally:
        proc.send_signal(signal.SIGKILL)  # no clean stop: only the journal has the writes
        proc.wait(timeout=30)
    assert (data / "journal.log").stat().st_size > 0
    for stop in (signal.SIGKILL, signal.SIGTERM):
        proc = _start(data, kubeconfig)  # a new token each start: the new kubeconfig has it
        try:
            api = config.new_client_from_config(str(kubeconfig))
            v1 = client.CoreV1Api(api)
            listing = v1.list_namespaced_config_map("kept")
            names = sorted(
                c.metadata.name for c in listing.items if c.metadata.name.startswith("c")
            )
            assert names == sorted(f"c{i}" for i in range(1, 20))
            assert v1.read_namespaced_config_map("c1", "kept").data == {"i": "patched"}
            # every later write is newer than anything a client saw before the restart
            assert int(listing.metadata.resource_version) > seen
            made = v1.create_namespaced_config_map("kept", {"metadata": {"name": f"after-{stop}"}})
            assert int(made.metadata.resource_version) > seen
            seen = int(made.metadata.resource_version)
            api.close()
        finally:
            proc.send_signal(stop)
            assert proc.wait(timeout=30) in (0, -signal.SIGKILL)
    assert (data / "snapshot.json").exists()  # the clean stop wrote one
    assert (data / "journal.log").stat().st_size == 0


def test_a_torn_last_journal_line_is_dropped_and_a_corrupt_one_refused(tmp_path):
    data = tmp_path / "data"
    with ApiServer(data_dir=str(data)) as srv:
        api = _api(srv, tmp_path)
        client.CoreV1Api(api).create_namespaced_config_map("default", {"metadata": {"name": "a"}})
        api.close()
        journal = (data / "journal.log").read_bytes()  # before the stop turns it into a snapshot
    (data / "snapshot.json").unlink()
    # a crash in the middle of an append: the last line has no end
    (data / "journal.log").write_bytes(journal + journal.splitlines()[-1][:25])
    (data / "snapshot.json.tmp").write_bytes(b'{"half a snap')  # a snapshot never finished
    with ApiServer(data_dir=str(data)) as srv:
        assert srv.core.store.get(("", "configmaps"), "default", "a") is not None
        assert not (data / "snapshot.json.tmp").exists()
    (data / "snapshot.json").unlink()
    lines = journal.splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"name"', b'"nime"', 1)  # damage inside, checksum now wrong
    (data / "journal.log").write_bytes(b"".join(lines))
    out = subprocess.run(
        [*_kai(), "apiserver", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert f"{data / 'journal.log'}:2: corrupt journal line" in out.stderr, out.stderr


def test_without_a_data_dir_the_help_says_a_restart_loses_everything():
    out = subprocess.run(
        [*_kai(), "apiserver", "--help"], capture_output=True, text=True, timeout=60
    )
    text = " ".join(out.stdout.split())
    assert "without --data-dir, a restart loses every object" in text
    assert "--insecure-no-auth" in text and "--enable-test-endpoints" in text

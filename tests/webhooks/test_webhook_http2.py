"""HTTP/2 in the admission server: many concurrent calls on one connection, as kube-apiserver
sends them (its webhook client picks ``h2`` by ALPN); flow control both ways; GOAWAY after a
certificate rotation with the calls in flight still answered, and (the Python server) the
connection then closed without a reset under a client that is still sending. Every test but
those of the Python server's closing runs against both server backends: granian (the
default) and the pure-Python fallback."""

from __future__ import annotations

import base64
import datetime as dt
import re
import select
import socket
import ssl
import threading
import time
from typing import Any

import orjson
import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import (
    DataReceived,
    ResponseReceived,
    StreamEnded,
)
from h2.settings import SettingCodes

from kai.webhooks import certs, http2
from kai.webhooks.granian_server import GranianAdmissionServer
from kai.webhooks.review import Request, Verdict
from kai.webhooks.server import AdmissionServer, Route

release = threading.Event()
GOAWAY = 0x7  # the HTTP/2 frame type


def _fast(req: Request) -> Verdict:
    return Verdict(warnings=[req.uid])


def _slow(req: Request) -> Verdict:
    release.wait(10)
    return Verdict(warnings=["slow " + req.uid])


BIG_PATCH = [{"op": "add", "path": "/metadata/annotations/big", "value": "x" * 200_000}]


def _big(req: Request) -> Verdict:
    return Verdict(patch=BIG_PATCH)  # e.g. the mutation of a pod with a large spec


Server = AdmissionServer | GranianAdmissionServer


@pytest.fixture(params=["granian", "python"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _new(backend: str, routes: dict[str, Route], workers: int) -> Server:
    kind = GranianAdmissionServer if backend == "granian" else AdmissionServer
    return kind(routes, port=0, host="127.0.0.1", workers=workers)


def _server(backend: str) -> tuple[certs.KeyPair, Server]:
    ca = certs.new_ca("test-ca", dt.timedelta(hours=1))
    serving = certs.new_serving(ca, ["127.0.0.1"], dt.timedelta(hours=1))
    routes: dict[str, Route] = {
        "/fast": ("fast", _fast),
        "/slow": ("slow", _slow),
        "/big": ("big", _big),
    }
    server = _new(backend, routes, 4)
    server.set_certificate(serving.cert, serving.key)
    server.start()
    return ca, server


def _review(uid: str) -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"kind": "Pod"}, "operation": "CREATE"},
        }
    )


class Client:
    """A minimal HTTP/2 client on one TLS connection (what the API server's client does)."""

    def __init__(self, port: int, ca: bytes, window: int | None = None) -> None:
        context = ssl.create_default_context(cadata=ca.decode())
        context.set_alpn_protocols(["h2"])
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
        assert self.sock.selected_alpn_protocol() == "h2"
        self.h2 = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        if window is not None:
            self.h2.local_settings.update({SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.h2.initiate_connection()
        self.sock.sendall(self.h2.data_to_send())
        self.status: dict[int, int] = {}
        self.bodies: dict[int, bytearray] = {}
        self.ended: list[int] = []  # stream ids in the order their answers completed
        self.goaways: list[tuple[int, int]] = []  # (last stream id, error code) of each GOAWAY
        self.buffer = b""
        self.auto_ack = True

    def post(self, path: str, body: bytes) -> int:
        sid = self.h2.get_next_available_stream_id()
        self.h2.send_headers(
            sid,
            [
                (b":method", b"POST"),
                (b":path", path.encode()),
                (b":scheme", b"https"),
                (b":authority", b"127.0.0.1"),
                (b"content-type", b"application/json"),
            ],
        )
        view = memoryview(body)
        while True:  # as much as the server's flow-control window allows, then wait for more
            size = min(
                len(view), self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size
            )
            if size == 0 and len(view):
                self._read()
                continue
            self.h2.send_data(sid, view[:size].tobytes(), end_stream=size == len(view))
            self.sock.sendall(self.h2.data_to_send())
            if size == len(view):
                return sid
            view = view[size:]

    def pump(self, until: Any, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, "no answer in time"
            if not self._read():
                return

    def _read(self) -> bool:
        data = self.sock.recv(65536)
        if not data:
            return False
        for event in self.h2.receive_data(self._frames(data)):
            if isinstance(event, ResponseReceived):
                self.status[event.stream_id] = int(dict(event.headers)[b":status"])
            elif isinstance(event, DataReceived):
                self.bodies.setdefault(event.stream_id, bytearray()).extend(event.data)
                if self.auto_ack:
                    self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, StreamEnded):
                self.ended.append(event.stream_id)
        self.sock.sendall(self.h2.data_to_send())
        return True

    def _frames(self, data: bytes) -> bytes:
        """The whole frames received so far, GOAWAY frames taken out and recorded.

        Go's client (the API server's) reads a GOAWAY as "no new streams here" and still reads
        the answers of the streams in flight; h2 as a client ends the connection at once, so
        this client keeps GOAWAY away from it.
        """
        self.buffer += data
        out = bytearray()
        while len(self.buffer) >= 9:
            end = 9 + int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < end:
                break
            frame, self.buffer = self.buffer[:end], self.buffer[end:]
            if frame[3] == GOAWAY:
                last = int.from_bytes(frame[9:13], "big") & 0x7FFFFFFF
                self.goaways.append((last, int.from_bytes(frame[13:17], "big")))
            else:
                out += frame
        return bytes(out)

    def answer(self, sid: int) -> dict[str, Any]:
        return orjson.loads(bytes(self.bodies[sid]))  # type: ignore[no-any-return]

    def close(self) -> None:
        self.sock.close()


def test_hundreds_of_concurrent_calls_share_one_connection(backend: str) -> None:
    ca, server = _server(backend)
    try:
        client = Client(server.port, ca.cert)
        sids = {client.post("/fast", _review(f"uid-{i}")): f"uid-{i}" for i in range(200)}
        client.pump(lambda: len(client.ended) == len(sids))
        for sid, uid in sids.items():
            assert client.status[sid] == 200
            answer = client.answer(sid)["response"]
            assert answer["uid"] == uid and answer["warnings"] == [uid]
        client.close()
        text = server.metrics.registry.exposition()
        assert re.search(r'^kai_webhook_connections_total\{protocol="h2"\} 1(\.0)?$', text, re.M)
    finally:
        server.stop()


def test_inline_routes_answer_on_the_connection_thread_and_fall_back_to_the_pool(
    backend: str,
) -> None:
    """A route's inline handler answers from memory on the connection's thread; when it
    returns None (it would need a live read), the full handler answers on a pool worker."""
    threads: dict[str, str] = {}

    def inline(req: Request) -> Verdict | None:
        threads[req.uid] = threading.current_thread().name
        return None if req.uid.startswith("live") else Verdict(warnings=["inline " + req.uid])

    def full(req: Request) -> Verdict:
        threads[req.uid] = threading.current_thread().name
        return Verdict(warnings=["pool " + req.uid])

    ca = certs.new_ca("test-ca", dt.timedelta(hours=1))
    serving = certs.new_serving(ca, ["127.0.0.1"], dt.timedelta(hours=1))
    server = _new(backend, {"/p": ("p", full, inline)}, 2)
    server.set_certificate(serving.cert, serving.key)
    server.start()
    try:
        client = Client(server.port, ca.cert)
        quick = [client.post("/p", _review(f"mem{i}")) for i in range(20)]
        live = client.post("/p", _review("live"))
        client.pump(lambda: len(client.ended) == 21)
        assert [client.answer(s)["response"]["warnings"] for s in quick] == [
            [f"inline mem{i}"] for i in range(20)
        ]
        assert client.answer(live)["response"]["warnings"] == ["pool live"]
        connection_threads = {threads[f"mem{i}"] for i in range(20)}
        assert len(connection_threads) == 1  # the connection's own worker, for every one
        assert not connection_threads.pop().startswith("webhook-stream")
        assert threads["live"].startswith("webhook-stream")
        client.close()
        text = server.metrics.registry.exposition()
        counted = r'^kai_webhook_requests_total\{verdict="warned",webhook="p"\} 21(\.0)?$'
        assert re.search(counted, text, re.M), text
    finally:
        server.stop()


def test_an_inline_handler_that_fails_is_answered_as_an_internal_error(backend: str) -> None:
    def broken(req: Request) -> Verdict | None:
        raise KeyError("spec")

    ca = certs.new_ca("test-ca", dt.timedelta(hours=1))
    serving = certs.new_serving(ca, ["127.0.0.1"], dt.timedelta(hours=1))
    server = _new(backend, {"/p": ("p", _fast, broken)}, 2)
    server.set_certificate(serving.cert, serving.key)
    server.start()
    try:
        client = Client(server.port, ca.cert)
        sid = client.post("/p", _review("boom"))
        ok = client.post("/p", _review("after"))  # the connection goes on
        client.pump(lambda: len(client.ended) == 2)
        failed = client.answer(sid)["response"]
        assert failed["allowed"] is False and failed["status"]["code"] == 500
        message = failed["status"]["message"]
        assert "the kai webhook p could not review Pod/<unnamed>: an internal error" in message
        assert "KeyError" not in message and "spec" not in message  # the log has it, not users
        assert client.answer(ok)["response"]["uid"] == "after"
        client.close()
    finally:
        server.stop()


def test_a_slow_answer_does_not_hold_up_the_others_on_the_connection(backend: str) -> None:
    release.clear()
    ca, server = _server(backend)
    try:
        client = Client(server.port, ca.cert)
        slow = client.post("/slow", _review("s"))
        fast = [client.post("/fast", _review(f"f{i}")) for i in range(20)]
        client.pump(lambda: len(client.ended) == len(fast))
        assert slow not in client.ended  # the 20 fast ones were answered while it waited
        release.set()
        client.pump(lambda: slow in client.ended)
        assert client.answer(slow)["response"]["warnings"] == ["slow s"]
        client.close()
    finally:
        release.set()
        server.stop()


def test_flow_control_a_large_answer_waits_for_the_clients_window(backend: str) -> None:
    ca, server = _server(backend)
    try:
        client = Client(server.port, ca.cert, window=16_384)
        client.auto_ack = False  # the client reads slowly: the server may send 16 KiB only
        sid = client.post("/big", _review("b"))
        client.pump(lambda: len(client.bodies.get(sid, b"")) >= 16_384, timeout=5)
        time.sleep(0.3)
        client.pump(lambda: True)
        assert len(client.bodies[sid]) == 16_384 and sid not in client.ended
        client.auto_ack = True
        client.h2.acknowledge_received_data(16_384, sid)
        client.sock.sendall(client.h2.data_to_send())
        client.pump(lambda: sid in client.ended)
        patch = base64.b64decode(client.answer(sid)["response"]["patch"])
        assert orjson.loads(patch) == BIG_PATCH
        client.close()
    finally:
        server.stop()


def test_large_request_bodies_are_read_and_oversized_ones_refused(backend: str) -> None:
    ca, server = _server(backend)
    try:
        client = Client(server.port, ca.cert)
        padded = orjson.loads(_review("p"))
        padded["request"]["object"] = {"pad": "y" * 3_000_000}  # an UPDATE of a big object
        ok = client.post("/fast", orjson.dumps(padded))
        client.pump(lambda: ok in client.ended, timeout=20)
        assert client.status[ok] == 200 and client.answer(ok)["response"]["warnings"] == ["p"]
        padded["request"]["object"] = {"pad": "y" * 9_000_000}
        too_big = client.post("/fast", orjson.dumps(padded))
        client.pump(lambda: too_big in client.ended, timeout=30)
        assert client.status[too_big] == 413
        client.close()
    finally:
        server.stop()


def test_a_rotation_sends_goaway_and_answers_the_calls_in_flight(backend: str) -> None:
    release.clear()
    ca, server = _server(backend)
    try:
        client = Client(server.port, ca.cert)
        slow = client.post("/slow", _review("in-flight"))
        time.sleep(0.2)
        fresh = certs.new_serving(ca, ["127.0.0.1"], dt.timedelta(hours=1))
        server.set_certificate(fresh.cert, fresh.key)
        client.pump(lambda: bool(client.goaways), timeout=5)
        # no new streams; the one in flight is answered. Python: GOAWAY(last=slow) at once;
        # granian (hyper): GOAWAY(last=2^31-1), a PING, then GOAWAY(last=slow)
        assert all(code == 0 and last >= slow for last, code in client.goaways)
        release.set()
        client.pump(lambda: slow in client.ended)
        assert client.answer(slow)["response"]["warnings"] == ["slow in-flight"]
        client.pump(lambda: False)  # then the connection is closed
        assert client.goaways[-1] == (slow, 0)
        client.close()
        # the next connection gets the new certificate
        second = Client(server.port, ca.cert)
        sid = second.post("/fast", _review("after"))
        second.pump(lambda: sid in second.ended)
        assert second.answer(sid)["response"]["warnings"] == ["after"]
        peer = second.sock.getpeercert(binary_form=True)
        second.close()
        assert peer is not None and ssl.DER_cert_to_PEM_cert(peer).strip() == (
            fresh.cert.decode().strip()
        )
    finally:
        release.set()
        server.stop()


def _python_server() -> tuple[certs.KeyPair, AdmissionServer]:
    """The Python server, whose own closing the next tests check (granian's is hyper's)."""
    ca, server = _server("python")
    assert isinstance(server, AdmissionServer)
    return ca, server


def _goaway_then_idle(server: AdmissionServer, ca: certs.KeyPair, client: Client) -> int:
    """One call answered, then a rotation: the server says GOAWAY (within its 1 s tick) with
    nothing left to answer on the connection, and ends it. The client has not read it yet."""
    first = client.post("/fast", _review("before"))
    client.pump(lambda: first in client.ended)
    fresh = certs.new_serving(ca, ["127.0.0.1"], dt.timedelta(hours=1))
    server.set_certificate(fresh.cert, fresh.key)
    readable, _, _ = select.select([client.sock], [], [], 10)  # the GOAWAY is here, unread
    assert readable and not client.sock.pending()
    time.sleep(0.3)  # the server ends the connection right after it
    return first


def test_after_its_goaway_a_connection_is_not_reset_under_a_client_still_sending() -> None:
    """The API server keeps sending on a connection until it has read the GOAWAY (calls it
    will retry on a new connection, window updates, pings). Were the socket closed with those
    bytes unread, the kernel would answer them with a reset; the client's next write would
    fail and Go's client would close the connection itself ("client connection force closed
    via ClientConn.Close"), failing the calls still on it. The server ends only its half and
    reads until the client ends its own."""
    ca, server = _python_server()
    try:
        client = Client(server.port, ca.cert)
        first = _goaway_then_idle(server, ca, client)
        late = client.post("/fast", _review("late"))  # sent before it read the GOAWAY
        time.sleep(0.3)  # a reset, had the server closed, would be here by now
        later = client.post("/fast", _review("later"))  # ... and fail this write
        client.pump(lambda: False)  # reads up to the end of the server's half, no reset
        assert client.goaways == [(first, 0), (first, 0)]  # neither late call is covered:
        assert late not in client.ended and later not in client.ended  # retried elsewhere
        assert client.sock.recv(1) == b""
        client.close()  # the client ends its half: the server's worker closes and is free
        deadline = time.monotonic() + 3
        while server._open and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not server._open
    finally:
        server.stop()


def test_a_client_that_never_closes_its_half_is_closed_after_the_linger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http2, "LINGER", 0.5)
    ca, server = _python_server()
    try:
        client = Client(server.port, ca.cert)
        _goaway_then_idle(server, ca, client)
        client.pump(lambda: False)  # GOAWAY, GOAWAY, end of the server's half
        assert len(client.goaways) == 2
        started = time.monotonic()
        while server._open and time.monotonic() - started < 5:
            time.sleep(0.05)
        assert not server._open  # the client still holds its socket open
        client.close()
    finally:
        server.stop()

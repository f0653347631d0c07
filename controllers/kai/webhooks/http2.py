"""HTTP/2 for the admission server: every call of the API server on one TLS connection.

kube-apiserver's webhook client speaks HTTP/2 when the server offers it by ALPN, and then sends
all of its concurrent AdmissionReview calls as streams of one connection. The protocol state
machine is the ``h2`` library's; this module owns the socket:

- one thread per connection does *all* reads and writes of the TLS socket — an ``SSLSocket``
  must not be read and written from two threads at once;
- each complete request (headers, body, end of stream) is answered from memory on that thread
  (the pod webhooks), or on the server's bounded work pool, so that a slow answer (a live read
  of the cluster) never holds up the other streams; the answer comes back through a queue,
  and a byte on a socket pair wakes the connection thread from ``select`` to send it. A full
  pool answers 429 at once;
- responses larger than the peer's flow-control window wait for its WINDOW_UPDATE;
- after a certificate rotation, or when the server stops, the connection says GOAWAY: the
  API server finishes the calls in flight on it and opens a new connection (with the new
  certificate) for the next ones; a connection without a request for ``idle_timeout`` is
  closed likewise;
- a connection is never closed under the client's feet: once every stream the GOAWAY covers
  is answered, only our half is closed, and the connection waits for the client to close its
  half (:meth:`_Connection._close`).

Limits (the server's :class:`~kai.webhooks.server.Limits`), advertised in our SETTINGS and
enforced:

- ``max_streams`` concurrent streams, ``max_frame_size``, ``max_header_list_size``; each
  stream's window ``stream_window``, the connection's window ``connection_buffer``: the window
  is given back only once a body is answered, so a client can never have more than that of
  bodies waiting on one connection;
- a body over ``max_body`` is answered 413 and its stream reset; a stream whose body would
  take the process over its budget is reset with REFUSED_STREAM (retried by the client);
- a stream whose request is not complete within ``request_timeout`` of its HEADERS is reset
  (CANCEL) and its body dropped;
- a stream the client resets is dropped, and if its request was handed to the pool, the
  worker skips it (no live read for a call nobody waits for); requests are handed over only
  after the whole batch of frames read with them is processed, so that HEADERS + DATA +
  RST_STREAM in one read never reaches the pool;
- more than ``max_resets`` resets by the client within ``reset_window`` seconds end the
  connection with GOAWAY ENHANCE_YOUR_CALM (the "rapid reset" attack, CVE-2023-44487).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import queue
import select
import socket
import ssl
import time
from typing import TYPE_CHECKING

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    RequestReceived,
    StreamEnded,
    StreamReset,
    WindowUpdated,
)
from h2.exceptions import ProtocolError, StreamClosedError
from h2.settings import SettingCodes, Settings
from hyperframe.frame import GoAwayFrame

from kai.webhooks.server import PRESSURE_RELIEF, SMALL_BODY

if TYPE_CHECKING:
    from kai.webhooks.server import AdmissionServer
    from kai.webhooks.server import _Connection as Record

log = logging.getLogger("kai.webhook")

#: a stream's window is given back in steps of this (half of the protocol's default window:
#: a client may open the stream before it has seen our INITIAL_WINDOW_SIZE); a body smaller
#: than this, as every pod's is, never needs a stream WINDOW_UPDATE
STREAM_ACK = 32 * 1024
#: the connection's window is given back in steps of this, once the bodies are answered
CONNECTION_ACK = 256 * 1024
#: how often the loop wakes without traffic, to notice a rotation, a stop, a late stream
TICK = 1.0
#: when a rapid reset was last logged as a warning
_last_reset_warning = -1e9
#: after its last answer, how long a closing connection waits for the client to close its side
LINGER = 5.0

Answer = tuple[int, int, bytes, str]  # stream, status (0: dropped), body, content type
_STATUS = {200: (b":status", b"200")}
_CONTENT_TYPE = {"application/json": (b"content-type", b"application/json")}
#: h2 checks and normalises every header field in both directions; this server reads only
#: ``:method`` and ``:path`` (and forwards nothing), and sends only the three fields above
_CONFIG = {
    "client_side": False,
    "header_encoding": None,
    "validate_inbound_headers": False,
    "normalize_inbound_headers": False,
    "validate_outbound_headers": False,
    "normalize_outbound_headers": False,
}


class _Stream:
    __slots__ = ("body", "method", "moved", "opened", "path", "unacked")

    def __init__(self, method: bytes, path: bytes) -> None:
        self.method = method
        self.path = path
        self.body = bytearray()
        self.opened = self.moved = time.monotonic()  # opened, and its body last progressed
        self.unacked = 0  # body bytes not yet given back to the stream's window


def serve_http2(
    server: AdmissionServer, conn: ssl.SSLSocket, ctx: ssl.SSLContext, record: Record
) -> None:
    """Serve the connection until the peer goes, the server stops or the connection idles out."""
    _Connection(server, conn, ctx, record).run()


class _Connection:
    def __init__(
        self, server: AdmissionServer, conn: ssl.SSLSocket, ctx: ssl.SSLContext, record: Record
    ) -> None:
        self.server = server
        self.record = record
        self.limits = limits = server.limits
        self.conn = conn
        self.ctx = ctx  # the certificate this connection was made with
        self.max_body = limits.max_body
        self.idle_timeout = limits.idle_timeout
        self.linger = LINGER
        self.h2 = H2Connection(H2Configuration(**_CONFIG))  # type: ignore[arg-type]
        # what initiate_connection() advertises is local_settings' *current* values: set them
        # as such (update() would only queue them until the client acknowledges)
        self.h2.local_settings = Settings(
            client=False,
            initial_values={
                SettingCodes.MAX_CONCURRENT_STREAMS: limits.max_streams,
                SettingCodes.INITIAL_WINDOW_SIZE: limits.stream_window,
                SettingCodes.MAX_FRAME_SIZE: limits.max_frame_size,
                SettingCodes.MAX_HEADER_LIST_SIZE: limits.max_header_list_size,
                SettingCodes.ENABLE_PUSH: 0,
            },
        )
        self.h2.max_inbound_frame_size = limits.max_frame_size
        self.streams: dict[int, _Stream] = {}
        self.in_flight: dict[int, int] = {}  # stream -> body bytes, handed to the pool
        self.cancelled: set[int] = set()  # in flight, then reset by the client
        self.buffered = 0  # body bytes received and not answered (counted in the budget)
        self.unacked = 0  # bytes answered, not yet given back to the connection's window
        self.resets: collections.deque[float] = collections.deque()
        self.answers: queue.SimpleQueue[Answer] = queue.SimpleQueue()
        self.waiting: dict[int, memoryview] = {}  # response bytes held back by flow control
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.going_away = False
        self.wake_pending = False  # a wake-up byte is on its way to the connection thread
        self.last_stream = 0  # the last stream answered after a GOAWAY
        self.ended: list[int] = []  # streams whose request ended in the batch being read
        self.started = False  # the client's preface and SETTINGS arrived
        self.last_active = time.monotonic()

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        h2 = self.h2
        h2.initiate_connection()
        h2.increment_flow_control_window(
            self.limits.connection_buffer - h2.inbound_flow_control_window
        )
        try:
            self._flush()
            while True:
                readable: list[socket.socket] = [self.conn]
                if not self.conn.pending():  # else TLS holds decrypted bytes select cannot see
                    readable, _, _ = select.select([self.conn, self.wake_r], [], [], TICK)
                if self.wake_r in readable:
                    with contextlib.suppress(BlockingIOError):
                        self.wake_r.recv(4096)
                    self._send_answers()
                if self.conn in readable:
                    data = self.conn.recv(65536)
                    if not data:
                        return
                    if not self._receive(data):
                        return
                now = time.monotonic()
                self._expire(now)
                idle = not self.streams and not self.in_flight and not self.waiting
                # a connection that never completed a request has request_timeout to do so
                allowed = self.idle_timeout if self.record.served else self.limits.request_timeout
                if not self.going_away and (
                    self.server.stopping
                    or self.server.context is not self.ctx
                    or (idle and now - self.last_active > allowed)
                ):
                    self._go_away()
                if self.going_away and idle:
                    self._close()
                    return
        finally:
            self.wake_r.close()
            self.wake_w.close()
            self.server.budget.give(self.buffered)  # what the pool still holds included
            self.buffered = 0

    def _go_away(self) -> None:
        """A graceful GOAWAY: the streams opened so far are still answered, later ones refused.

        h2's ``close_connection`` ends the connection's state machine at once (nothing could be
        sent after it), so this first GOAWAY is written as a raw frame; ``close_connection``
        follows once the streams in flight are answered.
        """
        self.going_away = True
        self.last_stream = self.h2.highest_inbound_stream_id
        self._flush()
        frame = GoAwayFrame(0)
        frame.last_stream_id = self.last_stream
        frame.error_code = ErrorCodes.NO_ERROR
        self.conn.sendall(frame.serialize())

    def _close(self) -> None:
        """End the connection after its GOAWAY, every stream the GOAWAY covers answered.

        The client may still be sending: requests it opened before it read the GOAWAY (it
        retries them on a new connection once it reads it), WINDOW_UPDATEs, PINGs. A socket
        closed with such bytes unread, or receiving them after its close, makes the kernel
        answer with a TCP reset: the client's next write fails, and Go's HTTP/2 client then
        closes the connection itself ("http2: client connection force closed via
        ClientConn.Close"), failing every call still on it, the ones it would have retried
        included. So the final GOAWAY is followed by the end of our half only (a FIN after the
        last byte sent), and whatever the client still sends is read and dropped until it
        closes its half (Go's client does as soon as it has read up to our FIN), for at most
        ``LINGER`` seconds. Only then is the socket closed.
        """
        self.h2.close_connection(error_code=ErrorCodes.NO_ERROR, last_stream_id=self.last_stream)
        self._flush()
        # the TCP socket under the TLS one: no TLS record is written or read any more
        raw = self.conn
        try:
            socket.socket.shutdown(raw, socket.SHUT_WR)
            deadline = time.monotonic() + self.linger
            while (left := deadline - time.monotonic()) > 0:
                readable, _, _ = select.select([raw], [], [], left)
                if readable and not socket.socket.recv(raw, 65536):
                    return  # the client closed its half: nothing of it is left unread
        except OSError:  # the client reset or went away meanwhile: nothing left to protect
            return
        log.debug("HTTP/2 client did not close its side within %gs of the GOAWAY", self.linger)

    def _receive(self, data: bytes) -> bool:
        """Feed bytes to the state machine; False when the connection is to end now."""
        try:
            events = self.h2.receive_data(data)
        except ProtocolError as exc:  # h2 has queued its GOAWAY (protocol or flow control)
            log.debug("HTTP/2 protocol error from the client: %s", exc)
            self.server.metrics.refuse("protocol_error")
            with contextlib.suppress(OSError):
                self._flush()
            return False
        if events and not self.started:
            self.started = True  # the preface is in: this loop keeps the deadlines from now
            self.server.progress(self.record, float("inf"))
        for event in events:
            if isinstance(event, RequestReceived):
                if self.going_away and event.stream_id > self.last_stream:
                    # sent before the client saw our GOAWAY: refused, so it retries elsewhere
                    self.h2.reset_stream(event.stream_id, error_code=ErrorCodes.REFUSED_STREAM)
                    continue
                headers = dict(event.headers or [])
                self.streams[event.stream_id] = _Stream(
                    headers.get(b":method", b""), headers.get(b":path", b"/")
                )
            elif isinstance(event, DataReceived):
                self._data(event)
            elif isinstance(event, StreamEnded):
                self.ended.append(event.stream_id)
            elif isinstance(event, StreamReset):
                if not self._reset_by_client(event.stream_id):
                    return False
            elif isinstance(event, WindowUpdated):
                self._send_waiting()
            elif isinstance(event, ConnectionTerminated):
                self._flush()
                return False
        # only now, with every reset of this batch seen, are the complete requests answered
        ended, self.ended = self.ended, []
        for stream_id in ended:
            self._request(stream_id)
        self._ack()
        self._flush()
        return True

    def _reset_by_client(self, stream_id: int) -> bool:
        """Drop the stream; False when the client resets too often (the connection ends)."""
        stream = self.streams.pop(stream_id, None)
        if stream is not None:
            self._release(len(stream.body))
        if stream_id in self.in_flight:
            self.cancelled.add(stream_id)  # its worker skips it
        self.waiting.pop(stream_id, None)
        now = time.monotonic()
        self.resets.append(now)
        while self.resets and self.resets[0] < now - self.limits.reset_window:
            self.resets.popleft()
        if len(self.resets) <= self.limits.max_resets:
            return True
        global _last_reset_warning
        # one line per minute at most: an attacker reconnecting does not flood the log (the
        # metric counts every one)
        level = logging.WARNING if now - _last_reset_warning > 60 else logging.DEBUG
        if level == logging.WARNING:
            _last_reset_warning = now
        log.log(
            level,
            "HTTP/2 client %s reset more than %d streams within %gs: connection closed",
            self.record.address,
            self.limits.max_resets,
            self.limits.reset_window,
        )
        self.server.metrics.refuse("rapid_reset")
        self.h2.close_connection(
            error_code=ErrorCodes.ENHANCE_YOUR_CALM,
            last_stream_id=self.h2.highest_inbound_stream_id,
        )
        with contextlib.suppress(OSError):
            self._flush()
        return False

    def _data(self, event: DataReceived) -> None:
        stream_id = event.stream_id
        consumed = event.flow_controlled_length or 0
        data = event.data or b""
        stream = self.streams.get(stream_id)
        if stream is None:  # reset or refused meanwhile: its bytes are dropped at once
            self.unacked += consumed
            return
        self.unacked += consumed - len(data)  # padding
        size = len(stream.body) + len(data)
        if size > self.max_body:
            del self.streams[stream_id]
            self._release(len(stream.body))
            self.unacked += len(data)
            self.server.metrics.refuse("body_too_large")
            # a complete answer, then a reset without error: the client stops sending (RFC
            # 9113, 8.1)
            self._respond(stream_id, 413, b"body too large\n", "text/plain")
            with contextlib.suppress(StreamClosedError, ProtocolError):
                self.h2.reset_stream(stream_id, error_code=ErrorCodes.NO_ERROR)
            return
        # the reserve is for small bodies on connections that are not holding much of them
        small = size <= SMALL_BODY and self.buffered - self._in_flight_bytes() <= SMALL_BODY
        if not self.server.budget.take(len(data), small=small):
            del self.streams[stream_id]
            self._release(len(stream.body))
            self.unacked += len(data)
            self.server.metrics.refuse("buffer_budget")
            with contextlib.suppress(StreamClosedError, ProtocolError):
                self.h2.reset_stream(stream_id, error_code=ErrorCodes.REFUSED_STREAM)
            return
        stream.body += data
        stream.moved = time.monotonic()
        self.buffered += len(data)
        # the stream's window is given back as its body comes (the connection's bounds what
        # all streams hold); the connection's only when the body is answered (_release)
        stream.unacked += consumed
        if stream.unacked >= STREAM_ACK and event.stream_ended is None:
            with contextlib.suppress(StreamClosedError, ProtocolError):
                self.h2.increment_flow_control_window(stream.unacked, stream_id=stream_id)
            stream.unacked = 0

    def _release(self, size: int) -> None:
        """``size`` bytes of bodies are answered or dropped: out of the budget, and back to
        the connection's window."""
        if size:
            self.buffered -= size
            self.server.budget.give(size)
            self.unacked += size

    def _ack(self) -> None:
        if self.unacked >= CONNECTION_ACK:
            self.h2.increment_flow_control_window(self.unacked)
            self.unacked = 0

    def _in_flight_bytes(self) -> int:
        return sum(self.in_flight.values()) if self.in_flight else 0

    def _expire(self, now: float) -> None:
        """Reset the streams whose request is not complete within request_timeout; while the
        process's budget refuses bodies, also those whose body stalled (PRESSURE_RELIEF)."""
        late = now - self.limits.request_timeout
        stalled = now - PRESSURE_RELIEF if self.server.budget.pressed(now) else -1.0
        expired = [
            sid
            for sid, stream in self.streams.items()
            if stream.opened < late or (stream.body and stream.moved < stalled)
        ]
        for stream_id in expired:
            stream = self.streams.pop(stream_id)
            self._release(len(stream.body))
            self.server.metrics.refuse("deadline")
            with contextlib.suppress(StreamClosedError, ProtocolError):
                self.h2.reset_stream(stream_id, error_code=ErrorCodes.CANCEL)
        if expired:
            self._ack()
            self._flush()

    # -- requests and answers ----------------------------------------------------------------
    def _request(self, stream_id: int) -> None:
        stream = self.streams.pop(stream_id, None)
        if stream is None:  # reset in the same batch, or refused
            return
        size = len(stream.body)
        self.last_active = time.monotonic()
        if stream.method != b"POST":
            self._release(size)
            self._respond(stream_id, 405, b"POST AdmissionReview requests only\n", "text/plain")
            return
        path, body = stream.path.decode("latin-1"), bytes(stream.body)
        stream.body = bytearray()
        answered = self.server.answer_inline(path, body)
        if answered is not None:  # from memory: no pool, no queue, no wake-up
            self._release(size)
            self.record.served = True
            self._respond(stream_id, *answered)
            return
        if self.server.streams.submit(self._answer, stream_id, path, body):
            self.in_flight[stream_id] = size
        else:  # the pool's queue is full (or the server is stopping)
            self._release(size)
            self._respond(stream_id, *self.server.overloaded())

    def _answer(self, stream_id: int, path: str, body: bytes) -> None:
        """On a pool worker: decide, then hand the answer to the connection thread."""
        if stream_id in self.cancelled:  # reset by the client while it waited: no work
            self.server.metrics.refuse("cancelled")
            answer: Answer = (stream_id, 0, b"", "")
        else:
            try:
                code, data, ctype = self.server.answer(path, body)
            except Exception:  # answer() turns handler errors into verdicts; this is a bug
                log.exception("answering an HTTP/2 request failed")
                code, data, ctype = 500, b"internal error of the kai webhook\n", "text/plain"
            answer = (stream_id, code, data, ctype)
        self.answers.put(answer)
        if not self.wake_pending:  # one wake-up byte per batch of answers, not per answer
            self.wake_pending = True
            with contextlib.suppress(OSError):
                self.wake_w.send(b"\0")

    def _send_answers(self) -> None:
        self.wake_pending = False  # before draining: an answer queued after this wakes us again
        while True:
            try:
                stream_id, code, data, ctype = self.answers.get_nowait()
            except queue.Empty:
                break
            self._release(self.in_flight.pop(stream_id, 0))
            self.cancelled.discard(stream_id)
            self.last_active = time.monotonic()
            if code:
                self.record.served = True
                self._respond(stream_id, code, data, ctype)
        self._ack()
        self._flush()

    def _respond(self, stream_id: int, code: int, body: bytes, ctype: str) -> None:
        headers = [
            _STATUS.get(code) or (b":status", str(code).encode()),
            _CONTENT_TYPE.get(ctype) or (b"content-type", ctype.encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        if code == 429:
            headers.append((b"retry-after", b"1"))
        try:
            self.h2.send_headers(stream_id, headers)
        except (StreamClosedError, ProtocolError):  # the client gave up on it (timeout, reset)
            return
        try:
            rest = self._send_body(stream_id, memoryview(body))
        except (StreamClosedError, ProtocolError):
            return
        if rest is not None:  # the rest waits for the client's WINDOW_UPDATE
            self.waiting[stream_id] = rest

    def _send_waiting(self) -> None:
        """Send as much of every held-back response as the flow-control windows allow."""
        for stream_id, view in list(self.waiting.items()):
            try:
                rest = self._send_body(stream_id, view)
            except (StreamClosedError, ProtocolError):  # reset by the client meanwhile
                rest = None
            if rest is None:
                del self.waiting[stream_id]
            else:
                self.waiting[stream_id] = rest

    def _send_body(self, stream_id: int, view: memoryview) -> memoryview | None:
        """Frames of ``view`` while the window lasts: None when all is sent, else the rest."""
        while True:
            window = self.h2.local_flow_control_window(stream_id)
            size = min(len(view), window, self.h2.max_outbound_frame_size)
            if size <= 0 and len(view):
                return view
            last = size == len(view)
            self.h2.send_data(stream_id, view[:size].tobytes(), end_stream=last)
            if last:
                return None
            view = view[size:]

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.conn.sendall(data)

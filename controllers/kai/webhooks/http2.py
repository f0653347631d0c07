"""HTTP/2 for the admission server: every call of the API server on one TLS connection.

kube-apiserver's webhook client speaks HTTP/2 when the server offers it by ALPN, and then sends
all of its concurrent AdmissionReview calls as streams of one connection. The protocol state
machine is the ``h2`` library's; this module owns the socket:

- one thread per connection (the server's connection worker) does *all* reads and writes of
  the TLS socket — an ``SSLSocket`` must not be read and written from two threads at once;
- each complete request (headers, body, end of stream) is answered on the server's stream pool,
  so that a slow answer (a live read of the cluster) never holds up the other streams; the
  answer comes back through a queue, and a byte on a socket pair wakes the connection thread
  from ``select`` to send it;
- responses larger than the peer's flow-control window wait for its WINDOW_UPDATE;
- after a certificate rotation, or when the server stops, the connection says GOAWAY: the
  API server finishes the calls in flight on it and opens a new connection (with the new
  certificate) for the next ones; a connection idle for ``IDLE_TIMEOUT`` is closed likewise;
- a connection is never closed under the client's feet: once every stream the GOAWAY covers
  is answered, only our half is closed, and the connection waits for the client to close its
  half (:meth:`_Connection._close`).
"""

from __future__ import annotations

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
from h2.settings import SettingCodes
from hyperframe.frame import GoAwayFrame

if TYPE_CHECKING:
    from kai.webhooks.server import AdmissionServer

log = logging.getLogger("kai.webhook")

#: streams the API server may have open at once on the connection (Go's server default)
MAX_CONCURRENT_STREAMS = 250
#: per-stream receive window: a whole AdmissionReview of an UPDATE (old and new object) fits
STREAM_WINDOW = 4 * 1024 * 1024
#: a stream's window is given back in steps of this (half of the protocol's default window:
#: a client may open the stream before it has seen our larger INITIAL_WINDOW_SIZE); a body
#: smaller than this, as every pod's is, never needs a WINDOW_UPDATE
STREAM_ACK = 32 * 1024
#: the connection's receive window (every stream's DATA counts against it)
CONNECTION_WINDOW = 64 * 1024 * 1024
#: how often the loop wakes without traffic, to notice a rotation, a stop or idleness
TICK = 1.0
#: after its last answer, how long a closing connection waits for the client to close its side
LINGER = 5.0

Answer = tuple[int, int, bytes, str]  # stream, status, body, content type
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
    __slots__ = ("body", "method", "path", "too_large", "unacked")

    def __init__(self, method: bytes, path: bytes) -> None:
        self.method = method
        self.path = path
        self.body = bytearray()
        self.too_large = False
        self.unacked = 0  # body bytes not yet given back to the stream's window


def serve_http2(server: AdmissionServer, conn: ssl.SSLSocket, ctx: ssl.SSLContext) -> None:
    """Serve the connection until the peer goes, the server stops or the connection idles out."""
    _Connection(server, conn, ctx).run()


class _Connection:
    def __init__(self, server: AdmissionServer, conn: ssl.SSLSocket, ctx: ssl.SSLContext) -> None:
        from kai.webhooks.server import IDLE_TIMEOUT, MAX_BODY

        self.server = server
        self.conn = conn
        self.ctx = ctx  # the certificate this connection was made with
        self.max_body = MAX_BODY
        self.idle_timeout = IDLE_TIMEOUT
        self.linger = LINGER
        self.h2 = H2Connection(H2Configuration(**_CONFIG))  # type: ignore[arg-type]
        self.streams: dict[int, _Stream] = {}
        self.in_flight = 0  # requests handed to the stream pool, not yet answered
        self.unacked = 0  # DATA bytes not yet given back to the connection's window
        self.answers: queue.SimpleQueue[Answer] = queue.SimpleQueue()
        self.waiting: dict[int, memoryview] = {}  # response bytes held back by flow control
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.going_away = False
        self.wake_pending = False  # a wake-up byte is on its way to the connection thread
        self.last_stream = 0  # the last stream answered after a GOAWAY

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        h2 = self.h2
        h2.local_settings.update(
            {
                SettingCodes.MAX_CONCURRENT_STREAMS: MAX_CONCURRENT_STREAMS,
                SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            }
        )
        h2.initiate_connection()
        h2.increment_flow_control_window(CONNECTION_WINDOW - h2.inbound_flow_control_window)
        self._flush()
        last_active = time.monotonic()
        try:
            while True:
                readable: list[socket.socket] = [self.conn]
                if not self.conn.pending():  # else TLS holds decrypted bytes select cannot see
                    readable, _, _ = select.select([self.conn, self.wake_r], [], [], TICK)
                if self.wake_r in readable:
                    with contextlib.suppress(BlockingIOError):
                        self.wake_r.recv(4096)
                    self._send_answers()
                    last_active = time.monotonic()
                if self.conn in readable:
                    data = self.conn.recv(65536)
                    if not data:
                        return
                    if not self._receive(data):
                        return
                    last_active = time.monotonic()
                idle = not self.streams and not self.in_flight and not self.waiting
                if not self.going_away and (
                    self.server.stopping
                    or self.server.context is not self.ctx
                    or (idle and time.monotonic() - last_active > self.idle_timeout)
                ):
                    self._go_away()
                if self.going_away and idle:
                    self._close()
                    return
        finally:
            self.wake_r.close()
            self.wake_w.close()

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
        """Feed bytes to the state machine; False when the peer ended the connection."""
        try:
            events = self.h2.receive_data(data)
        except ProtocolError as exc:
            log.debug("HTTP/2 protocol error from the client: %s", exc)
            self._flush()
            return False
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
                self._request(event.stream_id)
            elif isinstance(event, StreamReset):
                self.streams.pop(event.stream_id, None)
                self.waiting.pop(event.stream_id, None)
            elif isinstance(event, WindowUpdated):
                self._send_waiting()
            elif isinstance(event, ConnectionTerminated):
                self._flush()
                return False
        self._flush()
        return True

    def _data(self, event: DataReceived) -> None:
        # the body is buffered here, not in the window: the bytes are given back, but in
        # batches (a WINDOW_UPDATE per half window, not one per DATA frame)
        consumed = event.flow_controlled_length or 0
        self.unacked += consumed
        if self.unacked >= CONNECTION_WINDOW // 2:
            self.h2.increment_flow_control_window(self.unacked)
            self.unacked = 0
        stream = self.streams.get(event.stream_id)
        if stream is None:
            return
        stream.unacked += consumed
        if stream.unacked >= STREAM_ACK and event.stream_ended is None:
            with contextlib.suppress(StreamClosedError, ProtocolError):
                self.h2.increment_flow_control_window(stream.unacked, stream_id=event.stream_id)
            stream.unacked = 0
        if stream.too_large:
            return
        stream.body += event.data or b""
        if len(stream.body) > self.max_body:
            stream.too_large = True
            stream.body = bytearray()

    # -- requests and answers ----------------------------------------------------------------
    def _request(self, stream_id: int) -> None:
        stream = self.streams.pop(stream_id, None)
        if stream is None:
            return
        if stream.too_large:
            self._respond(stream_id, 413, b"body too large\n", "text/plain")
        elif stream.method != b"POST":
            self._respond(stream_id, 405, b"POST AdmissionReview requests only\n", "text/plain")
        else:
            path, body = stream.path.decode("latin-1"), bytes(stream.body)
            answered = self.server.answer_inline(path, body)
            if answered is not None:  # from memory: no pool, no queue, no wake-up
                self._respond(stream_id, *answered)
                return
            self.in_flight += 1
            try:
                self.server.streams.submit(self._answer, stream_id, path, body)
            except RuntimeError:  # the pool is shut down: the server is stopping
                self.in_flight -= 1
                self.h2.reset_stream(stream_id, error_code=ErrorCodes.REFUSED_STREAM)

    def _answer(self, stream_id: int, path: str, body: bytes) -> None:
        """On a stream worker: decide, then hand the answer to the connection thread."""
        try:
            code, data, ctype = self.server.answer(path, body)
        except Exception as exc:  # answer() turns handler errors into verdicts; this is a bug
            log.exception("answering an HTTP/2 request failed")
            code, data, ctype = 500, f"{type(exc).__name__}: {exc}\n".encode(), "text/plain"
        self.answers.put((stream_id, code, data, ctype))
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
            self.in_flight -= 1
            self._respond(stream_id, code, data, ctype)
        self._flush()

    def _respond(self, stream_id: int, code: int, body: bytes, ctype: str) -> None:
        headers = [
            _STATUS.get(code) or (b":status", str(code).encode()),
            _CONTENT_TYPE.get(ctype) or (b"content-type", ctype.encode()),
            (b"content-length", str(len(body)).encode()),
        ]
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

"""The HTTPS admission server: AdmissionReview v1 over TLS, HTTP/2 and HTTP/1.1.

The listening thread accepts, and gives each connection a thread of its own, which does the
TLS handshake with the *current* certificate (:meth:`AdmissionServer.set_certificate` swaps it
without a restart, so a rotation never drops a request) and then reads the protocol the
client chose by ALPN:

- ``h2`` (what kube-apiserver picks): one connection carries all of the API server's
  concurrent calls as streams (:mod:`kai.webhooks.http2`). Over HTTP/1.1 the API server opens a
  new TLS connection whenever its few idle ones are busy, and under load the handshakes cost
  more than the answers;
- ``http/1.1``: keep-alive requests one after the other, for clients without HTTP/2.

A connection's thread only reads and writes: a complete request is answered on it when its
handler can answer from memory (the pod webhooks), else handed to the bounded work pool
(:class:`WorkPool`), shared by every connection. So a slow or stalled client holds its own
thread and nothing else, and the number of connections is what bounds the threads.

Limits (:class:`Limits`; each is a flag of ``kai webhook``), as Go's net/http and
kube-apiserver have them:

- connections: at most ``max_connections``, and ``max_connections_per_client`` from one
  address. A connection over a cap takes the place of the oldest connection that has not yet
  completed a request (a slow client's), or is closed at once when there is none;
- deadlines: the TLS handshake (and the HTTP/2 preface) within ``handshake_timeout``; a
  request's head and body within ``request_timeout`` of its first byte (never extended by a
  byte that trickles in); a kept-alive connection without a request for ``idle_timeout`` is
  closed;
- bodies: at most ``max_body`` each; bodies received but not yet answered are counted per
  HTTP/2 connection (its flow-control window, ``connection_buffer``) and for the whole process
  (``process_buffer``): a stream over the budget is reset (REFUSED_STREAM, which the API
  server's client retries), small bodies keep a reserve so that admissions go on;
- work: at most ``max_queued`` requests wait for a pool worker; beyond, the answer is an
  immediate HTTP 429 with ``Retry-After`` (the webhook's ``failurePolicy`` then applies) and
  ``/readyz`` says not ready until the queue drains;
- HTTP/2 (:mod:`kai.webhooks.http2`): the SETTINGS advertised are the ones enforced (streams,
  windows, frame size, header list size); a stream reset by the client is dropped before its
  work starts; more than ``max_resets`` resets within ``reset_window`` seconds end the
  connection with GOAWAY ENHANCE_YOUR_CALM (the "rapid reset" attack).

A second, plain-HTTP port serves ``/metrics``, ``/healthz`` (the process answers) and
``/readyz`` (a certificate is loaded, the caches are synced, the work queue is not full).

Metrics: ``kai_webhook_requests_total{webhook,verdict}`` and
``kai_webhook_request_duration_milliseconds{webhook,verdict}`` (verdict: allowed, warned,
mutated, denied, error); ``kai_webhook_refused_total{reason}`` counts what a limit refused.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson

from kai.metrics import Registry
from kai.webhooks.review import Request, ReviewError, Verdict, answer, parse

log = logging.getLogger("kai.webhook")

Handler = Callable[[Request], Verdict]
#: A handler's answer from memory alone, cheap enough for the connection's own thread; None
#: when it needs more (a live read of the cluster): then the full handler runs on the pool.
InlineHandler = Callable[[Request], Verdict | None]
Route = tuple[str, Handler] | tuple[str, Handler, InlineHandler]
MIB = 1024 * 1024
#: the API server sends objects of at most 3 MiB (its request limit), twice for an UPDATE
MAX_BODY = 8 * MIB
IDLE_TIMEOUT = 60.0  # a kept-alive connection with no request for this long is closed
#: a body this small may use the process budget's reserve (a pod's review is a few KiB)
SMALL_BODY = 256 * 1024
#: while the budget refuses bodies, and for this long after, an HTTP/2 stream whose body has
#: not progressed for this long is reset to make room (a stalled body is an attacker's)
PRESSURE_RELIEF = 1.0
#: how long an HTTP/1.1 request head may be, and a header line
MAX_HEAD = 64 * 1024

LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 100, 250, 1000)


@dataclass(frozen=True)
class Limits:
    """What one client (or all of them) may hold of the server; see the module docstring."""

    max_connections: int = 1000
    max_connections_per_client: int = 200
    handshake_timeout: float = 10.0
    request_timeout: float = 10.0
    idle_timeout: float = IDLE_TIMEOUT
    max_body: int = MAX_BODY
    connection_buffer: int = 16 * MIB
    process_buffer: int = 64 * MIB
    #: the part of ``process_buffer`` kept for bodies of at most SMALL_BODY
    small_reserve: int = 16 * MIB
    max_queued: int = 256
    max_streams: int = 250
    stream_window: int = 1 * MIB
    max_frame_size: int = 16384
    max_header_list_size: int = 64 * 1024
    max_resets: int = 200
    reset_window: float = 10.0

    def check(self) -> None:
        """ValueError naming the limit that makes no sense."""
        for name in self.__dataclass_fields__:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name.replace('_', '-')} must be positive")
        if self.max_connections_per_client > self.max_connections:
            raise ValueError("max-connections-per-client is more than max-connections")
        if not 16384 <= self.max_frame_size <= 16777215:
            raise ValueError("max-frame-size must be between 16384 and 16777215 (RFC 9113)")
        if self.stream_window > 2**31 - 1 or self.connection_buffer > 2**31 - 1:
            raise ValueError("an HTTP/2 window is at most 2^31-1 bytes")
        if self.connection_buffer < self.max_body:
            raise ValueError("connection-buffer must hold one body of max-body bytes")
        if self.process_buffer < self.connection_buffer:
            raise ValueError("process-buffer must hold one connection's buffer")
        if self.small_reserve >= self.process_buffer:
            raise ValueError("the small-body reserve must be less than process-buffer")


class Budget:
    """Bytes of request bodies received and not yet answered, for the whole process."""

    def __init__(self, limit: int, reserve: int) -> None:
        self.limit = limit
        self.reserve = reserve
        self.used = 0
        self.pressed_at = -1e9  # when a body was last refused for want of room
        self._lock = threading.Lock()

    def take(self, size: int, *, small: bool) -> bool:
        """Count ``size`` more bytes; False (nothing counted) over the budget. A small body
        may use the reserve: the last ``reserve`` bytes are for bodies of at most
        SMALL_BODY, so that large ones cannot crowd out the admissions of pods."""
        with self._lock:
            cap = self.limit if small else self.limit - self.reserve
            if self.used + size > cap:
                self.pressed_at = time.monotonic()
                return False
            self.used += size
            return True

    def pressed(self, now: float) -> bool:
        """Whether a body was refused lately: stalled bodies then make room (http2)."""
        return now - self.pressed_at < PRESSURE_RELIEF

    def give(self, size: int) -> None:
        with self._lock:
            self.used -= size


class WorkPool:
    """The workers that answer the requests a connection's thread cannot answer from memory
    (a handler that reads the cluster live): at most ``workers`` at once and ``max_queued``
    more waiting; beyond, :meth:`submit` refuses at once (the caller answers 429)."""

    def __init__(self, workers: int, max_queued: int, name: str = "webhook-stream") -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self.capacity = workers + max_queued
        self.pending = 0  # queued and running
        self._lock = threading.Lock()

    @property
    def saturated(self) -> bool:
        return self.pending >= self.capacity

    def submit(self, fn: Callable[..., Any], *args: Any) -> bool:
        """Run ``fn(*args)`` on a worker; False when the queue is full or the pool stopped."""
        with self._lock:
            if self.pending >= self.capacity:
                return False
            self.pending += 1
        try:
            self._pool.submit(self._run, fn, args)
        except RuntimeError:  # shut down: the server is stopping
            self._done()
            return False
        return True

    def _run(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except Exception:  # fn answers its own errors; this is a bug, not the client's
            log.exception("a webhook worker failed")
        finally:
            self._done()

    def _done(self) -> None:
        with self._lock:
            self.pending -= 1

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class WebhookMetrics:
    def __init__(self, registry: Registry | None = None) -> None:
        r = self.registry = registry or Registry()
        self.requests = r.counter(
            "kai_webhook_requests_total",
            "AdmissionReview requests answered, by webhook and verdict",
            ("webhook", "verdict"),
        )
        self.latency = r.histogram(
            "kai_webhook_request_duration_milliseconds",
            "Time from the request's arrival to its answer, by webhook and verdict",
            LATENCY_BUCKETS,
            ("webhook", "verdict"),
        )
        self.connections = r.counter(
            "kai_webhook_connections_total",
            "TLS connections established, by the protocol the client chose (h2, http/1.1)",
            ("protocol",),
        )
        self.refused = r.counter(
            "kai_webhook_refused_total",
            "Connections, streams and requests a limit refused or ended, by reason",
            ("reason",),
        )
        self.cert_rotations = r.gauge(
            "kai_webhook_certificate_rotations", "Serving certificates loaded after the first"
        )
        self.cert_expiry = r.gauge(
            "kai_webhook_certificate_expiry_timestamp_seconds",
            "When the serving certificate expires (Unix time)",
        )

        # (webhook, verdict) -> its two series, looked up once (hundreds of calls a second)
        self._series: dict[tuple[str, str], tuple[Any, Any]] = {}

    def observe(self, webhook: str, verdict: str, millis: float) -> None:
        series = self._series.get((webhook, verdict))
        if series is None:
            labels = {"webhook": webhook, "verdict": verdict}
            series = self.requests.series(labels), self.latency.series(labels)
            self._series[(webhook, verdict)] = series
        series[0].inc()
        series[1].observe(millis)

    def refuse(self, reason: str) -> None:
        self.refused.inc(labels={"reason": reason})


def _context(cert: bytes, key: bytes) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    # ssl reads keys only from files: a private temporary directory, removed at once
    with tempfile.TemporaryDirectory(prefix="kai-webhook-") as tmp:
        cert_path, key_path = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
        with open(os.open(key_path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(key)
        with open(cert_path, "wb") as f:
            f.write(cert)
        ctx.load_cert_chain(cert_path, key_path)
    return ctx


#: the answer to a request refused because the work queue is full: a Status, as the API
#: server's own 429s are
OVERLOADED = orjson.dumps(
    {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": "TooManyRequests",
        "code": 429,
        "message": "the kai webhook is overloaded (its work queue is full); retry",
        "details": {"retryAfterSeconds": 1},
    }
)


class Admission:
    """Routes ``POST /<path>`` to a handler and counts the answers: what every transport
    (this module's :class:`AdmissionServer`, :mod:`kai.webhooks.granian_server`) shares."""

    def __init__(self, routes: dict[str, Route], metrics: WebhookMetrics | None = None) -> None:
        # path -> (webhook name for metrics, handler, inline handler or None)
        self.routes: dict[str, tuple[str, Handler, InlineHandler | None]] = {
            path: (route[0], route[1], route[2] if len(route) > 2 else None)
            for path, route in routes.items()
        }
        self.metrics = metrics or WebhookMetrics()

    def _observe_certificate(self, cert: bytes) -> None:
        from kai.webhooks.certs import not_after

        expiry = not_after(cert)
        if expiry is not None:
            self.metrics.cert_expiry.set(expiry.timestamp())

    @property
    def saturated(self) -> bool:
        """True while new work would be refused (``/readyz`` then says not ready)."""
        return False

    # -- one request -------------------------------------------------------------------------
    def answer(self, target: str, body: bytes) -> tuple[int, bytes, str]:
        """The HTTP status, body and content type answering ``POST target`` with ``body``."""
        start = time.perf_counter()
        path = target.split("?", 1)[0]
        route = self.routes.get(path)
        if route is None:
            return 404, f"no webhook at {_printable(path)}\n".encode(), "text/plain"
        webhook, handler, _inline = route
        try:
            request = parse(body)
            _check_kind(webhook, handler, request)
        except ReviewError as exc:
            self.metrics.observe(webhook, "error", (time.perf_counter() - start) * 1000)
            return 400, f"{_printable(str(exc))}\n".encode(), "text/plain"
        try:
            verdict = handler(request)
        except Exception as exc:
            return self._failed(webhook, request, exc, start)
        return self._finish(webhook, request, verdict, start)

    def answer_inline(self, target: str, body: bytes) -> tuple[int, bytes, str] | None:
        """The answer of a route's inline handler (from memory, on the caller's thread), or
        None when the route has none or it needs more: then :meth:`answer` is the way (on a
        pool worker, so that a live read never holds up the caller's other requests)."""
        start = time.perf_counter()
        route = self.routes.get(target.split("?", 1)[0])
        if route is None or route[2] is None:
            return None
        webhook, handler, inline = route
        try:
            request = parse(body)
            _check_kind(webhook, handler, request)
        except ReviewError:
            return None  # answer() says why, and counts it
        try:
            verdict = inline(request)  # type: ignore[misc]
        except Exception as exc:
            return self._failed(webhook, request, exc, start)
        if verdict is None:
            return None
        return self._finish(webhook, request, verdict, start)

    def overloaded(self) -> tuple[int, bytes, str]:
        """The answer when the work queue is full (counted)."""
        self.metrics.refuse("overloaded")
        return 429, OVERLOADED, "application/json"

    def _failed(
        self, webhook: str, request: Request, exc: Exception, start: float
    ) -> tuple[int, bytes, str]:
        # an answer, not a broken connection: the API server shows the message. The
        # exception itself goes to the log only (it may quote the object, and says nothing
        # to the user)
        label = _safe_label(request)
        log.error("%s: internal error on %s", webhook, label, exc_info=exc)
        verdict = Verdict.deny(
            f"the kai webhook {webhook} could not review {label}: an internal error "
            "(the webhook's log has the details); the request was not admitted",
            code=500,
        )
        verdict.reason = "InternalError"
        return self._finish(webhook, request, verdict, start, outcome="error")

    def _finish(
        self,
        webhook: str,
        request: Request,
        verdict: Verdict,
        start: float,
        outcome: str | None = None,
    ) -> tuple[int, bytes, str]:
        data = answer(request.uid, verdict)
        self.metrics.observe(
            webhook, outcome or verdict.outcome, (time.perf_counter() - start) * 1000
        )
        if not verdict.allowed:
            log.info(
                "%s: denied %s %s: %s",
                webhook,
                request.operation,
                _safe_label(request),
                verdict.message,
            )
        return 200, data, "application/json"


def _check_kind(webhook: str, handler: Handler, request: Request) -> None:
    """ReviewError when the handler declares the kinds it reviews and this is not one: the
    API server sends a webhook only what its registration's rules select."""
    kinds = getattr(handler, "kinds", None)
    if kinds is not None and (request.group, request.kind) not in kinds:
        wanted = ", ".join(sorted(f"{g}/{k}" if g else k for g, k in kinds))
        got = f"{request.group}/{request.kind}" if request.group else request.kind
        raise ReviewError(f"the webhook {webhook} reviews {wanted}, not {_printable(got, 80)!r}")


def _safe_label(request: Request) -> str:
    try:
        return _printable(request.label)
    except Exception:  # a label from an object of the wrong shape
        return f"{request.kind or 'object'} (request {_printable(request.uid)})"


def _printable(text: str, limit: int = 300) -> str:
    """``text`` with control characters escaped and clipped (it goes to logs and clients)."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: limit + 1])
    return out if len(out) <= limit else out[: limit - 3] + "..."


@dataclass(frozen=True)
class _Refusal:
    code: int
    text: bytes


def _parse_head(head: str, max_body: int) -> tuple[str, str, int, bool] | _Refusal:
    """(method, target, Content-Length, close after) of an HTTP/1.1 request head."""
    lines = head.lstrip("\r\n").split("\r\n")
    parts = lines[0].split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return _Refusal(400, b"bad request line\n")
    length, close = 0, parts[2] == "HTTP/1.0"
    for line in lines[1:]:
        name, _, value = line.partition(":")
        key = name.strip().lower()
        if key == "content-length":
            text = value.strip()
            if not text.isdigit():
                return _Refusal(400, b"bad Content-Length\n")
            length = int(text)
        elif key == "connection":
            close = value.strip().lower() == "close"
        elif key == "transfer-encoding":
            return _Refusal(411, b"a body with a Content-Length only\n")
    if length > max_body:
        return _Refusal(413, b"body too large\n")
    return parts[0], parts[1], length, close


class _Connection:
    """One accepted connection, as the server tracks it for its caps and deadlines."""

    __slots__ = ("address", "closed", "deadline", "fd", "opened", "served", "sock")

    def __init__(self, sock: socket.socket, address: str, deadline: float) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.address = address
        self.opened = time.monotonic()
        self.deadline = deadline  # monotonic time by which it must progress, else it ends
        self.served = False  # a request was completed on it
        self.closed = False


class AdmissionServer(Admission):
    """The TLS server of the module docstring (ssl + h2, pure Python)."""

    def __init__(
        self,
        routes: dict[str, Route],
        *,
        port: int = 9443,
        host: str = "0.0.0.0",
        workers: int = 64,
        stream_workers: int | None = None,
        metrics: WebhookMetrics | None = None,
        limits: Limits | None = None,
    ) -> None:
        """``workers``: the pool's threads, for the requests that read the cluster live
        (``stream_workers``, its former name for HTTP/2, wins when given); connections have
        threads of their own, bounded by ``limits.max_connections``."""
        super().__init__(routes, metrics)
        self.limits = limits or Limits()
        self.limits.check()
        self._ctx: ssl.SSLContext | None = None
        self.streams = WorkPool(stream_workers or workers, self.limits.max_queued)
        self.budget = Budget(self.limits.process_buffer, self.limits.small_reserve)
        self._stop = threading.Event()
        self._sock = socket.create_server((host, port), backlog=512, reuse_port=False)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="webhook-accept", daemon=True)
        self._open: dict[int, _Connection] = {}  # by id() of the record
        self._open_lock = threading.Lock()
        self._threads: set[threading.Thread] = set()

    # -- certificate -------------------------------------------------------------------------
    def set_certificate(self, cert: bytes, key: bytes) -> None:
        """Serve ``cert`` from the next handshake on (connections already open keep theirs)."""
        self._ctx = _context(cert, key)
        self._observe_certificate(cert)

    @property
    def has_certificate(self) -> bool:
        return self._ctx is not None

    @property
    def context(self) -> ssl.SSLContext | None:
        """The TLS context new connections get (a rotation replaces it)."""
        return self._ctx

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def saturated(self) -> bool:
        return self.streams.saturated

    # -- life cycle --------------------------------------------------------------------------
    def start(self) -> AdmissionServer:
        if self._ctx is None:
            raise RuntimeError("set_certificate() before start()")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self._sock.close()
        with self._open_lock:
            for record in list(self._open.values()):
                self._shutdown(record)
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=2)
        self.streams.shutdown()

    def _accept(self) -> None:
        while not self._stop.is_set():
            self._expire()
            try:
                conn, address = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            record = self._admit(conn, str(address[0]))
            if record is None:
                continue
            thread = threading.Thread(
                target=self._connection, args=(record,), name="webhook-conn", daemon=True
            )
            with self._open_lock:
                self._threads.add(thread)
            thread.start()

    # -- caps and deadlines ------------------------------------------------------------------
    def _admit(self, conn: socket.socket, address: str) -> _Connection | None:
        """Track the new connection under the caps, or close it (None)."""
        limits = self.limits
        with self._open_lock:
            records = list(self._open.values())
            mine = [r for r in records if r.address == address]
            over = None
            if len(mine) >= limits.max_connections_per_client:
                over = mine
            elif len(records) >= limits.max_connections:
                over = records
            if over is not None:
                # the oldest connection that never completed a request gives its place
                idle = [r for r in over if not r.served and not r.closed]
                if not idle:
                    self.metrics.refuse("connection_limit")
                    with contextlib.suppress(OSError):
                        conn.close()
                    return None
                victim = min(idle, key=lambda r: r.opened)
                self._shutdown(victim)
                del self._open[id(victim)]
                self.metrics.refuse("connection_evicted")
            record = _Connection(conn, address, time.monotonic() + limits.handshake_timeout)
            self._open[id(record)] = record
            return record

    def _expire(self) -> None:
        """End the connections past their deadline (a handshake or request too slow)."""
        now = time.monotonic()
        with self._open_lock:
            late = [r for r in self._open.values() if r.deadline < now and not r.closed]
            for record in late:
                self._shutdown(record)
                self.metrics.refuse("deadline")

    @staticmethod
    def _shutdown(record: _Connection) -> None:
        """Make the connection's thread return (its reads see the end); under _open_lock."""
        if record.closed:
            return
        record.closed = True
        with contextlib.suppress(OSError):
            # the socket under TLS: its thread's read returns at once
            dup = socket.socket(fileno=os.dup(record.fd))
            try:
                dup.shutdown(socket.SHUT_RDWR)
            finally:
                dup.close()

    def _connection(self, record: _Connection) -> None:
        ctx = self._ctx
        assert ctx is not None
        raw = record.sock
        conn: ssl.SSLSocket | None = None
        try:
            raw.settimeout(self.limits.handshake_timeout)
            try:
                conn = ctx.wrap_socket(raw, server_side=True)
            except (OSError, ssl.SSLError) as exc:
                log.debug("TLS handshake with %s failed: %s", record.address, exc)
                return
            record.sock = conn
            protocol = conn.selected_alpn_protocol() or "http/1.1"
            self.metrics.connections.inc(labels={"protocol": protocol})
            if protocol == "h2":
                from kai.webhooks.http2 import serve_http2

                serve_http2(self, conn, ctx, record)
            else:
                self._requests(conn, record)
        except (OSError, ssl.SSLError, ValueError):
            pass
        finally:
            with self._open_lock:
                record.closed = True
                self._open.pop(id(record), None)
                self._threads.discard(threading.current_thread())
            with contextlib.suppress(OSError):
                (conn or raw).close()

    def progress(self, record: _Connection, deadline: float, *, served: bool = False) -> None:
        """The connection's next deadline (from its own thread); ``served``: a request done."""
        record.deadline = deadline
        if served:
            record.served = True

    # -- HTTP/1.1 ----------------------------------------------------------------------------
    def _requests(self, conn: ssl.SSLSocket, record: _Connection) -> None:
        """HTTP/1.1 keep-alive: one request after the other until the peer closes.

        A deliberately small parser (request line, headers, a Content-Length body): the API
        server sends exactly that. The request's head and body must arrive within
        ``request_timeout`` of its first byte, however slowly each byte comes.
        """
        buffer = bytearray()
        while not self._stop.is_set():
            deadline = self._head(conn, buffer, record)
            if deadline is None:
                return
            end = buffer.find(b"\r\n\r\n")
            head = bytes(buffer[:end]).decode("latin-1")
            del buffer[: end + 4]
            parsed = _parse_head(head, self.limits.max_body)
            if isinstance(parsed, _Refusal):
                if parsed.code == 413:
                    self.metrics.refuse("body_too_large")
                self._send(conn, parsed.code, parsed.text, "text/plain", close=True)
                return
            method, target, length, close = parsed
            if not self.budget.take(length, small=length <= SMALL_BODY):
                self.metrics.refuse("buffer_budget")
                self._send(conn, *self.overloaded(), close=True)
                return
            try:
                while len(buffer) < length:
                    if not self._read(conn, buffer, deadline):
                        self._timed_out(conn)
                        return
                body = bytes(buffer[:length])
                del buffer[:length]
                self.progress(record, time.monotonic() + self.limits.idle_timeout + 1)
                if method != "POST":
                    self._send(conn, 405, b"POST AdmissionReview requests only\n", "text/plain")
                else:
                    self._send(conn, *self._answer_here(target, body))
            finally:
                self.budget.give(length)
            record.served = True
            if close:
                return

    def _head(self, conn: ssl.SSLSocket, buffer: bytearray, record: _Connection) -> float | None:
        """Read until ``buffer`` holds a whole request head; the request's deadline, or None
        when the connection is to end (closed, idle, too slow, head too large)."""
        limits = self.limits
        # waiting for a request: the idle deadline, until its first byte
        idle_until = time.monotonic() + limits.idle_timeout
        self.progress(record, idle_until + 1)
        while not buffer:
            if not self._read(conn, buffer, idle_until):
                return None
        deadline = time.monotonic() + limits.request_timeout
        self.progress(record, deadline + 1)
        while buffer.find(b"\r\n\r\n") < 0:
            if len(buffer) > MAX_HEAD:
                self._send(conn, 431, b"request head too large\n", "text/plain", close=True)
                return None
            if not self._read(conn, buffer, deadline):
                self._timed_out(conn)
                return None
        return deadline

    def _answer_here(self, target: str, body: bytes) -> tuple[int, bytes, str]:
        """An HTTP/1.1 request's answer: from memory on this thread, or from a pool worker
        (waited for: one request at a time on the connection), or 429 when the pool is full."""
        answered = self.answer_inline(target, body)
        if answered is not None:
            return answered
        done = threading.Event()
        result: list[tuple[int, bytes, str]] = []

        def work() -> None:
            try:
                result.append(self.answer(target, body))
            finally:
                done.set()

        if not self.streams.submit(work):
            return self.overloaded()
        while not done.wait(1.0):
            if self._stop.is_set():  # the pool drops what it has not started
                return 503, b"the webhook is stopping\n", "text/plain"
        return result[0]

    @staticmethod
    def _read(conn: ssl.SSLSocket, buffer: bytearray, deadline: float) -> bool:
        """Read more into ``buffer`` by ``deadline``; False at the end or the deadline."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        conn.settimeout(left)
        try:
            data = conn.recv(65536)
        except TimeoutError:
            return False
        if not data:
            raise ConnectionResetError("closed by the client")
        buffer += data
        return True

    def _timed_out(self, conn: ssl.SSLSocket) -> None:
        self.metrics.refuse("deadline")
        with contextlib.suppress(OSError, ssl.SSLError):
            self._send(conn, 408, b"request not complete in time\n", "text/plain", close=True)

    @staticmethod
    def _send(
        conn: socket.socket, code: int, body: bytes, ctype: str, *, close: bool = False
    ) -> None:
        reason = {
            200: "OK",
            400: "Bad Request",
            404: "Not Found",
            405: "Method Not Allowed",
            408: "Request Timeout",
            411: "Length Required",
            413: "Content Too Large",
            429: "Too Many Requests",
            431: "Request Header Fields Too Large",
        }.get(code, "Error")
        head = (
            f"HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n"
            + ("Retry-After: 1\r\n" if code == 429 else "")
            + ("Connection: close\r\n" if close else "")
            + "\r\n"
        )
        conn.settimeout(10.0)  # a client that reads nothing does not hold the thread forever
        conn.sendall(head.encode("latin-1") + body)

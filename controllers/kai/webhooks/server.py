"""The HTTPS admission server: AdmissionReview v1 over TLS, HTTP/2 and HTTP/1.1.

The listening thread only accepts; each connection is handed to a worker, which does the TLS
handshake with the *current* certificate (:meth:`AdmissionServer.set_certificate` swaps it
without a restart, so a rotation never drops a request) and then serves the protocol the
client chose by ALPN:

- ``h2`` (what kube-apiserver picks): one connection carries all of the API server's
  concurrent calls as streams (:mod:`kai.webhooks.http2`). Over HTTP/1.1 the API server opens a
  new TLS connection whenever its few idle ones are busy, and under load the handshakes cost
  more than the answers;
- ``http/1.1``: keep-alive requests one after the other, for clients without HTTP/2.

A second, plain-HTTP port serves ``/metrics``, ``/healthz`` (the process answers) and
``/readyz`` (a certificate is loaded and the caches are synced).

Metrics: ``kai_webhook_requests_total{webhook,verdict}`` and
``kai_webhook_request_duration_milliseconds{webhook,verdict}`` (verdict: allowed, warned,
mutated, denied, error).
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
from typing import Any

from kai.metrics import Registry
from kai.webhooks.review import Request, ReviewError, Verdict, answer, parse

log = logging.getLogger("kai.webhook")

Handler = Callable[[Request], Verdict]
#: A handler's answer from memory alone, cheap enough for the connection's own thread; None
#: when it needs more (a live read of the cluster): then the full handler runs on the pool.
InlineHandler = Callable[[Request], Verdict | None]
Route = tuple[str, Handler] | tuple[str, Handler, InlineHandler]
MAX_BODY = 8 * 1024 * 1024  # the API server sends at most ~3 MiB objects (twice for UPDATE)
IDLE_TIMEOUT = 60.0  # a kept-alive connection with no request for this long is closed

LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 100, 250, 1000)


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

    # -- one request -------------------------------------------------------------------------
    def answer(self, target: str, body: bytes) -> tuple[int, bytes, str]:
        """The HTTP status, body and content type answering ``POST target`` with ``body``."""
        start = time.perf_counter()
        path = target.split("?", 1)[0]
        route = self.routes.get(path)
        if route is None:
            return 404, f"no webhook at {path}\n".encode(), "text/plain"
        webhook, handler, _inline = route
        try:
            request = parse(body)
        except ReviewError as exc:
            self.metrics.observe(webhook, "error", (time.perf_counter() - start) * 1000)
            return 400, f"{exc}\n".encode(), "text/plain"
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
        webhook, _handler, inline = route
        try:
            request = parse(body)
        except ReviewError:
            return None  # answer() says why, and counts it
        try:
            verdict = inline(request)  # type: ignore[misc]
        except Exception as exc:
            return self._failed(webhook, request, exc, start)
        if verdict is None:
            return None
        return self._finish(webhook, request, verdict, start)

    def _failed(
        self, webhook: str, request: Request, exc: Exception, start: float
    ) -> tuple[int, bytes, str]:
        # an answer, not a broken connection: the API server shows the message
        log.exception("%s: internal error on %s", webhook, request.label)
        verdict = Verdict.deny(
            f"internal error in the kai webhook {webhook}: {type(exc).__name__}: {exc}",
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
                "%s: denied %s %s: %s", webhook, request.operation, request.label, verdict.message
            )
        return 200, data, "application/json"


class AdmissionServer(Admission):
    """The threaded TLS server of the module docstring (ssl + h2, pure Python)."""

    def __init__(
        self,
        routes: dict[str, Route],
        *,
        port: int = 9443,
        host: str = "0.0.0.0",
        workers: int = 64,
        stream_workers: int = 16,
        metrics: WebhookMetrics | None = None,
    ) -> None:
        super().__init__(routes, metrics)
        self._ctx: ssl.SSLContext | None = None
        # connections (one worker each, for its lifetime) and the requests of HTTP/2 streams
        # (answered concurrently, so that a slow answer never holds up the others on the
        # connection) never wait for each other's workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="webhook")
        self.streams = ThreadPoolExecutor(
            max_workers=stream_workers, thread_name_prefix="webhook-stream"
        )
        self._stop = threading.Event()
        self._sock = socket.create_server((host, port), backlog=512, reuse_port=False)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="webhook-accept", daemon=True)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

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
            for conn in list(self._open):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.streams.shutdown(wait=True, cancel_futures=True)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, address = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                self._pool.submit(self._connection, conn, address)
            except RuntimeError:  # the pool is shut down
                conn.close()
                return

    def _connection(self, raw: socket.socket, address: Any) -> None:
        ctx = self._ctx
        assert ctx is not None
        raw.settimeout(10.0)  # the handshake
        try:
            conn = ctx.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError) as exc:
            log.debug("TLS handshake with %s failed: %s", address, exc)
            with contextlib.suppress(OSError):
                raw.close()
            return
        with self._open_lock:
            self._open.add(conn)
        protocol = conn.selected_alpn_protocol() or "http/1.1"
        self.metrics.connections.inc(labels={"protocol": protocol})
        try:
            conn.settimeout(IDLE_TIMEOUT)
            if protocol == "h2":
                from kai.webhooks.http2 import serve_http2

                serve_http2(self, conn, ctx)
            else:
                self._requests(conn)
        except (OSError, ssl.SSLError, ValueError):
            pass
        finally:
            with self._open_lock:
                self._open.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()

    def _requests(self, conn: socket.socket) -> None:
        """HTTP/1.1 keep-alive: one request after the other until the peer closes.

        A deliberately small parser (request line, headers, a Content-Length body): the API
        server sends exactly that, and http.server's email-based header parsing costs more
        than the admission decision itself.
        """
        rfile = conn.makefile("rb", buffering=65536)
        while not self._stop.is_set():
            line = rfile.readline(8192)
            if not line:
                return
            if line in (b"\r\n", b"\n"):
                continue
            parts = line.split()
            if len(parts) != 3:
                self._send(conn, 400, b"bad request line\n", "text/plain", close=True)
                return
            method, target = parts[0], parts[1].decode("latin-1")
            length, close = 0, parts[2] == b"HTTP/1.0"
            while True:
                header = rfile.readline(8192)
                if header in (b"\r\n", b"\n", b""):
                    break
                name, _, value = header.partition(b":")
                key = name.strip().lower()
                if key == b"content-length":
                    length = int(value.strip() or 0)
                elif key == b"connection":
                    close = value.strip().lower() == b"close"
            if length < 0 or length > MAX_BODY:
                self._send(conn, 413, b"body too large\n", "text/plain", close=True)
                return
            body = rfile.read(length) if length else b""
            if method != b"POST":
                self._send(conn, 405, b"POST AdmissionReview requests only\n", "text/plain")
            else:
                self._send(conn, *self.answer(target, body))
            if close:
                return

    @staticmethod
    def _send(
        conn: socket.socket, code: int, body: bytes, ctype: str, *, close: bool = False
    ) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}.get(
            code, "Error"
        )
        head = (
            f"HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
        )
        conn.sendall(head.encode("latin-1") + body)

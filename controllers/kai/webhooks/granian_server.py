"""The admission server on granian: TLS, HTTP/2 and HTTP/1.1 in Rust (hyper, rustls).

The same routes, handlers and metrics as :class:`kai.webhooks.server.AdmissionServer` (both
are a :class:`~kai.webhooks.server.Admission`), with the transport compiled: the TLS records,
HTTP/2 frames, HPACK and flow control that cost the pure-Python server most of its CPU per
call are handled by granian's Rust worker, and Python runs only the handler.

granian runs embedded (one worker, on an asyncio loop of its own thread in this process), so
the handlers still read the informer caches of the process. The pod webhooks answer from
memory on the loop itself (``answer_inline``); a handler that reads the cluster live runs on a
thread pool, so that it never holds up the loop.

Certificate rotation: granian's worker reads the certificate files when it starts. A new
certificate is written over the files (atomic renames) and the worker is *respawned*: the new
worker accepts on the same listening socket from then on, and the old one shuts down
gracefully (HTTP/2 GOAWAY: the streams it has accepted are answered, the client opens its next
calls on a new connection, which the new worker serves with the new certificate). No request is
refused meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any

from kai.webhooks.server import (
    SMALL_BODY,
    Admission,
    Budget,
    Limits,
    Route,
    WebhookMetrics,
    WorkPool,
)

log = logging.getLogger("kai.webhook")

#: seconds the old and the new worker overlap on a certificate rotation before the old one is
#: asked to stop (it then finishes what it has accepted)
RESPAWN_OVERLAP = 0.5
#: seconds an old worker is given to finish its calls after a rotation, and on a stop
DRAIN_TIMEOUT = 30
STOP_TIMEOUT = 5

#: peers remembered for the connection count (a webhook has a handful: one per API server)
MAX_PEERS = 4096

_TEXT = [("content-type", "text/plain")]
_JSON = "application/json"


class GranianAdmissionServer(Admission):
    """``POST /<path>`` to a handler over granian; the interface of ``AdmissionServer``."""

    def __init__(
        self,
        routes: dict[str, Route],
        *,
        port: int = 9443,
        host: str = "0.0.0.0",
        workers: int = 64,
        metrics: WebhookMetrics | None = None,
        limits: Limits | None = None,
    ) -> None:
        super().__init__(routes, metrics)
        self.limits = limits or Limits()
        self.limits.check()
        self.host = host
        # bound and listening here (port 0: any free one); granian's worker accepts on it
        self._listener = socket.create_server((host, port), backlog=512)
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        # handlers that read the cluster live (policy validation): never on the loop
        self._pool = WorkPool(workers, self.limits.max_queued)
        self.budget = Budget(self.limits.process_buffer, self.limits.small_reserve)
        self._dir = tempfile.mkdtemp(prefix="kai-webhook-tls-")
        self._cert_path = Path(self._dir, "tls.crt")
        self._key_path = Path(self._dir, "tls.key")
        self._has_cert = False
        self._lock = threading.Lock()
        self._server: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._listening = threading.Event()
        self._start_error: BaseException | None = None
        self._stopping = False
        # the peers (address:port) seen lately: a new one is a new connection, the only view of
        # connections that granian gives its application
        self._peers: dict[str, None] = {}

    # -- certificate -------------------------------------------------------------------------
    def set_certificate(self, cert: bytes, key: bytes) -> None:
        """Serve ``cert`` from now on: written over the files, the worker respawned."""
        with self._lock:
            # key first, each file replaced whole: a worker starting meanwhile reads either the
            # old pair or (after both renames) the new one; the respawn below comes after both
            for path, data, mode in ((self._key_path, key, 0o600), (self._cert_path, cert, 0o644)):
                tmp = path.with_suffix(".new")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
                with open(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            self._has_cert = True
            self._observe_certificate(cert)
            if self._server is not None and self._loop is not None and not self._stopping:
                log.info("respawning the granian worker with the new certificate")
                self._loop.call_soon_threadsafe(self._server.reload)

    @property
    def has_certificate(self) -> bool:
        return self._has_cert

    @property
    def stopping(self) -> bool:
        return self._stopping

    # -- life cycle --------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> GranianAdmissionServer:
        if not self._has_cert:
            raise RuntimeError("set_certificate() before start()")
        self._thread = threading.Thread(target=self._run, name="webhook-granian", daemon=True)
        self._thread.start()
        if not self._listening.wait(timeout):
            raise TimeoutError(f"granian did not listen on {self.host}:{self.port} in {timeout}s")
        if self._start_error is not None:
            error = self._start_error
            raise RuntimeError(f"granian could not start: {error}") from error
        return self

    def _run(self) -> None:
        from granian.constants import HTTPModes, Interfaces, SSLProtocols, TaskImpl
        from granian.http import HTTP1Settings, HTTP2Settings
        from granian.log import LogLevels
        from granian.net import SocketHolder
        from granian.server.embed import AsyncWorker, Server

        class Worker(AsyncWorker):  # type: ignore[misc]
            async def join(self, timeout: float | None = None) -> None:
                # granian's own join lets wait_for's TimeoutError out of its respawn and stop
                # loops, which ends the server; a worker that does not drain in time is killed
                # by those loops instead (they check is_alive() after join)
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(self._task), timeout)

        class EmbeddedServer(Server):  # type: ignore[misc]
            # One listening socket, bound and listening before the first worker starts (calls
            # queue until it accepts), owned here and handed to each worker as a duplicate:
            # a rotation's old worker closes its own copy only, the new one accepts on the same
            # socket, and no queued connection is lost. (granian's default on Linux: each
            # worker binds a socket of its own with SO_REUSEPORT, and the old worker's close
            # would reset the connections queued on it.)
            def _init_shared_socket(self) -> None:
                self._ssp = None
                self._shd = None

            def _spawn_worker(self, idx: int, target: Any, callback_loader: Any) -> Any:
                self._shd = SocketHolder(os.dup(fd), False, 512)
                worker = super()._spawn_worker(idx, target, callback_loader)
                worker.__class__ = Worker
                return worker

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        fd = self._listener.fileno()
        try:
            server = EmbeddedServer(
                self,
                address=self.host,
                port=self.port,
                interface=Interfaces.RSGI,
                http=HTTPModes.auto,
                websockets=False,
                backlog=512,
                # one Rust thread: TLS and HTTP/2 of a few connections, on a machine whose
                # cores the API server needs too
                runtime_threads=1,
                task_impl=TaskImpl.asyncio,
                http2_settings=HTTP2Settings(
                    max_concurrent_streams=self.limits.max_streams,
                    initial_stream_window_size=self.limits.stream_window,
                    initial_connection_window_size=self.limits.connection_buffer,
                    adaptive_window=False,
                    max_frame_size=self.limits.max_frame_size,
                    max_headers_size=self.limits.max_header_list_size,
                    keep_alive_interval=None,
                    keep_alive_timeout=20,
                ),
                http1_settings=HTTP1Settings(
                    header_read_timeout=int(self.limits.request_timeout * 1000),
                ),
                # requests handled at once by the worker: beyond, granian waits to accept
                backpressure=self.limits.max_streams * 4,
                log_level=LogLevels.warning,
                # granian's own records go to the process's handlers, not to a console of its own
                log_dictconfig={
                    "loggers": {
                        "_granian": {"handlers": [], "propagate": True},
                        "granian.access": {"handlers": [], "propagate": False},
                    }
                },
                ssl_cert=self._cert_path,
                ssl_key=self._key_path,
                ssl_protocol_min=SSLProtocols.tls12,
            )
            server.respawn_interval = RESPAWN_OVERLAP
            server.workers_kill_timeout = DRAIN_TIMEOUT
            server.on_startup(self._listening.set)
            self._server = server
            loop.run_until_complete(server.serve())
        except BaseException as exc:  # reported by start(), or logged when it fails later
            self._start_error = exc
            if self._listening.is_set():
                log.exception("the granian admission server stopped")
            self._listening.set()
        finally:
            self._listener.close()
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def stop(self) -> None:
        self._stopping = True
        server = self._server
        if server is not None and self._loop is not None and not self._loop.is_closed():

            def stop() -> None:
                server.workers_kill_timeout = STOP_TIMEOUT
                server.stop()

            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(stop)
        if self._thread is not None:
            self._thread.join(timeout=DRAIN_TIMEOUT + STOP_TIMEOUT + 5)
        self._pool.shutdown()
        self._listener.close()  # when never started
        with contextlib.suppress(OSError):
            for path in (self._cert_path, self._key_path):
                path.unlink(missing_ok=True)
            os.rmdir(self._dir)

    @property
    def saturated(self) -> bool:
        return self._pool.saturated

    async def _on_pool(self, path: str, body: bytes, proto: Any) -> tuple[int, bytes, str]:
        """The answer from a pool worker, or 429 at once when its queue is full. A request
        whose client went away (a reset stream) while it waited is skipped by the worker."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, bytes, str]] = loop.create_future()
        gone = threading.Event()
        watcher = asyncio.ensure_future(proto.client_disconnect())
        watcher.add_done_callback(lambda _: gone.set())

        def work() -> None:
            if gone.is_set():  # nobody waits for this answer: no live read for it
                self.metrics.refuse("cancelled")
                result = (499, b"", "text/plain")
            else:
                try:
                    result = self.answer(path, body)
                except Exception:  # answer() turns handler errors into verdicts
                    log.exception("answering a request failed")
                    result = (500, b"internal error of the kai webhook\n", "text/plain")
            loop.call_soon_threadsafe(_settle, future, result)

        try:
            if not self._pool.submit(work):
                return self.overloaded()
            return await future
        finally:
            watcher.cancel()

    # -- RSGI --------------------------------------------------------------------------------
    async def __call__(self, scope: Any, proto: Any) -> None:
        if scope.proto != "http":
            return
        peer = scope.client
        if peer not in self._peers:
            if len(self._peers) >= MAX_PEERS:
                self._peers.clear()
            self._peers[peer] = None
            protocol = "h2" if scope.http_version == "2" else "http/" + scope.http_version
            self.metrics.connections.inc(labels={"protocol": protocol})
        if scope.method != "POST":
            proto.response_bytes(405, _TEXT, b"POST AdmissionReview requests only\n")
            return
        length = scope.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limits.max_body):
            self.metrics.refuse("body_too_large")
            proto.response_bytes(413, _TEXT, b"body too large\n")
            return
        # the body in chunks, each counted in the process's budget, by the request deadline
        parts: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.limits.request_timeout):
                async for chunk in proto:
                    size += len(chunk)
                    if size > self.limits.max_body:
                        self.metrics.refuse("body_too_large")
                        proto.response_bytes(413, _TEXT, b"body too large\n")
                        return
                    if not self.budget.take(len(chunk), small=size <= SMALL_BODY):
                        size -= len(chunk)
                        self.metrics.refuse("buffer_budget")
                        proto.response_bytes(503, _TEXT, b"the webhook's body budget is full\n")
                        return
                    parts.append(chunk)
            body = b"".join(parts)
            parts.clear()
            path = scope.path
            answered = self.answer_inline(path, body)
            if answered is None:
                answered = await self._on_pool(path, body, proto)
        except TimeoutError:
            self.metrics.refuse("deadline")
            proto.response_bytes(408, _TEXT, b"request not complete in time\n")
            return
        finally:
            self.budget.give(size)
        code, data, ctype = answered
        headers = [("content-type", ctype)]
        if code == 429:
            headers.append(("retry-after", "1"))
        proto.response_bytes(code, headers, data)


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # the client went away meanwhile: nobody waits for it
        future.set_result(result)

"""HTTP front end: routes Kubernetes REST paths to :class:`ApiCore` and streams watches.

A :class:`http.server.ThreadingHTTPServer` (one thread per connection, HTTP/1.1 keep-alive) is
enough here: the work per request is a few dict operations under one lock, watches are
long-lived blocking loops that fit a thread each, and nothing heavier needs importing
(docs/design/apiserver.md has the measurements and the reasoning)."""

from __future__ import annotations

import contextlib
import hmac
import logging
import re
import select
import socket
import threading
import time
from email.utils import formatdate
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

import orjson

from kube_emulator import discovery, eviction, openapi, protobuf, reviews
from kube_emulator.errors import ApiError, bad_request
from kube_emulator.operations import WriteOptions
from kube_emulator.tables import to_table
from kube_emulator.watch import serve_watch

if TYPE_CHECKING:
    from kube_emulator.operations import ApiCore
    from kube_emulator.resources import ResourceType

log = logging.getLogger("kube_emulator")
MAX_BODY = 3 * 1024 * 1024  # what kube-apiserver accepts per request body
DRAIN_LIMIT = 16 * 1024 * 1024  # a larger body is refused unread (the client may see a reset)
_PHRASES = {status.value: status.phrase for status in HTTPStatus}
_date_cache: list[Any] = [0, ""]


def _http_date() -> str:
    now = int(time.time())
    if now != _date_cache[0]:
        _date_cache[0] = now
        _date_cache[1] = formatdate(now, usegmt=True)
    return str(_date_cache[1])


_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)


# paths every client may read without a token (kube-apiserver's system:public-info-viewer)
PUBLIC_PATHS = frozenset(("/healthz", "/livez", "/readyz", "/version"))
# file descriptors kept free for everything else than client connections (the listening socket,
# webhook calls, the data directory, log files)
_FD_RESERVE = 64


def connection_cap(wanted: int) -> int:
    """``wanted``, lowered so that the connections fit the process's file-descriptor limit."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return wanted
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(2, min(wanted, soft - _FD_RESERVE))


class Connection:
    """One client connection and what it is doing, for the timeouts and the connection cap.

    ``state``: ``idle`` (waiting for a request), ``head`` (reading a request line and
    headers), ``body`` (reading a body), ``busy`` (serving: no deadline), ``closed`` (cut by
    the reaper), ``evicted`` (closed to make room for a new connection)."""

    __slots__ = ("since", "sock", "state")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.state = "idle"
        self.since = time.monotonic()

    def mark(self, state: str) -> None:
        if self.state not in ("closed", "evicted"):
            self.state = state
            self.since = time.monotonic()

    def cut(self) -> None:
        """Wake the thread blocked reading this connection: its next read sees the end."""
        self.state = "closed"
        # the plain socket's shutdown, also for TLS (SSLSocket.shutdown would drop its SSL
        # object under the reading thread's feet)
        with contextlib.suppress(OSError):
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)

    def evict(self) -> None:
        """Close an idle connection to make room: its thread, blocked waiting for a request,
        sees the end. Only the reading half is shut: a request whose first bytes the thread
        read in the moment before (still marked idle) is answered, then the connection
        closes, so the client never sees a request dropped unanswered."""
        self.state = "evicted"
        with contextlib.suppress(OSError):
            socket.socket.shutdown(self.sock, socket.SHUT_RD)


def _without_unread_input(conns: list[Connection]) -> list[Connection]:
    """``conns`` less those with bytes waiting in their socket's receive buffer."""
    if not conns:
        return conns
    poller = select.poll()
    by_fd: dict[int, Connection] = {}
    for conn in conns:
        try:
            fd = conn.sock.fileno()
        except (OSError, ValueError):
            continue
        if fd < 0:
            continue
        by_fd[fd] = conn
        poller.register(fd, select.POLLIN)
    readable = {fd for fd, events in poller.poll(0) if events & select.POLLIN}
    return [conn for fd, conn in by_fd.items() if fd not in readable]


class ApiHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512

    def __init__(self, address: tuple[str, int], core: ApiCore) -> None:
        super().__init__(address, ApiHandler)
        self.core = core
        self.stopping = False
        self.request_count = 0
        # requests by (verb, resource, subresource), as kube-apiserver's apiserver_request_total
        self.request_counts: dict[tuple[str, str, str], int] = {}
        opts = core.options
        self.token = opts.token.encode() if opts.require_auth else None
        self.max_connections = connection_cap(opts.max_connections)
        self.connections: dict[int, Connection] = {}
        self.connections_lock = threading.Lock()
        self.evicted_connections = 0  # idle ones closed to make room for a new one
        self.refused_connections = 0  # new ones refused: every open one was busy
        self.timed_out_connections = 0
        self._deadlines = {
            "idle": opts.idle_timeout,
            "head": opts.header_timeout,
            "body": opts.body_timeout,
        }
        self._closed = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="kai-apiserver-reaper", daemon=True)
        self._reaper.start()

    # -- connections ---------------------------------------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._admit(request):
            self.refused_connections += 1
            self._refuse(request)
            return
        super().process_request(request, client_address)

    def _admit(self, sock: socket.socket) -> bool:
        """Register a new connection; at the cap, close the longest-waiting idle one (or one
        still sending its request head) to make room. A connection whose client has sent
        bytes its thread has not read yet (a request on a just-accepted connection, whose
        thread has not started) is not waiting: it is spared. False when none is waiting."""
        with self.connections_lock:
            if len(self.connections) >= self.max_connections:
                waiting = [c for c in self.connections.values() if c.state in ("idle", "head")]
                waiting = _without_unread_input(waiting)
                if not waiting:
                    return False
                victim = min(waiting, key=lambda c: (c.state != "idle", c.since))
                del self.connections[id(victim.sock)]
                if victim.state == "idle":
                    victim.evict()
                else:  # a slow request head: it is not served
                    victim.cut()
                self.evicted_connections += 1
            self.connections[id(sock)] = Connection(sock)
        return True

    def _refuse(self, sock: socket.socket) -> None:
        """Answer 503 without a thread (plain HTTP only: a TLS client just sees the close)."""
        if not isinstance(sock, socket.socket) or hasattr(sock, "context"):
            self.shutdown_request(sock)
            return
        body = orjson.dumps(
            ApiError(
                503, "too many open connections to the API server", "ServiceUnavailable"
            ).status()
        )
        head = (
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
        )
        try:
            sock.setblocking(False)
            sock.send(head.encode() + body)
        except OSError:
            pass
        self.shutdown_request(sock)

    def connection_of(self, sock: Any) -> Connection:
        with self.connections_lock:
            conn = self.connections.get(id(sock))
        return conn if conn is not None else Connection(sock)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            conn = self.connections.get(id(request))
            if conn is not None and conn.sock is request:
                del self.connections[id(request)]
        super().shutdown_request(request)

    def _reap(self) -> None:
        """Close connections past their deadline: idle too long, a request head or body that
        does not arrive in time (slow or half-open clients)."""
        while not self._closed.wait(0.25):
            now = time.monotonic()
            with self.connections_lock:
                late = [
                    c
                    for c in self.connections.values()
                    if c.state in self._deadlines and now - c.since > self._deadlines[c.state]
                ]
            for conn in late:
                self.timed_out_connections += 1
                conn.cut()

    def server_close(self) -> None:
        self._closed.set()
        super().server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-request (reset, broken pipe) is routine: no report. A
        connection that failed at the socket or TLS layer (a half-open TLS connection closed
        before its answer, a bad record) is one line, without a traceback. Anything else is a
        fault of the server: logged with its traceback."""
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionResetError, BrokenPipeError, TimeoutError)):
            return
        if isinstance(exc, OSError):  # ssl.SSLError is an OSError
            log.warning(
                "connection from %s closed: %s: %s",
                _peer(client_address),
                type(exc).__name__,
                " ".join(str(exc).split())[:200],
            )
            return
        log.error("error on a connection from %s", _peer(client_address), exc_info=True)


def _peer(address: Any) -> str:
    """``host:port`` of a client address (a tuple for TCP), for a log line."""
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


class _Headers(dict[str, str]):
    """Request headers, looked up case-insensitively (keys are stored lower-case)."""

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())


class Route:
    __slots__ = ("group", "name", "namespace", "plural", "sub", "version")

    def __init__(
        self,
        group: str,
        version: str,
        namespace: str | None,
        plural: str,
        name: str | None,
        sub: str,
    ) -> None:
        self.group, self.version, self.namespace = group, version, namespace
        self.plural, self.name, self.sub = plural, name, sub


def _parse_resource_path(parts: list[str]) -> Route | None:
    """``parts`` after the /api or /apis prefix."""
    if parts and parts[0] == "api":
        if len(parts) < 3:
            return None
        group, version, rest = "", parts[1], parts[2:]
    elif parts and parts[0] == "apis":
        if len(parts) < 4:
            return None
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    ns: str | None = None
    if (
        rest[0] == "namespaces"
        and len(rest) >= 3
        and not (group == "" and len(rest) == 3 and rest[2] in ("status", "finalize"))
    ):
        ns, rest = rest[1], rest[2:]
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else ""
    if len(rest) > 3:
        return None
    return Route(group, version, ns, plural, name, sub)


def _verb(method: str, route: Route, q: dict[str, str]) -> str:
    """kube-apiserver's verb names: GET is get, list or watch; DELETE of a collection is
    deletecollection."""
    if method == "GET":
        if q.get("watch") in ("true", "1", "True"):
            return "WATCH"
        return "GET" if route.name is not None else "LIST"
    if method == "DELETE" and route.name is None:
        return "DELETECOLLECTION"
    return "POST" if method == "POST" else method


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small responses must not wait for delayed ACKs
    server: ApiHTTPServer
    pending: list[bytes]
    server_version = "kai-sim-apiserver"
    conn: Connection

    def setup(self) -> None:
        self.conn = self.server.connection_of(self.request)
        opts = self.server.core.options
        super().setup()
        # a backstop for a client that stops reading what it is sent (the reaper thread
        # enforces the read deadlines precisely)
        self.connection.settimeout(
            2 * max(opts.idle_timeout, opts.header_timeout, opts.body_timeout)
        )

    def handle_one_request(self) -> None:
        """Wait for the next request as ``idle``; from its first byte, read its head as
        ``head`` (each state has its deadline)."""
        self.conn.mark("idle")
        try:
            first = self.rfile.peek(1)  # type: ignore[attr-defined]
        except (OSError, ValueError):
            first = b""
        if not first or self.conn.state == "closed":
            self.close_connection = True
            return
        if self.conn.state == "evicted":  # made room for another: answer this one, then close
            self.close_connection = True
            super().handle_one_request()
            return
        self.conn.mark("head")
        super().handle_one_request()

    def parse_request(self) -> bool:
        """Parse the request line and headers (a lean replacement for the standard library's
        email-based header parser, which cost a fifth of every small request)."""
        raw_line: bytes = getattr(self, "raw_requestline", b"")
        line = str(raw_line, "iso-8859-1").rstrip("\r\n")
        self.requestline = line
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            self.request_version = "HTTP/1.1"
            self.close_connection = True
            self.send_error(400, f"Bad request line {line!r}")
            return False
        self.command, self.path, self.request_version = parts
        headers = _Headers()
        for _ in range(200):
            raw = self.rfile.readline(65537)
            if not raw and self.conn.state in ("closed", "evicted"):  # cut before the head ended
                self.close_connection = True
                return False
            if raw in (b"\r\n", b"\n", b""):
                break
            name, sep, value = str(raw, "iso-8859-1").partition(":")
            if not sep:
                self.close_connection = True
                self.send_error(400, "Bad header line")
                return False
            headers[name.strip().lower()] = value.strip()
        else:
            self.close_connection = True
            self.send_error(431, "Too many headers")
            return False
        if self.conn.state == "closed":  # cut by the reaper: the head did not arrive in time
            self.close_connection = True
            return False
        self.conn.mark("busy")
        self.headers = headers  # type: ignore[assignment]
        conn = headers.get("connection", "").lower()
        self.close_connection = (
            conn == "close"
            or (self.request_version == "HTTP/1.0" and conn != "keep-alive")
            or self.conn.state == "evicted"  # answered, then closed (handle_one_request)
        )
        return True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - %s", self.address_string(), format % args)

    # -- responses ---------------------------------------------------------------------------
    def _send(
        self,
        code: int,
        body: Any,
        warnings: list[str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        """Write status line, headers and body with one system call (separate writes cost a
        syscall each and invite delayed-ACK stalls on small responses)."""
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        head = [
            f"HTTP/1.1 {code} {_PHRASES.get(code, '')}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(data)}",
            "Cache-Control: no-cache, private",
            f"Date: {_http_date()}",
        ]
        head += [f'Warning: 299 - "{_quoted(w)}"' for w in warnings or []]
        if self.close_connection:
            head.append("Connection: close")
        payload = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        if self.command != "HEAD":
            payload += data
        self.wfile.write(payload)
        log.debug('"%s" %s %s', self.requestline, code, len(data))

    def _error(self, err: ApiError) -> None:
        self._send(err.code, err.status())

    def _read_body(self) -> bytes:
        if self.headers.get("Expect", "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError as exc:
            self.close_connection = True
            raise bad_request("Content-Length is not a number") from exc
        if length < 0:  # read(-1) would read until the client closes: no limit at all
            self.close_connection = True
            raise bad_request("Content-Length must not be negative")
        if length > MAX_BODY:
            self.close_connection = True  # the unread body makes the connection unusable
            if length <= DRAIN_LIMIT:
                # read it (and drop it) first: a client that sends its whole body before reading
                # the answer would otherwise see a reset (over TLS: an EOF) instead of the 413
                left = length
                while left > 0:
                    piece = self.rfile.read(min(left, 1 << 16))
                    if not piece:
                        break
                    left -= len(piece)
            raise ApiError(
                413, f"Request entity too large: limit is {MAX_BODY}", "RequestEntityTooLarge"
            )
        if length:
            data = self.rfile.read(length)
            if len(data) < length:
                self.close_connection = True
                raise bad_request("the request body ended before its Content-Length")
            return data
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            total = 0
            while True:
                # a chunk-size line: hex digits, maybe ";extensions" (bounded: a line that
                # never ends must not grow without limit)
                line = self.rfile.readline(1024)
                digits = line.split(b";", 1)[0].strip()
                if not digits or not all(c in b"0123456789abcdefABCDEF" for c in digits):
                    self.close_connection = True
                    raise bad_request("malformed chunked request body: bad chunk size")
                size = int(digits, 16)
                if size == 0:
                    self.rfile.readline()
                    break
                total += size
                if total > MAX_BODY:
                    self.close_connection = True
                    raise ApiError(
                        413,
                        f"Request entity too large: limit is {MAX_BODY}",
                        "RequestEntityTooLarge",
                    )
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return b""

    def _json_body(self, raw: bytes) -> Any:
        if not raw:
            return None
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        if ctype in ("application/yaml", "application/apply-patch+yaml"):
            from kube_emulator.yamlbody import YamlBodyError, load_yaml, yaml_body_error

            try:
                return load_yaml(raw)
            except YamlBodyError as exc:
                raise yaml_body_error(exc) from exc
        if ctype == "application/vnd.kubernetes.protobuf":
            return protobuf.decode(raw)
        if _LONG_NUMBER.search(raw):
            return _exact_json(raw)
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise bad_request(f"the request body is not valid JSON: {exc}") from exc

    # -- dispatch ----------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _authenticated(self, path: str) -> bool:
        token = self.server.token
        if token is None or path in PUBLIC_PATHS:
            return True
        given = self.headers.get("Authorization") or ""
        scheme, _, value = given.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            value.strip().encode("latin-1"), token
        )

    def _handle(self, method: str) -> None:
        self.server.request_count += 1
        url = urlsplit(self.path)
        q = dict(parse_qsl(url.query, keep_blank_values=True))
        parts = [p for p in url.path.split("/") if p]
        try:
            if not self._authenticated("/" + "/".join(parts)):
                if method != "GET":
                    self.close_connection = True  # its body stays unread
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if method in ("POST", "PUT", "PATCH", "DELETE"):
                self.conn.mark("body")
                raw = self._read_body()
                self.conn.mark("busy")
            else:
                raw = b""
            if self._meta_route(method, parts, raw):
                return
            route = _parse_resource_path(parts)
            if route is None:
                raise ApiError(404, "the server could not find the requested resource", "NotFound")
            verb = _verb(method, route, q)
            counts = self.server.request_counts
            key = (verb, route.plural, route.sub)
            counts[key] = counts.get(key, 0) + 1
            self._resource(method, route, q, raw)
        except ApiError as err:
            self._error(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # never leak a traceback to the client; log it here
            log.exception("internal error on %s %s", method, self.path)
            self._error(
                ApiError(
                    500, f"Internal error occurred: {type(exc).__name__}: {exc}", "InternalError"
                )
            )

    def _meta_route(self, method: str, parts: list[str], raw: bytes) -> bool:
        """Serve what is not a resource (version, health, metrics, discovery, OpenAPI, the
        emulator's own /kai-sim/ endpoints); False when ``parts`` names none of them."""
        path = "/" + "/".join(parts)
        if path.startswith("/kai-sim/"):
            if not self.server.core.options.enable_test_endpoints:
                # off unless asked for (kai apiserver --enable-test-endpoints)
                raise ApiError(404, "the server could not find the requested resource", "NotFound")
            return self._kai_sim_route(method, path, raw)
        if method != "GET":
            return False
        return (
            self._fixed_route(path)
            or self._discovery_route(parts)
            or self._openapi_route(path, parts)
        )

    def _fixed_route(self, path: str) -> bool:
        core = self.server.core
        if path == "/version":
            self._send(200, discovery.version_info(core.options.git_version))
        elif path in ("/healthz", "/readyz", "/livez"):
            self._send(200, b"ok", content_type="text/plain")
        elif path == "/metrics":
            self._send(200, self._metrics_text(), content_type="text/plain; version=0.0.4")
        elif path == "/api":
            host = self.headers.get("Host") or f"{core.options.host}:{core.options.port}"
            self._send(200, discovery.api_versions(host))
        elif path == "/apis":
            self._send(200, discovery.api_group_list(core))
        else:
            return False
        return True

    def _discovery_route(self, parts: list[str]) -> bool:
        """/apis/GROUP, /api/VERSION and /apis/GROUP/VERSION."""
        core = self.server.core
        if len(parts) == 2 and parts[0] == "apis":
            doc = discovery.api_group(core, parts[1])
        elif (len(parts) == 2 and parts[0] == "api") or (len(parts) == 3 and parts[0] == "apis"):
            group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
            doc = discovery.resource_list(core, group, version)
        else:
            return False
        if doc is None:
            raise ApiError(404, "the server could not find the requested resource")
        self._send(200, doc)
        return True

    def _openapi_route(self, path: str, parts: list[str]) -> bool:
        core = self.server.core
        if path == "/openapi/v3":
            self._send(200, openapi.index(core))
            return True
        if path.startswith("/openapi/v3/"):
            rest = parts[2:]
            group, version = (
                ("", rest[1])
                if rest[:1] == ["api"] and len(rest) == 2
                else ((rest[1], rest[2]) if rest[:1] == ["apis"] and len(rest) == 3 else ("", ""))
            )
            doc = openapi.group_version_doc(core, group, version) if version else None
            if doc is None:
                raise ApiError(404, "the server could not find the requested resource")
            self._send(200, doc)
            return True
        if path == "/openapi/v2":
            body, ctype = openapi.v2_document(self.headers.get("Accept") or "")
            self._send(200, body, content_type=ctype)
            return True
        if path.startswith("/openapi/"):
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        return False

    def _kai_sim_route(self, method: str, path: str, raw: bytes) -> bool:
        """The emulator's own endpoints: fault injection and history compaction."""
        core = self.server.core
        if path == "/kai-sim/faults":
            if method == "PUT":
                body = self._json_body(raw) or {}
                try:
                    core.faults.configure(**body)
                except (TypeError, ValueError) as exc:
                    raise bad_request(str(exc)) from exc
            self._send(200, core.faults.describe())
            return True
        if path == "/kai-sim/compact" and method == "POST":
            core.store.compact()
            self._send(200, {"compactedResourceVersion": str(core.store.compacted_rv)})
            return True
        return False

    def _metrics_text(self) -> bytes:
        """``apiserver_request_total{verb,resource,subresource}`` in the text exposition
        format (the counter kube-apiserver has under the same name)."""
        lines = [
            "# HELP apiserver_request_total Requests by verb, resource and subresource.",
            "# TYPE apiserver_request_total counter",
        ]
        for (verb, resource, sub), count in sorted(dict(self.server.request_counts).items()):
            lines.append(
                f'apiserver_request_total{{verb="{verb}",resource="{resource}",'
                f'subresource="{sub}"}} {count}'
            )
        return ("\n".join(lines) + "\n").encode()

    def _resource(self, method: str, route: Route, q: dict[str, str], raw: bytes) -> None:
        core = self.server.core
        rt = core.resolve(route.group, route.version, route.plural)
        if rt.namespaced is False and route.namespace is not None:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        ns = route.namespace if rt.namespaced else None
        sub = route.sub
        if sub and sub not in rt.subresources:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        is_watch = q.get("watch") in ("1", "true", "True")
        verb = "watch" if is_watch else _VERBS[method][route.name is None]
        if not sub and verb not in rt.verbs:
            raise ApiError(
                405,
                "the server does not allow this method on the requested resource",
                "MethodNotAllowed",
            )
        if core.faults.active:
            core.faults.before_request(verb, rt.qualified(), route.name or "")
        opts = _write_options(q, core.options.default_field_validation)
        if method == "GET":
            if is_watch:
                serve_watch(self, rt, route, ns, q)
            else:
                self._read(rt, route, ns, q)
        elif method == "POST":
            self._post(rt, route, ns, raw, opts)
        else:
            self._write(method, rt, route, ns, q, raw, opts)

    def _read(self, rt: ResourceType, route: Route, ns: str | None, q: dict[str, str]) -> None:
        core = self.server.core
        if route.name is None:
            listing = core.list_objects(rt, route.version, ns, q)
            self._send_maybe_table(
                rt, route.version, listing["items"], listing["metadata"], q, listing
            )
        else:
            obj = core.get(rt, route.version, ns or "", route.name)
            self._send_maybe_table(rt, route.version, [obj], {}, q, obj)

    def _post(
        self, rt: ResourceType, route: Route, ns: str | None, raw: bytes, opts: WriteOptions
    ) -> None:
        core = self.server.core
        sub = route.sub
        if route.name is not None and sub == "eviction" and rt.key == ("", "pods"):
            self._send(201, eviction.evict(core, ns or "", route.name, self._json_body(raw), opts))
            return
        if route.name is not None and sub == "binding" and rt.key == ("", "pods"):
            self._send(201, core.bind(ns or "", route.name, self._json_body(raw), opts))
            return
        if route.name is not None:
            raise ApiError(
                405, f"POST is not supported on {rt.plural}/{route.name}", "MethodNotAllowed"
            )
        if rt.key in reviews.REVIEW_KINDS:
            # the answer does not depend on the question: a protobuf body is not decoded
            protobuf_body = "protobuf" in (self.headers.get("Content-Type") or "")
            body = {} if protobuf_body else self._json_body(raw)
            answer = reviews.review(
                rt.group, rt.plural, rt.kind, rt.api_version(route.version), body
            )
            self._send(201, answer)
            return
        obj, warnings = core.create(rt, route.version, ns, self._json_body(raw), opts)
        self._send(201, obj, warnings)

    def _write(
        self,
        method: str,
        rt: ResourceType,
        route: Route,
        ns: str | None,
        q: dict[str, str],
        raw: bytes,
        opts: WriteOptions,
    ) -> None:
        """PUT, PATCH and DELETE."""
        core = self.server.core
        if route.name is None and method in ("PUT", "PATCH"):
            raise ApiError(405, f"{method} needs an object name", "MethodNotAllowed")
        name = route.name or ""
        if method == "PUT":
            obj, warnings = core.update(
                rt, route.version, ns, name, self._json_body(raw), opts, route.sub
            )
            self._send(200, obj, warnings)
        elif method == "PATCH":
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if ctype not in _PATCH_TYPES:
                raise ApiError(
                    415,
                    f"the body of the request was in an unknown format - "
                    f"accepted media types include: {', '.join(_PATCH_TYPES)}",
                    "UnsupportedMediaType",
                )
            obj, warnings = core.patch(rt, route.version, ns, name, ctype, raw, opts, route.sub)
            self._send(200, obj, warnings)
        elif method == "DELETE":
            body = self._json_body(raw)
            if route.name is None:
                self._send(200, core.delete_collection(rt, route.version, ns, body, q, opts))
            else:
                self._send(200, core.delete(rt, route.version, ns, name, body, q, opts))

    def table_version(self) -> str | None:
        accept = self.headers.get("Accept") or ""
        if "as=Table" not in accept:
            return None
        return (
            "v1" if "v=v1;" in accept or "v=v1," in accept or accept.endswith("v=v1") else "v1beta1"
        )

    def _send_maybe_table(
        self,
        rt: ResourceType,
        version: str,
        items: list[dict[str, Any]],
        list_meta: dict[str, Any],
        q: dict[str, str],
        plain: Any,
    ) -> None:
        tv = self.table_version()
        if tv is None:
            self._send(200, plain)
            return
        self._send(
            200, to_table(rt, version, items, list_meta, q.get("includeObject", "Metadata"), tv)
        )

    # -- watch -------------------------------------------------------------------------------
    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

    def chunk(self, data: bytes) -> None:
        """Queue one watch event; :meth:`flush_chunks` writes the queued ones in one system call."""
        self.pending.append(b"%x\r\n%s\r\n" % (len(data), data))

    def flush_chunks(self) -> None:
        if self.pending:
            data = b"".join(self.pending)
            self.pending.clear()
            self.wfile.write(data)

    def end_stream(self) -> None:
        self.chunk(b"")
        self.pending[-1] = b"0\r\n\r\n"
        self.flush_chunks()


# the verb of a request by HTTP method, for a named object (False) or a collection (True)
_VERBS: dict[str, dict[bool, str]] = {
    "GET": {False: "get", True: "list"},
    "POST": {False: "create", True: "create"},
    "PUT": {False: "update", True: "update"},
    "PATCH": {False: "patch", True: "patch"},
    "DELETE": {False: "delete", True: "deletecollection"},
}


# 19 digits or more: perhaps an integer beyond 64 bits, which orjson turns into a float
_LONG_NUMBER = re.compile(rb"[0-9]{19}")


def _exact_json(raw: bytes) -> Any:
    """JSON with exact integers (the standard library's parser), so that a number beyond int64
    is seen as such and refused, not rounded to a float."""
    import json

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(raw, parse_constant=no_constant)
    except (ValueError, RecursionError) as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}") from exc


def _quoted(text: str) -> str:
    """The inside of an HTTP quoted-string, as the real server writes a Warning's text."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", " ").replace("\n", " ")


def _write_options(q: dict[str, str], default_field_validation: str) -> WriteOptions:
    opts = WriteOptions(
        dry_run=q.get("dryRun") == "All",
        field_validation=q.get("fieldValidation") or default_field_validation,
        field_manager=q.get("fieldManager"),
        force=q.get("force") in ("true", "1", "True"),
    )
    if opts.field_validation not in ("Strict", "Warn", "Ignore"):
        raise bad_request(
            f"fieldValidation must be one of Strict, Warn, Ignore; got {opts.field_validation!r}"
        )
    return opts

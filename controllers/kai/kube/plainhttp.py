"""A lean HTTP/1.1 client for API servers reached without a proxy, over ``http://`` or TLS.

At thousands of requests per second the client's request path through urllib3 and
``http.client`` costs more CPU than the exchange itself (URL parsing and pool-key
normalisation per request, headers written one ``putheader`` at a time and sent apart from the
body, the response headers parsed by the ``email`` package): about 220-290 us per request
here. This module keeps one keep-alive connection per thread, sends each request with a single
``sendall`` and reads the answer with ``readline``/``read`` on a buffered file: about a third of
that. Over ``https://`` each thread's connection is a TLS one, set up once (the handshake, with
client certificates when the kubeconfig has them, costs the API server milliseconds of CPU; a
bearer token travels in the headers the caller gives). Proxies and watches (long-lived streams)
stay on the official client's urllib3 pool (:class:`kai.kube.client.Kube` decides).
"""

from __future__ import annotations

import socket
import ssl
import threading
from urllib.parse import urlsplit

MAX_HEADER_LINES = 100


class ConnectionLost(Exception):
    """The connection broke. ``reused``: it was a kept-alive connection; ``answered``: the
    server may have seen the request (something other than a clean close came back)."""

    def __init__(self, message: str, *, reused: bool, answered: bool) -> None:
        super().__init__(message)
        self.reused = reused
        self.answered = answered


class PlainHTTP:
    """Requests to one ``http://host:port[/prefix]`` or ``https://...`` server; safe to share
    between threads (each thread has its own keep-alive connection).

    ``tls``: the TLS context for ``https://`` (required there); ``server_hostname``: the name
    the server's certificate is checked against (default: the URL's host)."""

    def __init__(
        self,
        base_url: str,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        if parts.scheme == "https" and tls is None:
            raise ValueError(f"{base_url}: an https URL needs a TLS context")
        self.tls = tls if parts.scheme == "https" else None
        self.server_hostname = server_hostname or parts.hostname
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls is not None else 80)
        self.prefix = parts.path.rstrip("/")
        host_header = parts.netloc.rsplit("@", 1)[-1]
        self._host_line = f"Host: {host_header}\r\n".encode("latin-1")
        self._local = threading.local()

    def close(self) -> None:
        """Close the calling thread's connection (others close when their thread ends)."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            _close(conn)

    def request(
        self,
        method: str,
        target: str,
        header_block: bytes,
        body: bytes | None,
        timeout: float,
    ) -> tuple[int, bytes]:
        """Send one request (``target`` = path and query) and return (status, body).

        ``header_block`` is ``Name: value\\r\\n`` lines (without Host and Content-Length). A
        kept-alive connection that the server closed in the meantime is replaced once; a
        failure after that raises :class:`ConnectionLost`.
        """
        head = b"".join(
            (
                f"{method} {self.prefix}{target} HTTP/1.1\r\n".encode("latin-1"),
                self._host_line,
                header_block,
                b"Content-Length: %d\r\n\r\n" % len(body) if body is not None else b"\r\n",
            )
        )
        data = head + body if body is not None else head
        for attempt in range(2):
            conn = getattr(self._local, "conn", None)
            reused = conn is not None
            if conn is None:
                conn = self._local.conn = self._connect(timeout)
            sock, rfile = conn
            try:
                sock.settimeout(timeout)
                sock.sendall(data)
                status, payload, keep = _read_response(rfile, method)
            except ConnectionLost as exc:
                self.close()
                # an idle keep-alive connection closed by the server: nothing was answered,
                # and the server does not read a request it closed on; try a fresh one once
                if exc.reused and not exc.answered and attempt == 0:
                    continue
                raise
            except (OSError, ValueError) as exc:
                self.close()
                if reused and attempt == 0 and isinstance(exc, (BrokenPipeError, ConnectionError)):
                    continue
                raise ConnectionLost(
                    f"{type(exc).__name__}: {exc}", reused=reused, answered=True
                ) from exc
            if not keep:
                self.close()
            return status, payload
        raise ConnectionLost("connection lost twice", reused=True, answered=False)

    def _connect(self, timeout: float) -> tuple[socket.socket, object]:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=timeout)
        except OSError as exc:
            raise ConnectionLost(
                f"cannot connect to {self.host}:{self.port}: {exc}", reused=False, answered=False
            ) from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            try:
                sock = self.tls.wrap_socket(sock, server_hostname=self.server_hostname)
            except OSError as exc:  # ssl.SSLError included: a refused certificate, a reset
                sock.close()
                raise ConnectionLost(
                    f"TLS with {self.host}:{self.port}: {exc}", reused=False, answered=False
                ) from exc
        return sock, sock.makefile("rb", buffering=65536)


def _close(conn: tuple[socket.socket, object]) -> None:
    sock, rfile = conn
    try:
        rfile.close()  # type: ignore[attr-defined]
    finally:
        sock.close()


def _read_response(rfile: object, method: str) -> tuple[int, bytes, bool]:
    readline = rfile.readline  # type: ignore[attr-defined]
    read = rfile.read  # type: ignore[attr-defined]
    line = readline(65537)
    if not line:
        raise ConnectionLost("the server closed the connection", reused=True, answered=False)
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise ValueError(f"bad status line {line[:80]!r}")
    status = int(parts[1])
    length: int | None = None
    chunked = False
    keep = parts[0] == b"HTTP/1.1"
    for _ in range(MAX_HEADER_LINES):
        header = readline(65537)
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            token = value.strip().lower()
            keep = token != b"close" and (keep or token == b"keep-alive")
    else:
        raise ValueError("too many response headers")
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return status, b"", keep
    if chunked:
        pieces = []
        while True:
            size_line = readline(65537)
            if not size_line:
                raise ValueError("the chunked body ended early")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while readline(65537) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                break
            pieces.append(_read_exact(read, size))
            read(2)
        return status, b"".join(pieces), keep
    if length is not None:
        return status, _read_exact(read, length), keep
    return status, read(), False  # delimited by the end of the connection


def _read_exact(read: object, size: int) -> bytes:
    data: bytes = read(size)  # type: ignore[operator]
    if len(data) != size:
        raise ValueError(f"the body ended after {len(data)} of {size} bytes")
    return data

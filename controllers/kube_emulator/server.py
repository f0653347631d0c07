"""The embedded API server as an object: start it on a port, point clients at it, stop it."""

from __future__ import annotations

import secrets
import ssl
import tempfile
import threading
from pathlib import Path
from typing import Any

from kube_emulator.faults import FaultInjector
from kube_emulator.http import ApiHTTPServer
from kube_emulator.operations import ApiCore
from kube_emulator.options import ServerOptions
from kube_emulator.tls import CertBundle, make_certificates


class ApiServer:
    """An in-process Kubernetes API server.

    >>> with ApiServer() as server:            # doctest: +SKIP
    ...     server.write_kubeconfig("kubeconfig.yaml")
    """

    def __init__(self, options: ServerOptions | None = None, **overrides: Any) -> None:
        opts = options or ServerOptions()
        for key, value in overrides.items():
            if not hasattr(opts, key):
                raise TypeError(f"unknown server option {key!r}")
            setattr(opts, key, value)
        opts.check()
        if opts.require_auth and not opts.token:
            opts.token = secrets.token_urlsafe(32)  # 256 random bits, new at every start
        self.options = opts
        self.core = ApiCore(opts)
        self.certs: CertBundle | None = None
        self._httpd: ApiHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.controllers: Any = None

    # -- life cycle ------------------------------------------------------------------------
    def start(self) -> ApiServer:
        from kube_emulator.gctune import tune_for_large_caches

        tune_for_large_caches()  # the store and its event history grow large: see gctune.py
        httpd = ApiHTTPServer((self.options.host, self.options.port), self.core)
        self.options.port = httpd.server_address[1]
        if self.options.tls:
            self.certs = make_certificates(["localhost"], [self.options.host])
            self._tmp = tempfile.TemporaryDirectory(prefix="kai-apiserver-")
            d = Path(self._tmp.name)
            (d / "tls.crt").write_bytes(self.certs.cert_pem)
            (d / "tls.key").write_bytes(self.certs.key_pem)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(d / "tls.crt"), str(d / "tls.key"))
            ctx.set_alpn_protocols(["http/1.1"])
            httpd.socket = ctx.wrap_socket(
                httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self._httpd = httpd
        self.core.collector.start()
        if self.options.workload_controllers:
            from kube_emulator.controllers import workload_controllers

            self.controllers = workload_controllers(self.core).start()
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="kai-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self.controllers is not None:
            self.controllers.stop()
            self.controllers = None
        if self._httpd is not None:
            self._httpd.stopping = True
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.core.collector.stop()
        self.core.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- access ----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        scheme = "https" if self.options.tls and self.certs is not None else "http"
        host = self.options.host
        if ":" in host:
            host = f"[{host}]"
        return f"{scheme}://{host}:{self.options.port}"

    @property
    def token(self) -> str | None:
        """The bearer token every request needs (None: the server runs without auth)."""
        return self.options.token if self.options.require_auth else None

    def auth_headers(self) -> dict[str, str]:
        """The ``Authorization`` header for a request made without the kubeconfig."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context that trusts this server's certificate (None over plain HTTP)."""
        if self.certs is None:
            return None
        return ssl.create_default_context(cadata=self.certs.ca_pem.decode())

    @property
    def faults(self) -> FaultInjector:
        return self.core.faults

    @property
    def request_count(self) -> int:
        return self._httpd.request_count if self._httpd else 0

    def compact(self) -> None:
        """Forget the event history (watches from older versions get 410 Gone)."""
        self.core.store.compact()

    def write_kubeconfig(self, path: str | Path, context: str = "kai-sim") -> Path:
        from kube_emulator.kubeconfig import write_kubeconfig

        return write_kubeconfig(
            Path(path), self.url, self.certs.ca_pem if self.certs else None, context, self.token
        )

"""Raw REST access to a Kubernetes API through the official client.

The generated model classes of the ``kubernetes`` package are far too slow to deserialise
thousands of pods, so every component here talks JSON: :class:`Kube` takes the client's own
headers (``ApiClient.param_serialize``: the kubeconfig's bearer token or exec plugin) and TLS
settings (CA, client certificate, host-name checks), sends requests over the lean keep-alive
client of :mod:`kai.kube.plainhttp` (the official client's urllib3 pool behind a proxy and for
watches), and reads bodies with orjson into plain dicts.

Errors surface as :class:`ApiError` (an HTTP status with the server's Status body) or
:class:`TransientError` (connection reset, timeout); :mod:`kai.kube.retry` decides what to retry.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import orjson

from kai.kube.plainhttp import ConnectionLost, PlainHTTP

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
AUTH_TTL = 30.0  # seconds the client's auth headers are reused


class KubeError(Exception):
    """Base class of cluster-access errors."""


class ApiError(KubeError):
    """The API server answered with a non-2xx status."""

    def __init__(self, status: int, body: dict[str, Any] | None, what: str) -> None:
        self.status = status
        self.body = body or {}
        self.reason = str(self.body.get("reason") or "")
        message = str(self.body.get("message") or f"HTTP {status}")
        super().__init__(f"{what}: {status} {self.reason}: {message}".replace(":  ", ": "))

    @property
    def message(self) -> str:
        return str(self.body.get("message") or "")


class TransientError(KubeError):
    """The request did not get an answer (connection refused or reset, timeout)."""


class ConfigError(KubeError):
    """No usable kubeconfig or in-cluster configuration."""


@dataclass(frozen=True)
class Resource:
    """A REST resource: ``group``/``version``/``plural`` and whether it lives in namespaces."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if sub:
                base += f"/{sub}"
        return base


def load_api_client(kubeconfig: str | None = None) -> Any:
    """An ``ApiClient`` from ``kubeconfig``; without one: in-cluster config, then $KUBECONFIG,
    then ~/.kube/config. Raises :class:`ConfigError` with the reason when none works."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    if kubeconfig:
        if not os.path.exists(kubeconfig):
            raise ConfigError(f"kubeconfig {kubeconfig}: no such file")
        try:
            return config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        except (ConfigException, OSError, ValueError) as exc:
            raise ConfigError(f"kubeconfig {kubeconfig}: {exc}") from exc
    try:
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        return client.ApiClient(cfg)
    except ConfigException:
        pass
    path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    if not os.path.exists(path):
        raise ConfigError(
            "no cluster configuration: not running in a pod, and no kubeconfig "
            f"(give --kubeconfig FILE or set $KUBECONFIG; {path} does not exist)"
        )
    try:
        return config.new_client_from_config(config_file=path)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError, ValueError) as exc:
        raise ConfigError(f"kubeconfig {path}: {exc}") from exc


def tls_settings(cfg: Any) -> tuple[ssl.SSLContext, str | None]:
    """The TLS context and certificate host name of an ``ApiClient`` configuration, as its
    urllib3 pool uses them: the CA (file or data), the client certificate and key, whether the
    server's certificate is verified, ``tls_server_name`` / ``assert_hostname``.

    Raises :class:`ConfigError` naming the file that cannot be read."""
    verify = bool(getattr(cfg, "verify_ssl", True))
    try:
        ctx = ssl.create_default_context(
            cafile=getattr(cfg, "ssl_ca_cert", None) or None,
            cadata=getattr(cfg, "ca_cert_data", None) or None,
        )
        if getattr(cfg, "cert_file", None):
            ctx.load_cert_chain(cfg.cert_file, getattr(cfg, "key_file", None) or None)
    except (OSError, ssl.SSLError) as exc:
        names = [getattr(cfg, a, None) for a in ("ssl_ca_cert", "cert_file", "key_file")]
        files = ", ".join(str(n) for n in names if n)
        raise ConfigError(f"TLS settings of the kubeconfig ({files or 'no files'}): {exc}") from exc
    assert_hostname = getattr(cfg, "assert_hostname", None)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif assert_hostname is False:
        ctx.check_hostname = False
    ctx.set_alpn_protocols(["http/1.1"])
    server_hostname = getattr(cfg, "tls_server_name", None) or (
        assert_hostname if isinstance(assert_hostname, str) and assert_hostname else None
    )
    return ctx, server_hostname


def _query(params: Mapping[str, Any] | None) -> list[tuple[str, Any]] | None:
    if not params:
        return None
    out = []
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out.append((key, value))
    return out


class Kube:
    """JSON requests over an ``ApiClient``; thread-safe (urllib3 pools connections)."""

    def __init__(self, api_client: Any, request_timeout: float = 30.0) -> None:
        self.api = api_client
        self.request_timeout = request_timeout
        self._auth: tuple[float, dict[str, str]] | None = None
        # urllib3 logs a warning each time it re-opens a keep-alive connection that the server
        # closed after a watch ended; that is routine here, and retried anyway.
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
        # Many worker threads share one client: give the pool room for all of them.
        pool = getattr(api_client.rest_client, "pool_manager", None)
        if pool is not None and hasattr(pool, "connection_pool_kw"):
            pool.connection_pool_kw["maxsize"] = max(
                32, int(pool.connection_pool_kw.get("maxsize") or 0)
            )
        # without a proxy, requests go through the lean client (plainhttp.py), over http:// or
        # TLS with the kubeconfig's certificates; proxies and watches use the official client's
        # urllib3 pool
        self._plain: PlainHTTP | None = None
        self._plain_headers: tuple[dict[str, str], bytes] | None = None
        cfg = api_client.configuration
        host = str(getattr(cfg, "host", "") or "")
        if host.startswith(("http://", "https://")) and not getattr(cfg, "proxy", None):
            tls, server_hostname = (
                tls_settings(cfg) if host.startswith("https://") else (None, None)
            )
            try:
                self._plain = PlainHTTP(host, tls, server_hostname)
            except ValueError:
                self._plain = None

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None) -> Kube:
        return cls(load_api_client(kubeconfig))

    def close(self) -> None:
        if self._plain is not None:
            self._plain.close()
        self.api.close()

    def get_text(self, path: str) -> tuple[int, str]:
        """A GET answered with text (``/metrics``, ``/healthz``): (status, body)."""
        status, payload = self.get_bytes(path)
        return status, payload.decode(errors="replace")

    def get_bytes(self, path: str, params: Mapping[str, Any] | None = None) -> tuple[int, bytes]:
        """A GET answered with anything (a ``/debug/pprof`` profile...): (status, body)."""
        if self._plain is not None:
            return self._plain_request("GET", path, params, None, JSON)
        response = self._send("GET", path, params=params)
        return response.status, response.read()

    # -- plumbing --------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        """The client's own headers (Authorization from the kubeconfig, User-Agent...), asked
        of ``ApiClient.param_serialize`` at most every ``AUTH_TTL`` seconds: a refreshable token
        (exec plugin) is picked up again then, or at once after a 401."""
        now = time.monotonic()
        cached = self._auth
        if cached is None or now - cached[0] > AUTH_TTL:
            _, _, headers, _, _ = self.api.param_serialize(
                "GET", "/", header_params={"Accept": JSON}, auth_settings=["BearerToken"]
            )
            cached = self._auth = (now, dict(headers))
        return cached[1]

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | tuple[float, float] | None = None,
    ) -> Any:
        """One request over the client's connection pool (its TLS, proxy and retry settings).

        The generated request path of the client costs more CPU than the HTTP exchange itself
        at thousands of requests per second (``sanitize_for_serialization`` walks every body and
        header, the stdlib json encodes it): bodies are encoded with orjson and the headers are
        the client's, cached (see :meth:`_headers`).
        """
        import urllib3
        from kubernetes.client.rest import RESTResponse

        query = _query(params)
        url = self.api.configuration.host + path + ("?" + urlencode(query) if query else "")
        data = orjson.dumps(body) if body is not None else None
        limit = timeout if timeout is not None else self.request_timeout
        if isinstance(limit, tuple):
            t = urllib3.Timeout(connect=limit[0], read=limit[1])
        else:
            t = urllib3.Timeout(total=limit)
        for attempt in range(2):
            headers = dict(self._headers())
            if data is not None:
                headers["Content-Type"] = content_type
            try:
                raw = self.api.rest_client.pool_manager.request(
                    method, url, body=data, headers=headers, timeout=t, preload_content=False
                )
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise TransientError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
            if raw.status == 401 and attempt == 0:
                raw.drain_conn()
                raw.release_conn()
                self._auth = None  # the token may have expired: ask the client again
                continue
            return RESTResponse(raw)
        raise AssertionError("unreachable")

    def _plain_request(
        self, method: str, path: str, params: Mapping[str, Any] | None, body: Any, ctype: str
    ) -> tuple[int, bytes]:
        assert self._plain is not None
        query = _query(params)
        target = path + ("?" + urlencode(query) if query else "")
        data = orjson.dumps(body) if body is not None else None
        for attempt in range(2):
            headers = self._headers()
            cached = self._plain_headers
            if cached is None or cached[0] is not headers:
                block = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1")
                cached = self._plain_headers = (headers, block)
            block = cached[1]
            if data is not None:
                block += f"Content-Type: {ctype}\r\n".encode("latin-1")
            try:
                status, payload = self._plain.request(
                    method, target, block, data, self.request_timeout
                )
            except (ConnectionLost, OSError, ValueError) as exc:
                raise TransientError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
            if status == 401 and attempt == 0:
                self._auth = None  # the token may have expired: ask the client again
                continue
            return status, payload
        raise AssertionError("unreachable")

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> dict[str, Any]:
        import urllib3

        if self._plain is not None:
            status, payload = self._plain_request(method, path, params, body, content_type)
            decoded = _decode(payload)
            if not 200 <= status <= 299:
                raise ApiError(status, decoded, f"{method} {path}")
            return decoded or {}
        response = self._send(method, path, params=params, body=body, content_type=content_type)
        try:
            data = response.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransientError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        decoded = _decode(data)
        if not 200 <= response.status <= 299:
            raise ApiError(response.status, decoded, f"{method} {path}")
        return decoded or {}

    # -- verbs -----------------------------------------------------------------------------
    def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self.request("GET", res.path(namespace, name))

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        return self.request(
            "GET",
            res.path(namespace),
            params={
                "labelSelector": label_selector,
                "fieldSelector": field_selector,
                "limit": limit,
                "continue": continue_token,
                "resourceVersion": resource_version,
            },
        )

    def create(self, res: Resource, body: dict[str, Any], namespace: str | None = None) -> Any:
        ns = namespace or (body.get("metadata") or {}).get("namespace")
        return self.request("POST", res.path(ns), body=body)

    def replace(self, res: Resource, body: dict[str, Any], sub: str = "") -> dict[str, Any]:
        md = body["metadata"]
        return self.request("PUT", res.path(md.get("namespace"), md["name"], sub), body=body)

    def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        sub: str = "",
        content_type: str = MERGE_PATCH,
    ) -> dict[str, Any]:
        return self.request(
            "PATCH", res.path(namespace, name, sub), body=patch, content_type=content_type
        )

    def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        grace_period_seconds: int | None = None,
        preconditions: dict[str, str] | None = None,
        propagation_policy: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        if preconditions:
            body["preconditions"] = preconditions
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        return self.request("DELETE", res.path(namespace, name), body=body)

    def bind(
        self, namespace: str, pod: str, node: str, annotations: dict[str, str] | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        if annotations:
            body["metadata"]["annotations"] = annotations
        from kai.kube.resources import PODS

        return self.request("POST", PODS.path(namespace, pod, "binding"), body=body)

    def watch(
        self,
        res: Resource,
        resource_version: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        on_open: Any = None,
        namespace: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Yield watch events (``{"type", "object"}``) until the server ends the stream.

        Raises :class:`ApiError` for an error status on the request itself (410 when the
        version is too old) and :class:`TransientError` when the connection breaks.
        """
        import urllib3

        path = res.path(namespace)
        response = self._send(
            "GET",
            path,
            params={
                "watch": True,
                "resourceVersion": resource_version,
                "allowWatchBookmarks": True,
                "labelSelector": label_selector,
                "fieldSelector": field_selector,
                "timeoutSeconds": timeout_seconds,
            },
            # connect timeout, then a read timeout longer than the bookmark interval
            timeout=(10.0, float(timeout_seconds) + 30.0),
        )
        raw = response.response
        if on_open is not None:
            on_open(raw)  # lets another thread cut the stream (shutdown)
        try:
            if not 200 <= response.status <= 299:
                raise ApiError(response.status, _decode(response.read()), f"WATCH {path}")
            pending = b""
            for chunk in raw.stream(65536, decode_content=True):
                pending += chunk
                if b"\n" not in pending:
                    continue
                lines = pending.split(b"\n")
                pending = lines.pop()
                for line in lines:
                    if line.strip():
                        yield orjson.loads(line)
            if pending.strip():
                yield orjson.loads(pending)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransientError(f"WATCH {path}: {type(exc).__name__}: {exc}") from exc
        except AttributeError as exc:
            # urllib3 reading a chunk after http.client dropped the socket file (fp is None):
            # the stream was closed under it, which is a broken watch like any other
            if "NoneType" not in str(exc):
                raise
            raise TransientError(f"WATCH {path}: the stream was closed: {exc}") from exc
        except orjson.JSONDecodeError as exc:
            raise TransientError(f"WATCH {path}: undecodable event: {exc}") from exc
        finally:
            # a stream left early has unread bytes: the connection cannot be reused
            raw.close()
            raw.release_conn()


def _decode(data: Any) -> dict[str, Any] | None:
    if not data:
        return None
    try:
        value = orjson.loads(data)
    except (orjson.JSONDecodeError, TypeError):
        text = data.decode(errors="replace") if isinstance(data, bytes) else str(data)
        return {"message": text[:500]}
    return value if isinstance(value, dict) else {"items": value}

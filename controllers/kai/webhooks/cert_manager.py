"""Where the serving certificate comes from, and how it is kept fresh.

- :class:`SecretCerts` (self-managed): a CA and a serving certificate kept in a Secret
  (``ca.crt``, ``ca.key``, ``tls.crt``, ``tls.key`` and ``ca-bundle.crt``, every CA still
  trusted). Every replica reads the Secret; whoever finds it missing or due writes it with
  optimistic concurrency (a 409 means another replica won: read again). A restart reuses the
  stored certificates, so a restarted replica serves at once with a certificate the API server
  already trusts. The trusted bundle is handed to ``publish`` (which patches the ``caBundle``
  of the webhook configurations) before any certificate signed by a new CA is served.
- :class:`FileCerts` (provided, e.g. cert-manager): ``tls.crt`` / ``tls.key`` (and optionally
  ``ca.crt``) in a directory, typically a mounted Secret; reloaded when the files change.

Both call ``on_change(cert_pem, key_pem)`` whenever the serving pair changes.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kai.kube.client import ApiError, Kube, KubeError, Resource
from kai.webhooks import certs
from kai.webhooks.certs import CertBundle, KeyPair

log = logging.getLogger("kai.webhook.certs")

SECRETS = Resource("", "v1", "secrets", True, "Secret")
CA_SINCE = "kai.scheduler/ca-since"  # when the signing CA was added to the trusted bundle

OnChange = Callable[[bytes, bytes], None]
Publish = Callable[[bytes], None]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(data: dict[str, Any], key: str) -> bytes:
    raw = data.get(key)
    try:
        return base64.b64decode(raw) if isinstance(raw, str) else b""
    except ValueError:
        return b""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class SecretCerts:
    """Self-managed certificates in a Secret, rotated before they expire."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        secret: str,
        hosts: Sequence[str],
        *,
        cert_validity: dt.timedelta = dt.timedelta(days=365),
        ca_validity: dt.timedelta = dt.timedelta(days=3650),
        publish: Publish | None = None,
        on_change: OnChange | None = None,
        publish_delay: float = 10.0,
        check_period: float | None = None,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.secret = secret
        self.hosts = list(dict.fromkeys(hosts))
        self.cert_validity = cert_validity
        self.ca_validity = ca_validity
        self.publish = publish or (lambda bundle: None)
        self.on_change = on_change or (lambda cert, key: None)
        self.publish_delay = publish_delay
        # look often enough that a third of the validity is never missed
        self.check_period = check_period or max(0.5, min(60.0, cert_validity.total_seconds() / 12))
        self.current: KeyPair | None = None
        self.trusted = b""
        self.rotations = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- one pass --------------------------------------------------------------------------
    def ensure(self) -> CertBundle:
        """Read the Secret, renew what is due, write it back, publish the bundle, serve."""
        for _attempt in range(5):
            stored = self._read()
            bundle, since, changed = self._plan(stored)
            if changed:
                try:
                    self._write(stored, bundle, since)
                except ApiError as exc:
                    # another replica wrote (or deleted) it; a 404 on create is a missing
                    # namespace, which reading again cannot fix
                    if exc.status == 409 or (exc.status == 404 and stored is not None):
                        log.info("certificate Secret changed under us (%s); reading again", exc)
                        continue
                    raise
                log.info(
                    "certificate Secret %s/%s written (serving certificate valid until %s)",
                    self.namespace,
                    self.secret,
                    certs.not_after(bundle.serving.cert),
                )
            self.trusted = bundle.trusted
            self.publish(bundle.trusted)
            if self.current != bundle.serving:
                if self.current is not None:
                    self.rotations += 1
                self.current = bundle.serving
                self.on_change(bundle.serving.cert, bundle.serving.key)
            return bundle
        raise KubeError(f"certificate Secret {self.namespace}/{self.secret}: too many conflicts")

    def _read(self) -> dict[str, Any] | None:
        try:
            return self.kube.get(SECRETS, self.secret, self.namespace)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def _plan(self, stored: dict[str, Any] | None) -> tuple[CertBundle, str, bool]:
        now = _now()
        data = (stored or {}).get("data") or {}
        annotations = ((stored or {}).get("metadata") or {}).get("annotations") or {}
        ca = KeyPair(_unb64(data, "ca.crt"), _unb64(data, "ca.key"))
        serving = KeyPair(_unb64(data, "tls.crt"), _unb64(data, "tls.key"))
        trusted = _unb64(data, "ca-bundle.crt") or ca.cert
        since = str(annotations.get(CA_SINCE) or "")
        changed = False
        if not certs.load_certs(ca.cert) or not ca.key:
            ca = certs.new_ca(f"kai-webhook-ca@{int(now.timestamp())}", self.ca_validity)
            trusted, since, changed = ca.cert, now.isoformat(), True
        elif certs.renew_due(ca.cert, now):
            ca = certs.new_ca(f"kai-webhook-ca@{int(now.timestamp())}", self.ca_validity)
            trusted, since, changed = ca.cert + trusted, now.isoformat(), True
        pruned = certs.trusted_bundle([trusted], now)
        if pruned != trusted:
            trusted, changed = pruned, True
        serving_ok = (
            bool(serving.key)
            and not certs.renew_due(serving.cert, now, 1 / 3)
            and set(self.hosts) <= certs.cert_hosts(serving.cert)
            and any(certs.signed_by(serving.cert, c) for c in _split(trusted))
        )
        signed_by_current = serving_ok and certs.signed_by(serving.cert, ca.cert)
        if not serving_ok or not signed_by_current:
            # the signing CA is trusted by now if the bundle has had time to spread, or if the
            # certificate in use already comes from it
            published_long_enough = _age(since, now) >= self.publish_delay or (
                certs.signed_by(serving.cert, ca.cert)
            )
            still_usable = (
                bool(serving.key)
                and certs.load_certs(serving.cert)
                and (certs.not_after(serving.cert) or now) > now
                and any(certs.signed_by(serving.cert, c) for c in _split(trusted))
                and set(self.hosts) <= certs.cert_hosts(serving.cert)
            )
            # A certificate signed by a CA the API server may not trust yet is held back while
            # the current one still works; with nothing usable it is issued at once.
            if not serving_ok and (published_long_enough or not still_usable):
                serving = certs.new_serving(ca, self.hosts, self.cert_validity)
                changed = True
            elif serving_ok and not signed_by_current and published_long_enough:
                # move to the new CA ahead of time, once the bundle had time to spread
                serving = certs.new_serving(ca, self.hosts, self.cert_validity)
                changed = True
        return CertBundle(ca, serving, trusted), since, changed

    def _write(self, stored: dict[str, Any] | None, bundle: CertBundle, since: str) -> None:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": self.secret,
                "namespace": self.namespace,
                "labels": {
                    "app.kubernetes.io/managed-by": "kai",
                    "app.kubernetes.io/part-of": "kai",
                },
                "annotations": {CA_SINCE: since},
            },
            "data": {
                "ca.crt": _b64(bundle.ca.cert),
                "ca.key": _b64(bundle.ca.key),
                "tls.crt": _b64(bundle.serving.cert),
                "tls.key": _b64(bundle.serving.key),
                "ca-bundle.crt": _b64(bundle.trusted),
            },
        }
        if stored is None:
            self.kube.create(SECRETS, body, self.namespace)
        else:
            body["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
            self.kube.replace(SECRETS, body)

    # -- the loop --------------------------------------------------------------------------
    def start(self) -> SecretCerts:
        self._thread = threading.Thread(target=self._run, name="webhook-certs", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.check_period):
            try:
                self.ensure()
            except Exception as exc:  # keep serving the current certificate; try again
                log.warning("certificate check failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def _split(bundle: bytes) -> list[bytes]:
    from cryptography.hazmat.primitives import serialization

    return [c.public_bytes(serialization.Encoding.PEM) for c in certs.load_certs(bundle)]


def _age(since: str, now: dt.datetime) -> float:
    try:
        when = dt.datetime.fromisoformat(since)
    except ValueError:
        return float("inf")
    return (now - when).total_seconds()


class FileCerts:
    """A provided certificate (``tls.crt``, ``tls.key``, optional ``ca.crt``) in a directory."""

    def __init__(
        self, directory: str, *, on_change: OnChange | None = None, check_period: float = 5.0
    ) -> None:
        self.directory = directory
        self.on_change = on_change or (lambda cert, key: None)
        self.check_period = check_period
        self.current: KeyPair | None = None
        self.trusted = b""
        self.rotations = 0
        self._stamp: tuple[float, ...] = ()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _paths(self) -> tuple[str, str, str]:
        return tuple(os.path.join(self.directory, n) for n in ("tls.crt", "tls.key", "ca.crt"))  # type: ignore[return-value]

    def ensure(self) -> KeyPair:
        cert_path, key_path, ca_path = self._paths()
        try:
            stamp = tuple(os.stat(p).st_mtime for p in (cert_path, key_path))
            with open(cert_path, "rb") as f:
                cert = f.read()
            with open(key_path, "rb") as f:
                key = f.read()
        except OSError as exc:
            raise ValueError(
                f"--cert-dir {self.directory}: cannot read {exc.filename}: {exc.strerror} "
                "(the directory must hold tls.crt and tls.key)"
            ) from exc
        if not certs.load_certs(cert):
            raise ValueError(f"--cert-dir {self.directory}: tls.crt holds no PEM certificate")
        try:
            with open(ca_path, "rb") as f:
                self.trusted = f.read()
        except OSError:
            self.trusted = b""
        pair = KeyPair(cert, key)
        if pair != self.current:
            if self.current is not None:
                self.rotations += 1
            self.current = pair
            self._stamp = stamp
            self.on_change(cert, key)
        return pair

    def start(self) -> FileCerts:
        self._thread = threading.Thread(target=self._run, name="webhook-certs", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.check_period):
            try:
                self.ensure()
            except Exception as exc:
                log.warning("cannot reload the certificate: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

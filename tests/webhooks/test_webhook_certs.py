"""Self-managed certificates: issued, kept in a Secret, reused after a restart, rotated with the
new CA published before it signs anything; and the HTTPS server swapping its certificate under
load without a failed request."""

from __future__ import annotations

import base64
import datetime as dt
import ssl
import threading
import time
import urllib.request
from typing import Any

import orjson
from cryptography import x509

from kai.kube.client import ApiError
from kai.webhooks import certs
from kai.webhooks.cert_manager import SecretCerts
from kai.webhooks.review import Verdict
from kai.webhooks.server import AdmissionServer


class SecretStore:
    """A Kube double holding Secrets, with resourceVersion conflicts as the API server has."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0

    def get(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        found = self.secrets.get((namespace or "", name))
        if found is None:
            raise ApiError(404, {"reason": "NotFound"}, "get")
        return orjson.loads(orjson.dumps(found))

    def create(self, res: Any, body: dict[str, Any], namespace: str | None = None) -> Any:
        key = (namespace or "", body["metadata"]["name"])
        if key in self.secrets:
            raise ApiError(409, {"reason": "AlreadyExists"}, "create")
        return self._store(key, body)

    def replace(self, res: Any, body: dict[str, Any], sub: str = "") -> Any:
        md = body["metadata"]
        key = (md["namespace"], md["name"])
        if self.secrets[key]["metadata"]["resourceVersion"] != md.get("resourceVersion"):
            raise ApiError(409, {"reason": "Conflict"}, "replace")
        return self._store(key, body)

    def _store(self, key: tuple[str, str], body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = orjson.loads(orjson.dumps(body))
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.secrets[key] = stored
        return stored


def _manager(store: SecretStore, **kwargs: Any) -> SecretCerts:
    published: list[bytes] = kwargs.pop("published", [])
    return SecretCerts(
        store,  # type: ignore[arg-type]
        "kai-scheduler",
        "kai-webhook-certs",
        ["kai-webhook.kai-scheduler.svc", "127.0.0.1"],
        publish=published.append,
        **kwargs,
    )


def test_issued_once_reused_after_a_restart() -> None:
    store = SecretStore()
    first = _manager(store).ensure()
    assert certs.signed_by(first.serving.cert, first.ca.cert)
    assert {"kai-webhook.kai-scheduler.svc", "127.0.0.1"} <= certs.cert_hosts(first.serving.cert)
    version = store.version
    restarted = _manager(store).ensure()
    assert restarted.serving == first.serving and store.version == version


def test_a_second_replica_racing_the_first_ends_with_the_same_certificate() -> None:
    store = SecretStore()
    a, b = _manager(store), _manager(store)
    original = store.create
    calls = []

    def racing_create(res: Any, body: dict[str, Any], namespace: str | None = None) -> Any:
        if not calls:  # b writes between a's read and a's create
            calls.append(1)
            b.ensure()
        return original(res, body, namespace)

    store.create = racing_create  # type: ignore[method-assign]
    bundle = a.ensure()
    assert bundle.serving == b.current


def test_serving_certificate_renewed_with_a_third_left() -> None:
    store = SecretStore()
    manager = _manager(store, cert_validity=dt.timedelta(seconds=3))
    first = manager.ensure()
    assert manager.ensure().serving == first.serving
    time.sleep(2.2)
    renewed = manager.ensure()
    assert renewed.serving != first.serving and manager.rotations == 1
    assert renewed.ca == first.ca  # same CA: trusted at once


def test_a_new_ca_is_published_before_it_signs() -> None:
    store = SecretStore()
    published: list[bytes] = []
    manager = _manager(
        store,
        ca_validity=dt.timedelta(seconds=6),
        cert_validity=dt.timedelta(seconds=60),
        publish_delay=1.0,
        published=published,
    )
    first = manager.ensure()
    time.sleep(4.2)  # the CA has less than a third left: a new one is made
    second = manager.ensure()
    assert second.ca != first.ca
    # both CAs are trusted, the old serving certificate is still served
    assert len(certs.load_certs(published[-1])) == 2
    assert second.serving == first.serving
    time.sleep(1.2)  # the bundle has been published for publish_delay
    third = manager.ensure()
    assert certs.signed_by(third.serving.cert, second.ca.cert)


def _ca_and_server(validity: float = 60.0) -> tuple[certs.KeyPair, AdmissionServer]:
    ca = certs.new_ca("test-ca", dt.timedelta(hours=1))
    serving = certs.new_serving(ca, ["127.0.0.1"], dt.timedelta(seconds=validity))

    def handler(req: Any) -> Verdict:
        return Verdict(warnings=[req.kind])

    server = AdmissionServer({"/v": ("test", handler)}, port=0, host="127.0.0.1", workers=8)
    server.set_certificate(serving.cert, serving.key)
    return ca, server.start()


def _post(port: int, ca: bytes) -> dict[str, Any]:
    context = ssl.create_default_context(cadata=ca.decode())
    body = orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "1", "kind": {"kind": "Pod"}, "operation": "CREATE"},
        }
    )
    req = urllib.request.Request(
        f"https://127.0.0.1:{port}/v", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, context=context, timeout=5) as resp:
        return orjson.loads(resp.read())  # type: ignore[no-any-return]


def test_server_swaps_its_certificate_under_load_without_a_failed_request() -> None:
    ca, server = _ca_and_server()
    failures: list[BaseException] = []
    answered = [0]
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                assert _post(server.port, ca.cert)["response"]["warnings"] == ["Pod"]
                answered[0] += 1
            except BaseException as exc:
                failures.append(exc)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    serials = set()
    for _ in range(5):
        time.sleep(0.3)
        fresh = certs.new_serving(ca, ["127.0.0.1"], dt.timedelta(minutes=5))
        serials.add(x509.load_pem_x509_certificate(fresh.cert).serial_number)
        server.set_certificate(fresh.cert, fresh.key)
    time.sleep(0.3)
    stop.set()
    for t in threads:
        t.join()
    seen = ssl.get_server_certificate(("127.0.0.1", server.port))
    server.stop()
    assert not failures, failures[:3]
    assert answered[0] > 20
    assert x509.load_pem_x509_certificate(seen.encode()).serial_number in serials
    text = server.metrics.registry.exposition()
    assert 'kai_webhook_requests_total{verdict="warned",webhook="test"}' in text


def test_server_answers_bad_requests_with_400() -> None:
    ca, server = _ca_and_server()
    try:
        context = ssl.create_default_context(cadata=ca.cert.decode())
        req = urllib.request.Request(f"https://127.0.0.1:{server.port}/v", b"{}")
        try:
            urllib.request.urlopen(req, context=context, timeout=5)
            raise AssertionError("expected HTTP 400")
        except urllib.error.HTTPError as exc:
            assert exc.code == 400
            assert b"not an AdmissionReview" in exc.read()
    finally:
        server.stop()


def test_trusted_bundle_drops_expired_cas() -> None:
    old = certs.new_ca("old", dt.timedelta(seconds=1))
    new = certs.new_ca("new", dt.timedelta(hours=1))
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
    bundle = certs.trusted_bundle([new.cert + old.cert], later)
    assert [c.subject for c in certs.load_certs(bundle)] == [
        c.subject for c in certs.load_certs(new.cert)
    ]
    assert base64.b64encode(bundle)

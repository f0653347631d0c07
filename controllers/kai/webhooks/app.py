"""``kai webhook`` assembled: certificates, caches, the HTTPS server, (self-)registration.

Start order, so that the API server never calls an address that cannot answer:

1. certificates (from ``--cert-dir``, or the Secret: created or reused, ``caBundle``
   published to the configurations that exist);
2. the informer caches the pod webhooks read;
3. the HTTPS server listens;
4. with ``--self-register URL``: the two configurations are created or replaced, pointing at
   the URL, with the CA bundle.

``/readyz`` answers 200 once all of that is done, and while the server's work queue has room.
On a clean stop the configurations are removed first (self-registration only), then the server
stops.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from kai.kube.client import Kube
from kai.metrics import MetricsServer
from kai.webhooks import registration
from kai.webhooks.cert_manager import FileCerts, SecretCerts
from kai.webhooks.cluster import ClusterView
from kai.webhooks.granian_server import GranianAdmissionServer
from kai.webhooks.podgroups import PodGroupValidator
from kai.webhooks.pods import PodMutator, PodValidator
from kai.webhooks.policies import PolicyValidator
from kai.webhooks.server import AdmissionServer, Limits, Route, WebhookMetrics

log = logging.getLogger("kai.webhook")


@dataclass
class Options:
    port: int = 9443
    host: str = "0.0.0.0"
    metrics_port: int = 0
    namespace: str = "kai-scheduler"
    service_name: str = "kai-webhook"
    self_register: str | None = None
    cert_dir: str | None = None
    cert_secret: str = "kai-webhook-certs"
    cert_validity: dt.timedelta = dt.timedelta(days=365)
    ca_validity: dt.timedelta = dt.timedelta(days=3650)
    scheduler_name: str = "kai-scheduler"
    gpu_runtime_class: str = ""
    workers: int = 64
    publish_delay: float = 10.0
    server_backend: str = "python"
    limits: Limits = field(default_factory=Limits)
    kai_queue_rules: str = "enforce"


#: ``--server-backend``: the HTTPS layer. granian (Rust: TLS and HTTP/2 compiled) is the
#: default; python (ssl + h2, :mod:`kai.webhooks.server`) needs no compiled package beyond
#: Python's own and is kept as the fallback.
SERVER_BACKENDS = ("granian", "python")


def serving_hosts(opts: Options) -> list[str]:
    """The names the serving certificate must carry: the Service's, the URL's host, loopback."""
    svc, ns = opts.service_name, opts.namespace
    hosts = [f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local", f"{svc}.{ns}", svc]
    if opts.self_register:
        host = urlsplit(opts.self_register).hostname
        if host:
            hosts.insert(0, host)
    hosts += ["localhost", "127.0.0.1"]
    return list(dict.fromkeys(hosts))


class WebhookApp:
    def __init__(self, kube: Kube, opts: Options, *, watch: bool = True) -> None:
        self.kube = kube
        self.opts = opts
        self.metrics = WebhookMetrics()
        self.cluster = ClusterView(kube, watch=watch)
        routes: dict[str, Route] = {
            "/validate/policies": (
                registration.PATHS["/validate/policies"],
                PolicyValidator(self.cluster, kai_queue_rules=opts.kai_queue_rules),
            ),
            "/validate/podgroups": (
                registration.PATHS["/validate/podgroups"],
                PodGroupValidator(self.cluster),
            ),
        }
        # the pod webhooks, called for every pod of kai, answer from the informer caches on
        # the connection's thread (AdmissionServer.answer_inline); the others read the cluster
        # live, on the pool
        pod_validator = PodValidator(self.cluster, scheduler_name=opts.scheduler_name)
        pod_mutator = PodMutator(
            self.cluster,
            scheduler_name=opts.scheduler_name,
            gpu_runtime_class=opts.gpu_runtime_class,
        )
        routes["/validate/pods"] = ("pods.validate", pod_validator, pod_validator.from_cache)
        routes["/mutate/pods"] = ("pods.mutate", pod_mutator, pod_mutator)
        self.server: AdmissionServer | GranianAdmissionServer
        if opts.server_backend == "granian":
            self.server = GranianAdmissionServer(
                routes,
                port=opts.port,
                host=opts.host,
                workers=opts.workers,
                metrics=self.metrics,
                limits=opts.limits,
            )
        elif opts.server_backend == "python":
            self.server = AdmissionServer(
                routes,
                port=opts.port,
                host=opts.host,
                workers=opts.workers,
                metrics=self.metrics,
                limits=opts.limits,
            )
        else:
            choices = ", ".join(SERVER_BACKENDS)
            raise ValueError(f"server backend {opts.server_backend!r}: choose one of {choices}")
        self.certs: SecretCerts | FileCerts
        if opts.cert_dir:
            self.certs = FileCerts(opts.cert_dir, on_change=self._serve_certificate)
        else:
            self.certs = SecretCerts(
                kube,
                opts.namespace,
                opts.cert_secret,
                serving_hosts(opts),
                cert_validity=opts.cert_validity,
                ca_validity=opts.ca_validity,
                publish=self._publish,
                on_change=self._serve_certificate,
                publish_delay=opts.publish_delay,
            )
        self.health: MetricsServer | None = None  # /metrics, /healthz, /readyz
        if opts.metrics_port > 0:
            self.health = MetricsServer(
                [self.metrics.registry], opts.metrics_port, ready=self.ready
            )
        self.registered = False
        self._health_started = False
        self._started = threading.Event()

    # -- certificates ----------------------------------------------------------------------
    def _serve_certificate(self, cert: bytes, key: bytes) -> None:
        self.server.set_certificate(cert, key)
        self.metrics.cert_rotations.set(self.certs.rotations)
        log.info("serving certificate loaded")

    def _publish(self, bundle: bytes) -> None:
        registration.publish_ca_bundle(self.kube, bundle)

    def ca_bundle(self) -> bytes:
        return self.certs.trusted

    # -- life cycle ------------------------------------------------------------------------
    def ready(self) -> bool:
        return (
            self._started.is_set()
            and self.server.has_certificate
            and not self.server.saturated  # new work would be refused: send it elsewhere
            and self.cluster.synced()
            and (self.registered or not self.opts.self_register)
        )

    def start(self, sync_timeout: float = 60.0) -> WebhookApp:
        if self.health is not None:
            self.health.start()
            self._health_started = True
        self.certs.ensure()
        self.cluster.start()
        if not self.cluster.wait_synced(sync_timeout):
            raise TimeoutError(f"the caches did not sync within {sync_timeout:g}s")
        self.server.start()
        self.certs.start()
        if self.opts.self_register:
            self.register()
        self._started.set()
        log.info("kai webhook serving HTTPS on %s:%d", self.opts.host, self.server.port)
        return self

    def register(self) -> None:
        assert self.opts.self_register
        objects = registration.configurations(
            {"url": self.opts.self_register},
            self.ca_bundle(),
            namespace=self.opts.namespace,
            scheduler_name=self.opts.scheduler_name,
            gpu_runtime_class=self.opts.gpu_runtime_class,
        )
        registration.apply(self.kube, objects)
        self.registered = True
        log.info(
            "registered webhook configurations %s at %s", registration.NAME, self.opts.self_register
        )

    def stop(self) -> None:
        if self.registered:
            try:
                registration.remove(self.kube)
                log.info("removed webhook configurations %s", registration.NAME)
            except Exception as exc:
                log.warning("could not remove the webhook configurations: %s", exc)
            self.registered = False
        self.certs.stop()
        self.server.stop()
        self.cluster.stop()
        if self.health is not None and self._health_started:
            self.health.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

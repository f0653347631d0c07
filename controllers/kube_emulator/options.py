"""Server settings (all have defaults; `kai apiserver` exposes the common ones as flags)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 0  # 0 = any free port
    tls: bool = False
    # How to treat unknown fields when a request does not say (?fieldValidation=...).
    # A real server's default is Warn; the embedded one is stricter by default so that code
    # developed against it does not silently lose fields on a real cluster.
    default_field_validation: str = "Strict"
    # Deleting a pod bound to a node (grace period > 0): "kubelet" keeps it with a
    # deletionTimestamp until a kubelet (the simulated one) deletes it again with grace 0;
    # "immediate" removes it at once, as if the kubelet had acknowledged instantly.
    pod_deletion: str = "kubelet"
    # The TaintNodesByCondition admission plugin: new nodes start tainted not-ready:NoSchedule.
    taint_new_nodes: bool = True
    history_size: int = 50_000  # retained watch events (the "etcd compaction" window)
    bookmark_interval: float = 5.0  # seconds between BOOKMARK events on an idle watch
    default_watch_timeout: float = 1800.0  # seconds when the client gives no timeoutSeconds
    # After sending, a watch waits this long before looking for more events, so that a busy
    # stream sends batches (one wake-up and one socket write per batch instead of per event);
    # an event waits at most this long. 0 = send every event as soon as it is committed.
    watch_batch_delay: float = 0.005
    # service reference "namespace/name[:port]" -> "host:port" where that webhook listens
    webhook_services: dict[str, str] = field(default_factory=dict)
    git_version: str = "v1.36.0-kai.sim"
    # Run the Job, ReplicaSet, Deployment and StatefulSet controllers (kube_emulator.controllers)
    # so that those workloads get pods, as kube-controller-manager does on a real cluster.
    workload_controllers: bool = False
    seed: int = 0
    # Authentication: every request but /healthz, /livez, /readyz and /version must carry
    # "Authorization: Bearer TOKEN" (401 otherwise, as kube-apiserver without anonymous auth).
    # An empty token is replaced by a random one at start; the kubeconfig carries it.
    require_auth: bool = True
    token: str = ""
    # The emulator's own endpoints /kai-sim/faults and /kai-sim/compact (404 unless enabled).
    enable_test_endpoints: bool = False
    # Connections: at most this many open at once (the oldest idle one is closed to make room
    # for a new one; with none idle, the new one gets a 503). Lowered to what the process's
    # file-descriptor limit allows.
    max_connections: int = 1024
    idle_timeout: float = 60.0  # seconds a kept-alive connection may wait for its next request
    header_timeout: float = 30.0  # seconds for a request's line and headers, from its first byte
    body_timeout: float = 60.0  # seconds to receive a request's body
    # Persist objects and the resourceVersion counter here (None: in memory only; a restart
    # loses every object).
    data_dir: str | None = None

    def check(self) -> None:
        """Raise ValueError naming the first setting that cannot work."""
        if self.default_field_validation not in ("Strict", "Warn", "Ignore"):
            raise ValueError(
                "default_field_validation must be Strict, Warn or Ignore, not "
                f"{self.default_field_validation!r}"
            )
        if self.pod_deletion not in ("kubelet", "immediate"):
            raise ValueError(
                f"pod_deletion must be kubelet or immediate, not {self.pod_deletion!r}"
            )
        if self.history_size < 1:
            raise ValueError(f"history_size must be at least 1, not {self.history_size}")
        if not 0 <= self.watch_batch_delay <= 1:
            raise ValueError(
                f"watch_batch_delay must be between 0 and 1 second, not {self.watch_batch_delay}"
            )
        if self.bookmark_interval <= 0 or self.default_watch_timeout <= 0:
            raise ValueError("bookmark_interval and default_watch_timeout must be positive")
        if self.max_connections < 2:
            raise ValueError(f"max_connections must be at least 2, not {self.max_connections}")
        for name in ("idle_timeout", "header_timeout", "body_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)}")
        if self.token and not all(33 <= ord(c) < 127 for c in self.token):
            raise ValueError("token must be printable ASCII without spaces")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be between 0 and 65535, not {self.port}")

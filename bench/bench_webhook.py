"""Admission latency of ``kai webhook`` as the real kube-apiserver sees it (issue 13).

Open-loop load: pod creates (``dryRun=All``: the whole admission chain, no etcd write) sent at
a fixed rate, each pod a fractional-GPU pod for kai (so both pod webhooks run on every request:
the mutation and the validation). Each round has two phases at the same rate: pods for
another scheduler (which the webhooks' match condition leaves out: the API server alone) and
pods for kai, so the difference is what the webhook adds. Latency is measured
from the moment a request was *due* (no coordinated omission).

Three views of the same run:

- client: the pod create's round trip, with and without the webhook;
- the API server's own histogram ``apiserver_admission_webhook_admission_duration_seconds``
  (its buckets are coarse: 5, 25, 100 ms ...);
- the webhook's ``kai_webhook_request_duration_milliseconds`` (arrival to answer).

    .venv/bin/python bench/bench_webhook.py                    # starts a real control plane
                                                               # (up.sh/down.sh in $KAI_REAL_K8S)
    .venv/bin/python bench/bench_webhook.py --kubeconfig FILE  # or uses a running one
    .venv/bin/python bench/bench_webhook.py --rate 500 --seconds 20

``kai webhook`` runs as its own process (as in a cluster); the load comes from two more.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _histogram(text: str, metric: str, match: str) -> dict[float, float]:
    """Cumulative bucket counts ``le -> count`` of the series whose labels contain ``match``."""
    out: dict[float, float] = {}
    for line in text.splitlines():
        if not line.startswith(metric + "_bucket{") or match not in line:
            continue
        le = re.search(r'le="([^"]+)"', line)
        if le is None:
            continue
        bound = float("inf") if le[1] == "+Inf" else float(le[1])
        out[bound] = out.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def _delta(after: dict[float, float], before: dict[float, float]) -> dict[float, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def _bucket_share(hist: dict[float, float], bound: float) -> str:
    total = hist.get(float("inf"), 0.0)
    if not total:
        return "-"
    under = max((v for k, v in hist.items() if k <= bound), default=0.0)
    return f"{100 * under / total:.2f} %"


def _bucket_quantile(hist: dict[float, float], q: float) -> float:
    """The upper bound of the bucket holding quantile ``q`` (what buckets can tell)."""
    total = hist.get(float("inf"), 0.0)
    for bound in sorted(hist):
        if hist[bound] >= q * total:
            return bound
    return float("inf")


def _pod(namespace: str, scheduler: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"bench-{uuid.uuid4().hex[:10]}",
            "namespace": namespace,
            "annotations": {"gpu-fraction": "0.5"},
        },
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


def _load_part(
    kubeconfig: str,
    rate: float,
    total: int,
    workers: int,
    scheduler: str,
    start: float,
    offset: int,
    stride: int,
) -> tuple[list[float], list[str]]:
    """Requests ``offset, offset + stride, ...`` of the schedule, from one process."""
    sys.path.insert(0, str(ROOT / "controllers"))
    from kai.kube.client import Kube
    from kai.kube.resources import PODS

    kube = Kube.from_kubeconfig(kubeconfig)
    kube.api.rest_client.pool_manager.connection_pool_kw["maxsize"] = workers
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        due = start + i / rate
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        try:
            body = _pod("team-nlp", scheduler)
            kube.request("POST", PODS.path("team-nlp"), params={"dryRun": "All"}, body=body)
        except Exception as exc:
            with lock:
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
            return
        took = (time.time() - due) * 1000
        with lock:
            latencies.append(took)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for i in range(offset, total, stride):
            pool.submit(one, i)
    kube.close()
    return latencies, errors


def run_load(
    kubeconfig: str,
    rate: float,
    seconds: float,
    workers: int,
    scheduler: str = "kai-scheduler",
    processes: int = 2,
) -> dict[str, Any]:
    """Open-loop: request i is due at start + i / rate, spread over ``processes``."""
    from concurrent.futures import ProcessPoolExecutor

    total = int(rate * seconds)
    start = time.time() + 1.0
    latencies: list[float] = []
    errors: list[str] = []
    with ProcessPoolExecutor(max_workers=processes) as pool:
        parts = [
            pool.submit(
                _load_part, kubeconfig, rate, total, workers, scheduler, start, k, processes
            )
            for k in range(processes)
        ]
        for part in parts:
            got, failed = part.result()
            latencies += got
            errors += failed
    elapsed = time.time() - start
    return {
        "sent": total,
        "rate": total / elapsed,
        "errors": errors,
        "p50": _percentile(latencies, 0.50),
        "p90": _percentile(latencies, 0.90),
        "p99": _percentile(latencies, 0.99),
        "max": max(latencies, default=float("nan")),
    }


def _start_cluster(state: Path) -> Path:
    scripts = Path(os.environ.get("KAI_REAL_K8S") or ROOT.parent / "shared" / "real-k8s")
    if not (scripts / "up.sh").is_file():
        raise SystemExit("no real control plane here: give --kubeconfig FILE")
    subprocess.run(["bash", str(scripts / "up.sh"), str(state)], check=True, capture_output=True)
    return state / "kubeconfig"


def _stop_cluster(state: Path) -> None:
    scripts = Path(os.environ.get("KAI_REAL_K8S") or ROOT.parent / "shared" / "real-k8s")
    subprocess.run(
        ["bash", str(scripts / "down.sh"), str(state), "--wipe"], capture_output=True, check=False
    )


def _prepare(kube: Any) -> None:
    from kai.kube.client import ApiError
    from kai.kube.resources import NAMESPACES
    from kai.sim.system import bootstrap

    bootstrap(kube)
    for ns in ("team-nlp",):
        try:
            kube.create(NAMESPACES, {"metadata": {"name": ns}})
        except ApiError as exc:
            if exc.status != 409:
                raise


def _connections(text: str) -> float:
    """TLS connections the webhook accepted so far, every protocol (h2, http/1.1) summed."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("kai_webhook_connections_total")
    )


def _wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"kai webhook exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("kai webhook not ready")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", help="a running cluster (default: start one)")
    parser.add_argument("--rate", type=float, default=500.0, help="pod creates per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument("--workers", type=int, default=32, help="client threads per load process")
    parser.add_argument("--processes", type=int, default=2, help="load processes")
    parser.add_argument("--repeat", type=int, default=1, help="rounds (each: without, with)")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT / "controllers"))
    from kai.kube.client import Kube
    from kai.webhooks.app import free_port

    tmp = Path(tempfile.mkdtemp(prefix="bench-webhook-"))
    started = args.kubeconfig is None
    kubeconfig = Path(args.kubeconfig) if args.kubeconfig else _start_cluster(tmp / "k8s")
    kube = Kube.from_kubeconfig(str(kubeconfig))
    kube.api.rest_client.pool_manager.connection_pool_kw["maxsize"] = args.workers
    proc = None
    try:
        _prepare(kube)
        port, metrics_port = free_port(), free_port()
        log = open(tmp / "webhook.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kai.cli",
                "webhook",
                "--kubeconfig",
                str(kubeconfig),
                "--port",
                str(port),
                "--host",
                "127.0.0.1",
                "--metrics-port",
                str(metrics_port),
                "--self-register",
                f"https://127.0.0.1:{port}",
                "--log-level",
                "WARNING",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT / "controllers")},
        )
        _wait_ready(metrics_port, proc)
        import urllib.request

        def webhook_metrics() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as r:
                return str(r.read().decode())

        print(
            f"load: {args.rate:g} pod creates/s (dryRun=All, fractional GPU pods for kai), "
            f"{args.seconds:g} s per phase, {args.workers} client threads"
        )
        rows = []
        for round_ in range(args.repeat):
            # without: pods for another scheduler, which the webhooks' match condition leaves
            # out (the API server alone, same objects, same rate)
            run_load(
                str(kubeconfig), args.rate, 2, args.workers, "default-scheduler", args.processes
            )  # warm up
            without = run_load(
                str(kubeconfig),
                args.rate,
                args.seconds,
                args.workers,
                "default-scheduler",
                args.processes,
            )
            run_load(str(kubeconfig), args.rate, 2, args.workers, processes=args.processes)
            api_before = kube.get_text("/metrics")[1]
            ours_before = webhook_metrics()
            with_hook = run_load(
                str(kubeconfig), args.rate, args.seconds, args.workers, processes=args.processes
            )
            api_after = kube.get_text("/metrics")[1]
            ours_after = webhook_metrics()
            api = {
                kind: _delta(
                    _histogram(
                        api_after,
                        "apiserver_admission_webhook_admission_duration_seconds",
                        f'type="{kind}"',
                    ),
                    _histogram(
                        api_before,
                        "apiserver_admission_webhook_admission_duration_seconds",
                        f'type="{kind}"',
                    ),
                )
                for kind in ("admit", "validating")
            }
            ours = {
                hook: _delta(
                    _histogram(
                        ours_after, "kai_webhook_request_duration_milliseconds", f'"{hook}"'
                    ),
                    _histogram(
                        ours_before, "kai_webhook_request_duration_milliseconds", f'"{hook}"'
                    ),
                )
                for hook in ("pods.mutate", "pods.validate")
            }
            with_hook["connections"] = _connections(ours_after) - _connections(ours_before)
            rows.append((round_, without, with_hook, api, ours))
        _report(rows)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        kube.close()
        if started:
            _stop_cluster(tmp / "k8s")
    return 0


def _report(rows: list[Any]) -> None:
    print()
    print("| round | webhook | sent/s | errors | p50 ms | p90 ms | p99 ms | max ms |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for round_, without, with_hook, _api, _ours in rows:
        for name, r in (("without", without), ("with", with_hook)):
            print(
                f"| {round_ + 1} | {name} | {r['rate']:.0f} | {len(r['errors'])} | "
                f"{r['p50']:.1f} | {r['p90']:.1f} | {r['p99']:.1f} | {r['max']:.1f} |"
            )
    for round_, _w, with_hook, _api, _ours in rows:
        print(
            f"round {round_ + 1}: {with_hook['connections']:.0f} TLS connections opened by the "
            "API server to the webhook"
        )
    print()
    print("API server's view (apiserver_admission_webhook_admission_duration_seconds):")
    print("| round | phase | calls | <= 5 ms | <= 25 ms | p99 bucket |")
    print("|---:|---|---:|---:|---:|---:|")
    for round_, _w, _h, api, _ours in rows:
        for kind, hist in api.items():
            print(
                f"| {round_ + 1} | {kind} | {hist.get(float('inf'), 0):.0f} | "
                f"{_bucket_share(hist, 0.005)} | {_bucket_share(hist, 0.025)} | "
                f"{_bucket_quantile(hist, 0.99) * 1000:g} ms |"
            )
    print()
    print("The webhook's view (kai_webhook_request_duration_milliseconds, arrival to answer):")
    print("| round | webhook | calls | <= 1 ms | <= 5 ms | p50 bucket | p99 bucket |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for round_, _w, _h, _api, ours in rows:
        for hook, hist in ours.items():
            print(
                f"| {round_ + 1} | {hook} | {hist.get(float('inf'), 0):.0f} | "
                f"{_bucket_share(hist, 1)} | {_bucket_share(hist, 5)} | "
                f"{_bucket_quantile(hist, 0.5):g} ms | {_bucket_quantile(hist, 0.99):g} ms |"
            )
    for _round, without, with_hook, _api, _ours in rows:
        for r in (without, with_hook):
            for e in r["errors"][:3]:
                print("error:", e)


if __name__ == "__main__":
    sys.exit(main())

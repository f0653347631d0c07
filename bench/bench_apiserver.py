"""Throughput of the embedded API server over real HTTP (run: python bench/bench_apiserver.py).

Creates N nodes and M pods with several client threads (raw JSON over keep-alive connections,
as informer-style clients do), binds every pod through pods/binding while a watch streams all pod
events, then lists everything. Prints requests per second for each phase and the watch's event
rate. Targets (issue 6): 2,000 nodes and 10,000 pods without quadratic slow-down; the scheduler
benchmark needs > 500 binds/s end to end, so the server alone should manage several times that.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import urllib3
import yaml

from kube_emulator import ApiServer

AUTH: dict[str, str] = {}  # the server's bearer token, read from its kubeconfig


def _run(pool: urllib3.PoolManager, method: str, url: str, body: object = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    resp = pool.request(
        method, url, body=data, headers={"Content-Type": "application/json", **AUTH}
    )
    if resp.status >= 300:
        raise RuntimeError(f"{method} {url}: {resp.status} {resp.data[:200]!r}")
    return json.loads(resp.data)


def _phase(name: str, n: int, threads: int, fn) -> float:
    began = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(fn, range(n)))
    took = time.perf_counter() - began
    print(f"{name:<28} {n:>7} requests  {took:6.2f} s  {n / took:8.0f} req/s", flush=True)
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the server in this process (shares the GIL with the clients)",
    )
    args = parser.parse_args()
    server, proc = None, None
    tmp = tempfile.TemporaryDirectory(prefix="kai-bench-apiserver-")
    kubeconfig = Path(tmp.name) / "kubeconfig"
    if args.in_process:
        server = ApiServer(taint_new_nodes=False).start()
        base = server.url
        server.write_kubeconfig(kubeconfig)
    else:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "kai.cli", "apiserver", "--no-node-taint", "--no-tls"),
                *("--kubeconfig-out", str(kubeconfig)),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        line = ""
        for _ in range(2):  # "kubeconfig: FILE", then "serving: URL"
            line = proc.stdout.readline().strip() if proc.stdout else ""
        if not line.startswith("serving: "):
            raise SystemExit(f"kai apiserver did not start: {line!r}")
        base = line.removeprefix("serving: ")
    token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    AUTH["Authorization"] = f"Bearer {token}"
    print(
        f"server: {'in this process' if server else 'kai apiserver subprocess'} at {base}, "
        f"{args.threads} client threads",
        flush=True,
    )
    pool = urllib3.PoolManager(maxsize=args.threads * 2)
    ns_url = f"{base}/api/v1/namespaces/default/pods"

    _phase(
        "create nodes",
        args.nodes,
        args.threads,
        lambda i: _run(
            pool,
            "POST",
            f"{base}/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"node-{i}", "labels": {"nvidia.com/gpu.count": "8"}},
                "status": {
                    "capacity": {"nvidia.com/gpu": "8", "cpu": "64"},
                    "allocatable": {"nvidia.com/gpu": "8", "cpu": "64"},
                },
            },
        ),
    )
    rv = _run(pool, "GET", ns_url + "?limit=1")["metadata"]["resourceVersion"]

    seen = {"events": 0, "first": 0.0, "last": 0.0}
    expected = 3 * args.pods  # ADDED, MODIFIED (bind), DELETED

    def watcher() -> None:
        wpool = urllib3.PoolManager()
        resp = wpool.request(
            "GET",
            f"{ns_url}?watch=1&resourceVersion={rv}&timeoutSeconds=600",
            preload_content=False,
            headers=AUTH,
        )
        buf = b""
        for chunk in resp.stream(1 << 16):
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line:
                    if not seen["events"]:
                        seen["first"] = time.perf_counter()
                    seen["events"] += 1
            if seen["events"] >= expected:
                seen["last"] = time.perf_counter()
                resp.release_conn()
                return

    watch_thread = threading.Thread(target=watcher, daemon=True)
    watch_thread.start()
    time.sleep(0.2)
    pod_spec = {
        "schedulerName": "kai-scheduler",
        "containers": [
            {
                "name": "main",
                "image": "busybox:1.36",
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
        ],
    }
    _phase(
        "create pods",
        args.pods,
        args.threads,
        lambda i: _run(
            pool,
            "POST",
            ns_url,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"pod-{i}", "labels": {"kai.scheduler/queue": "team-a"}},
                "spec": pod_spec,
            },
        ),
    )
    _phase(
        "bind pods (pods/binding)",
        args.pods,
        args.threads,
        lambda i: _run(
            pool,
            "POST",
            f"{ns_url}/pod-{i}/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": f"pod-{i}"},
                "target": {"kind": "Node", "name": f"node-{i % args.nodes}"},
            },
        ),
    )
    began = time.perf_counter()
    listing = _run(pool, "GET", ns_url)
    print(
        f"{'list all pods':<28} {len(listing['items']):>7} items     "
        f"{time.perf_counter() - began:6.2f} s",
        flush=True,
    )
    began = time.perf_counter()
    unbound = _run(pool, "GET", ns_url + "?fieldSelector=spec.nodeName%3D")
    print(
        f"{'list with field selector':<28} {len(unbound['items']):>7} items     "
        f"{time.perf_counter() - began:6.2f} s",
        flush=True,
    )
    _phase(
        "delete pods (grace 0)",
        args.pods,
        args.threads,
        lambda i: _run(pool, "DELETE", f"{ns_url}/pod-{i}?gracePeriodSeconds=0"),
    )
    watch_thread.join(timeout=120)
    span = (seen["last"] or time.perf_counter()) - seen["first"]
    print(
        f"{'watch stream':<28} {seen['events']:>7} events    {span:6.2f} s  "
        f"{seen['events'] / span:8.0f} events/s (paced by the writers)",
        flush=True,
    )
    # replay: a new watch resuming from before all of it streams the retained history
    began = time.perf_counter()
    resp = pool.request(
        "GET",
        f"{ns_url}?watch=1&resourceVersion={rv}&timeoutSeconds=60",
        preload_content=False,
        headers=AUTH,
    )
    count = 0
    for chunk in resp.stream(1 << 20):
        count += chunk.count(b"\n")
        if count >= expected:
            break
    took = time.perf_counter() - began
    resp.release_conn()
    print(
        f"{'watch replay from history':<28} {count:>7} events    {took:6.2f} s  "
        f"{count / took:8.0f} events/s",
        flush=True,
    )
    if server is not None:
        server.stop()
    if proc is not None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    tmp.cleanup()


if __name__ == "__main__":
    main()

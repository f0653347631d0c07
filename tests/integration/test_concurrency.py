"""Optimistic concurrency under real contention: read-modify-write loops from several threads
never lose an update, and a pod is bound exactly once however many binders race."""

from __future__ import annotations

import threading

from k8s_helpers import pod
from kubernetes import client


def test_concurrent_increments_are_never_lost(cluster, ns):
    core = client.CoreV1Api(cluster.api)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "counter"}, "data": {"n": "0"}})
    per_thread, threads = 15, 4
    conflicts = []

    def bump():
        api = client.CoreV1Api(cluster.api)
        done = 0
        while done < per_thread:
            cm = api.read_namespaced_config_map("counter", ns)
            cm.data["n"] = str(int(cm.data["n"]) + 1)
            try:
                api.replace_namespaced_config_map("counter", ns, cm)
                done += 1
            except client.ApiException as exc:
                assert exc.status == 409
                conflicts.append(1)

    workers = [threading.Thread(target=bump) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    final = core.read_namespaced_config_map("counter", ns)
    assert final.data["n"] == str(per_thread * threads)


def test_racing_binders_bind_once(cluster, core, ns):
    core.create_namespaced_pod(ns, pod("contested"))
    results: dict[str, int] = {}

    def bind(node):
        api = client.CoreV1Api(cluster.api)
        try:
            resp = api.create_namespaced_pod_binding(
                "contested",
                ns,
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": "contested"},
                    "target": {"kind": "Node", "name": node},
                },
                _preload_content=False,
            )
            results[node] = resp.status
        except client.ApiException as exc:
            results[node] = exc.status

    workers = [threading.Thread(target=bind, args=(f"node-{i}",)) for i in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    winners = [n for n, code in results.items() if code == 201]
    assert len(winners) == 1 and sorted(set(results.values())) == [201, 409]
    assert core.read_namespaced_pod("contested", ns).spec.node_name == winners[0]

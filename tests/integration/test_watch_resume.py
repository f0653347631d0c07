"""What informers rely on: a watch that drops can resume from the last resourceVersion it saw
and, together, the pieces deliver every change exactly once and in order."""

from __future__ import annotations

import threading

import urllib3
from k8s_helpers import SYSTEM_CONFIGMAPS
from kubernetes import client, watch


def test_resumed_watches_lose_nothing(cluster, core, ns):
    server = cluster.server
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    total = 120
    if server is not None:
        server.faults.configure(watch_drop_rate=0.05, seed=11)

    def writer():
        for i in range(total):
            core.create_namespaced_config_map(ns, {"metadata": {"name": f"c{i:03d}"}})

    thread = threading.Thread(target=writer)
    thread.start()
    seen: list[tuple[int, str]] = []
    rv = start
    drops = 0
    try:
        while len(seen) < total and drops < 500:
            try:
                for ev in watch.Watch().stream(
                    core.list_namespaced_config_map,
                    ns,
                    resource_version=rv,
                    timeout_seconds=10,
                    allow_watch_bookmarks=True,
                ):
                    obj = ev["raw_object"]
                    rv = obj["metadata"]["resourceVersion"]
                    if ev["type"] == "ADDED" and obj["metadata"]["name"] not in SYSTEM_CONFIGMAPS:
                        seen.append((int(rv), obj["metadata"]["name"]))
                    if len(seen) >= total:
                        break
            except (
                urllib3.exceptions.ProtocolError,
                urllib3.exceptions.HTTPError,
                client.ApiException,
            ):
                drops += 1
    finally:
        thread.join()
        if server is not None:
            server.faults.clear()
    names = [name for _, name in seen]
    assert names == [f"c{i:03d}" for i in range(total)]
    versions = [v for v, _ in seen]
    assert versions == sorted(versions) and len(set(versions)) == total
    if server is not None:
        assert drops > 0  # the fault mode really cut the stream

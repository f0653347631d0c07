"""What the Deployments rely on in the components, without a cluster: /readyz follows the
readiness check (503 until ready) while /healthz answers from the start; the pod-grouper's
queue label key; --namespace sets the Leases' namespace and the scheduler's ConfigMap."""

from __future__ import annotations

import argparse
import urllib.error
import urllib.request

from kai.metrics import MetricsServer, Registry
from kai.reconcilers.podgrouper import podgroup_for


def _status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_readyz_follows_the_readiness_check() -> None:
    ready = {"value": False}
    server = MetricsServer([Registry()], 0, host="127.0.0.1", ready=lambda: ready["value"])
    server.start()
    try:
        assert _status(server.port, "/healthz") == 200
        assert _status(server.port, "/livez") == 200
        assert _status(server.port, "/readyz") == 503
        ready["value"] = True
        assert _status(server.port, "/readyz") == 200
        assert _status(server.port, "/metrics") == 200
    finally:
        server.stop()


def test_queue_label_key() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u1",
            "labels": {"acme.com/team": "vision", "kai.scheduler/queue": "ignored"},
        },
        "spec": {},
    }
    group = podgroup_for(pod, None, queue_label="acme.com/team")
    assert group["spec"]["queue"] == "vision"
    assert group["metadata"]["labels"] == {"acme.com/team": "vision"}
    assert podgroup_for(pod, None)["spec"]["queue"] == "ignored"  # KAI's default key


def _parse(command: str, *args: str) -> argparse.Namespace:
    import importlib

    parser = argparse.ArgumentParser()
    importlib.import_module(f"kai.commands.{command}").add_arguments(parser)
    return parser.parse_args(list(args))


def test_namespace_flag() -> None:
    assert _parse("binder").namespace == "kai-scheduler"
    assert _parse("podgrouper", "--namespace", "kai2").namespace == "kai2"
    from kai.commands.scheduler import config_map_of

    assert config_map_of(_parse("scheduler")) == "kai-scheduler/kai-scheduler-config"
    assert config_map_of(_parse("scheduler", "--namespace", "kai2")) == "kai2/kai-scheduler-config"
    assert config_map_of(_parse("scheduler", "--namespace", "a", "--config-map", "b/c")) == "b/c"
    assert _parse("podgrouper", "--queue-label-key", "acme.com/team").queue_label_key == (
        "acme.com/team"
    )

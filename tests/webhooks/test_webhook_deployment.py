"""The webhook's Deployment listens on the pod's IP, and a NetworkPolicy lets in only the
HTTPS port (from the API server's peers when they are given) and the metrics port."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kai-scheduler"


def _render(helm: str, *args: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [
            helm,
            "template",
            "kai",
            str(CHART),
            "-n",
            "kai-scheduler",
            "--set",
            "webhook.enabled=true",
            *list(args),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any] | None:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found[0] if found else None


def test_the_webhook_listens_on_the_pod_ip(helm: str) -> None:
    deploy = _one(_render(helm), "Deployment", "kai-webhook")
    assert deploy is not None
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert "--bind-address=$(POD_IP)" in container["args"]
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in (
        container["env"]
    )


def test_every_address_only_when_asked(helm: str) -> None:
    deploy = _one(
        _render(helm, "--set", "webhook.bindAddress=0.0.0.0"), "Deployment", "kai-webhook"
    )
    assert deploy is not None
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--bind-address=0.0.0.0" in args and "--bind-address=$(POD_IP)" not in args


def test_the_network_policy_opens_the_webhook_and_metrics_ports_only(helm: str) -> None:
    policy = _one(_render(helm), "NetworkPolicy", "kai-webhook")
    assert policy is not None
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "webhook"
    assert [rule["ports"] for rule in spec["ingress"]] == [
        [{"port": "https", "protocol": "TCP"}],
        [{"port": "metrics", "protocol": "TCP"}],
    ]
    assert all("from" not in rule for rule in spec["ingress"])  # the default: any source


def test_the_api_server_peers_restrict_the_webhook_port(helm: str) -> None:
    peers = [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    scrapers = [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]
    objects = _render(
        helm,
        "--set-json",
        f"webhook.networkPolicy.apiServer={json.dumps(peers)}",
        "--set-json",
        f"webhook.networkPolicy.metrics={json.dumps(scrapers)}",
    )
    policy = _one(objects, "NetworkPolicy", "kai-webhook")
    assert policy is not None
    https, metrics = policy["spec"]["ingress"]
    assert https["from"] == peers and metrics["from"] == scrapers


def test_the_network_policy_can_be_left_out(helm: str) -> None:
    objects = _render(helm, "--set", "webhook.networkPolicy.enabled=false")
    assert _one(objects, "NetworkPolicy", "kai-webhook") is None


@pytest.mark.parametrize("bad", ['{"cidr": "10.0.0.0/8"}', '"everyone"'])
def test_peers_that_are_not_a_list_are_refused_by_the_chart(helm: str, bad: str) -> None:
    out = subprocess.run(
        [
            helm,
            "template",
            "kai",
            str(CHART),
            "--set",
            "webhook.enabled=true",
            "--set-json",
            f"webhook.networkPolicy.apiServer={bad}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode != 0
    assert "apiServer" in out.stderr


def test_the_real_api_server_accepts_the_network_policy(
    helm: str, kubectl: str, real_cluster: Any, tmp_path: Path
) -> None:
    peers = [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    for args in ((), ("--set-json", f"webhook.networkPolicy.apiServer={json.dumps(peers)}")):
        policy = _one(_render(helm, *args), "NetworkPolicy", "kai-webhook")
        assert policy is not None
        policy["metadata"]["namespace"] = "default"
        path = tmp_path / "policy.yaml"
        path.write_text(yaml.safe_dump(policy))
        out = subprocess.run(
            [
                kubectl,
                "--kubeconfig",
                str(real_cluster.kubeconfig),
                "create",
                "--dry-run=server",
                "-o",
                "json",
                "-f",
                str(path),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["spec"]["ingress"] == policy["spec"]["ingress"]

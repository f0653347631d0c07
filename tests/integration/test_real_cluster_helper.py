"""The real-cluster fixture itself: it starts, serves the admin kubeconfig, and the fake nodes it
makes are Ready and schedulable (no not-ready taint), as a kubelet would leave them."""

from __future__ import annotations

from kubernetes import client, config

from helpers.real_cluster import NOT_READY_TAINT, RealCluster, add_fake_nodes


def test_fake_nodes_are_ready_and_untainted(real_cluster: RealCluster) -> None:
    api = config.new_client_from_config(str(real_cluster.kubeconfig))
    try:
        add_fake_nodes(api, ["helper-node-a", "helper-node-b"], gpus=4)
        core = client.CoreV1Api(api)
        for name in ("helper-node-a", "helper-node-b"):
            node = core.read_node(name)
            assert node.status.allocatable["nvidia.com/gpu"] == "4"
            assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
            assert all(t.key != NOT_READY_TAINT for t in node.spec.taints or [])
    finally:
        api.close()

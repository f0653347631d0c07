"""Preferred node affinity and PersistentVolumeClaims end to end, on the embedded API server and
on a real one: snapshot from the cluster -> core -> BindRequest -> binding.

- a pod with a preferred node affinity lands on the preferred node (which binpack alone would
  not choose) when it fits there;
- a pod whose claim is bound to a PersistentVolume with node affinity lands on that node only;
  one whose volume no node can reach, and one whose claim does not exist, stay pending with the
  reason on their PodScheduled condition;
- a pod whose claim waits for its first consumer is bound, and the claim names the node for
  the provisioner.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import queue
from live_helpers import eventually

from kai.kube.client import ApiError, Kube
from kai.kube.resources import NAMESPACES, PODS, PVCS, PVS, QUEUES, STORAGE_CLASSES
from kai.kube.writes import create_if_absent
from kai.sim.system import System, SystemOptions, bootstrap
from kai.sim.workloads import pod_manifest

QUEUE = "vol-team"
HOST = "kubernetes.io/hostname"


@dataclass
class Live:
    kind: str
    kube: Kube
    ns: str
    nodes: list[str]
    volumes: list[str]
    classes: list[str]

    def pod(self, name: str) -> dict[str, Any]:
        return self.kube.get(PODS, name, self.ns)

    def node_of(self, name: str) -> str:
        return str(eventually(lambda: self.pod(name)["spec"].get("nodeName"), timeout=60))

    def unschedulable_message(self, name: str) -> str:
        def message() -> str | None:
            for cond in self.pod(name).get("status", {}).get("conditions") or []:
                if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                    return str(cond.get("message") or "")
            return None

        return str(eventually(message, timeout=60))

    def volume(self, name: str, claim: str, host: str) -> None:
        """A PersistentVolume reachable from ``host`` only, pre-bound to ``claim``."""
        self.kube.create(
            PVS,
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "",
                    "persistentVolumeReclaimPolicy": "Retain",
                    "local": {"path": "/mnt/disk"},
                    "claimRef": {"namespace": self.ns, "name": claim},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": HOST, "operator": "In", "values": [host]}
                                    ]
                                }
                            ]
                        }
                    },
                },
            },
        )
        self.volumes.append(name)

    def claim(self, name: str, volume: str) -> None:
        self.kube.create(
            PVCS,
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "namespace": self.ns},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "",
                    "volumeName": volume,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        )

    def pod_with_claim(self, name: str, claim: str) -> None:
        pod = pod_manifest(name, self.ns, QUEUE, gpus=1)
        pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        self.kube.create(PODS, pod)


def _options(components: tuple[str, ...]) -> SystemOptions:
    return SystemOptions(
        period=0.2,
        status_period=0.3,
        lease_duration=2.0,
        renew_period=0.5,
        retry_period=0.1,
        components=components,
    )


@pytest.fixture(params=["embedded", "real"])
def live(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Live]:
    tag = uuid.uuid4().hex[:6]
    names = [f"vol-{tag}-{i}" for i in range(3)]
    server = None
    if request.param == "embedded":
        from kai.sim.nodes import NodeShape, create_nodes
        from kube_emulator import ApiServer

        server = ApiServer(bookmark_interval=0.2).start()
        kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
        kube = Kube.from_kubeconfig(kubeconfig)
        bootstrap(kube)
        names = create_nodes(kube, 3, NodeShape(gpus=4), prefix=f"vol-{tag}")
        system = System(kubeconfig, _options(("scheduler", "binder", "podgrouper", "nodes")))
    else:
        from kubernetes import config as kconfig

        from helpers.real_cluster import add_fake_nodes

        cluster = request.getfixturevalue("real_cluster")
        kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
        bootstrap(kube)
        api = kconfig.new_client_from_config(str(cluster.kubeconfig))
        add_fake_nodes(api, names, gpus=4)
        api.close()
        system = System(str(cluster.kubeconfig), _options(("scheduler", "binder", "podgrouper")))
    create_if_absent(kube, QUEUES, queue(QUEUE))
    ns = f"vol-{tag}"
    kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    live = Live(request.param, kube, ns, names, [], [])
    system.start()
    try:
        yield live
    finally:
        system.stop()
        if server is not None:
            kube.close()
            server.stop()
        else:  # leave the session's real cluster as it was
            for pod in kube.list(PODS, ns)["items"]:
                with contextlib.suppress(ApiError):
                    kube.delete(PODS, pod["metadata"]["name"], ns, grace_period_seconds=0)
            kube.delete(NAMESPACES, ns)
            for volume in live.volumes:
                with contextlib.suppress(ApiError):
                    kube.delete(PVS, volume)
            for storage_class in live.classes:
                with contextlib.suppress(ApiError):
                    kube.delete(STORAGE_CLASSES, storage_class)
            kube.close()


def test_preferred_node_affinity_lands_on_the_preferred_node(live: Live) -> None:
    first, _, last = live.nodes
    # binpack: the fullest node first, so a plain pod joins this one on ``first``
    live.kube.create(PODS, pod_manifest("anchor", live.ns, QUEUE, gpus=2))
    anchor_node = live.node_of("anchor")
    preferred = last if anchor_node != last else first
    pod = pod_manifest("wants", live.ns, QUEUE, gpus=1)
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {
                        "matchExpressions": [{"key": HOST, "operator": "In", "values": [preferred]}]
                    },
                }
            ]
        }
    }
    live.kube.create(PODS, pod)
    live.kube.create(PODS, pod_manifest("plain", live.ns, QUEUE, gpus=1))
    assert live.node_of("wants") == preferred
    assert live.node_of("plain") == anchor_node  # the same cluster without a preference


def test_a_bound_volume_keeps_its_pod_on_the_volume_node(live: Live) -> None:
    target = live.nodes[1]
    volume = f"{live.ns}-local"
    live.volume(volume, "data", target)
    live.claim("data", volume)
    live.pod_with_claim("db", "data")
    assert live.node_of("db") == target
    # a volume no node reaches, and a claim that does not exist: pending, and why
    live.volume(f"{live.ns}-far", "far", "a-node-that-is-not-there")
    live.claim("far", f"{live.ns}-far")
    live.pod_with_claim("stuck", "far")
    live.pod_with_claim("lost", "no-such-claim")
    assert "volume node affinity conflict" in live.unschedulable_message("stuck")
    assert "persistentvolumeclaim not found" in live.unschedulable_message("lost")
    assert not live.pod("stuck")["spec"].get("nodeName")


def test_a_claim_waiting_for_its_first_consumer_is_told_the_node(live: Live) -> None:
    storage_class = f"{live.ns}-wffc"
    live.kube.create(
        STORAGE_CLASSES,
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": storage_class},
            "provisioner": "example.com/csi",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
    )
    live.classes.append(storage_class)
    live.kube.create(
        PVCS,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "scratch", "namespace": live.ns},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": storage_class,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    live.pod_with_claim("job", "scratch")
    node = live.node_of("job")
    annotations = live.kube.get(PVCS, "scratch", live.ns)["metadata"].get("annotations") or {}
    assert annotations.get("volume.kubernetes.io/selected-node") == node


def test_a_pre_provisioned_local_volume_is_chosen_and_bound_where_the_pod_goes(live: Live) -> None:
    """A claim of a WaitForFirstConsumer class without a provisioner: the pod goes to the node
    of a local volume that can hold the claim, the binder reserves that volume for the claim
    (claimRef), and on a real server the PV controller completes the binding. A claim no volume
    can hold keeps its pod pending with Kubernetes' reason."""
    storage_class = f"{live.ns}-local"
    live.kube.create(
        STORAGE_CLASSES,
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": storage_class},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
    )
    live.classes.append(storage_class)
    for name, host, size in (("big", live.nodes[1], "10Gi"), ("small", live.nodes[2], "1Gi")):
        volume = f"{live.ns}-{name}"
        live.kube.create(
            PVS,
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": volume},
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": storage_class,
                    "persistentVolumeReclaimPolicy": "Retain",
                    "local": {"path": "/mnt/disk"},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": HOST, "operator": "In", "values": [host]}
                                    ]
                                }
                            ]
                        }
                    },
                },
            },
        )
        live.volumes.append(volume)
    for claim, size in (("data", "5Gi"), ("huge", "50Gi")):
        live.kube.create(
            PVCS,
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": live.ns},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": storage_class,
                    "resources": {"requests": {"storage": size}},
                },
            },
        )
    live.pod_with_claim("db", "data")
    live.pod_with_claim("greedy", "huge")
    assert live.node_of("db") == live.nodes[1]
    ref = live.kube.get(PVS, f"{live.ns}-big")["spec"].get("claimRef") or {}
    assert (ref.get("namespace"), ref.get("name")) == (live.ns, "data")
    assert not live.kube.get(PVS, f"{live.ns}-small")["spec"].get("claimRef")
    message = live.unschedulable_message("greedy")
    assert "didn't find available persistent volumes to bind" in message
    assert "unbound immediate" not in message
    if live.kind == "real":  # kube-controller-manager's PV controller finishes the binding
        eventually(
            lambda: (
                live.kube.get(PVCS, "data", live.ns)["spec"].get("volumeName") == f"{live.ns}-big"
            ),
            timeout=60,
        )

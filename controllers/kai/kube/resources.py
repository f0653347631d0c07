"""The REST resources the live components use."""

from __future__ import annotations

from kai.kube.client import Resource

NAMESPACES = Resource("", "v1", "namespaces", False, "Namespace")
NODES = Resource("", "v1", "nodes", False, "Node")
PODS = Resource("", "v1", "pods", True, "Pod")
CONFIGMAPS = Resource("", "v1", "configmaps", True, "ConfigMap")
EVENTS = Resource("", "v1", "events", True, "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
JOBS = Resource("batch", "v1", "jobs", True, "Job")
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", False, "PriorityClass")
PVCS = Resource("", "v1", "persistentvolumeclaims", True, "PersistentVolumeClaim")
PVS = Resource("", "v1", "persistentvolumes", False, "PersistentVolume")
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", False, "StorageClass")
CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)
QUEUES = Resource("scheduling.run.ai", "v2", "queues", False, "Queue")
PODGROUPS = Resource("scheduling.run.ai", "v2alpha2", "podgroups", True, "PodGroup")
BIND_REQUESTS = Resource("scheduling.run.ai", "v1alpha2", "bindrequests", True, "BindRequest")
TOPOLOGIES = Resource("kai.scheduler", "v1alpha1", "topologies", False, "Topology")
QUEUE_TREES = Resource("gitops.kai.scheduler", "v1alpha1", "queuetrees", False, "QueueTree")
SCHEDULING_SHARDS = Resource("kai.scheduler", "v1", "schedulingshards", False, "SchedulingShard")
KAI_CONFIGS = Resource("kai.scheduler", "v1", "configs", False, "Config")  # KAI's operator CRD

#: apiVersion/kind -> resource, for applying manifests
BY_KIND: dict[tuple[str, str], Resource] = {
    (r.api_version, r.kind): r
    for r in (
        NAMESPACES,
        NODES,
        PODS,
        CONFIGMAPS,
        EVENTS,
        LEASES,
        JOBS,
        PRIORITY_CLASSES,
        CRDS,
        QUEUES,
        PODGROUPS,
        BIND_REQUESTS,
        TOPOLOGIES,
        SCHEDULING_SHARDS,
    )
}

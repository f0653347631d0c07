"""The core's plugins, listed once, in order (see :mod:`kai.scheduler.framework`).

Filter order is the order in which a node that fails several filters is charged in a pending
job's reason; resource fit comes after all of them. Scores are summed in the listed order.
Adding a filter or scorer: a module under ``plugins/`` defining it, and one line here.
"""

from __future__ import annotations

from kai.scheduler.framework import Registry
from kai.scheduler.plugins.gpu_rules import GPU_RULES
from kai.scheduler.plugins.host_ports import HOST_PORTS_FILTER
from kai.scheduler.plugins.node_affinity import NODE_AFFINITY_FILTER
from kai.scheduler.plugins.node_readiness import NODE_READINESS
from kai.scheduler.plugins.node_scores import (
    GPU_SHARING_ORDER,
    NODE_AVAILABILITY,
    NODE_PLACEMENT,
    RESOURCE_TYPE,
)
from kai.scheduler.plugins.pod_affinity import POD_AFFINITY_FILTER
from kai.scheduler.plugins.preferred_affinity import (
    PREFERRED_NODE_AFFINITY,
    PREFERRED_POD_AFFINITY,
)
from kai.scheduler.plugins.taints import TAINTS
from kai.scheduler.plugins.topology_domain import TOPOLOGY_DOMAIN
from kai.scheduler.plugins.volumes import VOLUMES

DEFAULT_REGISTRY = Registry(
    filters=(
        NODE_READINESS,
        TOPOLOGY_DOMAIN,
        TAINTS,
        NODE_AFFINITY_FILTER,
        POD_AFFINITY_FILTER,
        HOST_PORTS_FILTER,
        VOLUMES,
        GPU_RULES,
    ),
    scorers=(
        PREFERRED_POD_AFFINITY,
        PREFERRED_NODE_AFFINITY,
        GPU_SHARING_ORDER,
        NODE_PLACEMENT,
        NODE_AVAILABILITY,
        RESOURCE_TYPE,
    ),
)

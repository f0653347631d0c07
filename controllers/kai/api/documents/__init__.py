"""This project's GitOps documents (group ``gitops.kai.scheduler``, version ``v1alpha1``).

``DOCUMENT_MODELS`` lists every document kind; ``kai.api.registry`` registers them beside the
KAI-compatible kinds.
"""

from __future__ import annotations

from kai.api.base import TopLevelObject
from kai.api.documents.queue_tree import QueueTree
from kai.api.documents.scheduler_policy import SchedulerPolicy
from kai.api.documents.sharing_policy import SharingPolicy
from kai.api.documents.topology_policy import TopologyPolicy

GROUP = "gitops.kai.scheduler"
VERSION = "v1alpha1"

DOCUMENT_MODELS: list[type[TopLevelObject]] = []
DOCUMENT_MODELS += [QueueTree, TopologyPolicy, SharingPolicy, SchedulerPolicy]

__all__ = [
    "DOCUMENT_MODELS",
    "GROUP",
    "VERSION",
    "QueueTree",
    "SchedulerPolicy",
    "SharingPolicy",
    "TopologyPolicy",
]

"""This project's GitOps documents (group ``gitops.kai.scheduler``, version ``v1alpha1``).

``DOCUMENT_MODELS`` lists every document kind; ``kai.api.registry`` registers them beside the
KAI-compatible kinds.
"""

from __future__ import annotations

from kai.api.base import TopLevelObject

GROUP = "gitops.kai.scheduler"
VERSION = "v1alpha1"

DOCUMENT_MODELS: list[type[TopLevelObject]] = []

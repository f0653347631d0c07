"""The registry of every kind ``kai`` knows: KAI-compatible objects and this project's documents.

Validators, the generator and the webhooks look kinds up here instead of importing model modules
one by one::

    info = lookup("scheduling.run.ai/v2", "Queue")
    known_versions("scheduling.run.ai", "Queue")   # ["v2"]
    json_schema(info)                              # the document committed under schemas/
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import Any

from kai.api.base import TopLevelObject
from kai.api.bind_request import BindRequest
from kai.api.podgroup import PodGroup
from kai.api.queue import Queue
from kai.api.scheduling_shard import SchedulingShard
from kai.api.schema import model_json_schema
from kai.api.topology import Topology

__all__ = [
    "KAI_MODELS",
    "KindInfo",
    "all_kinds",
    "json_schema",
    "known_groups",
    "known_versions",
    "lookup",
]

# The KAI-compatible kinds, in the order the generator writes them.
KAI_MODELS: tuple[type[TopLevelObject], ...] = (
    Queue,
    PodGroup,
    BindRequest,
    Topology,
    SchedulingShard,
)


@dataclass(frozen=True)
class KindInfo:
    """Identity and CRD facts of one kind at one version."""

    group: str
    version: str
    kind: str
    plural: str
    scope: str  # "Cluster" | "Namespaced"
    model: type[TopLevelObject]

    @property
    def api_version(self) -> str:
        """``group/version``, as written in ``apiVersion``."""
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        """The CustomResourceDefinition name, ``<plural>.<group>``."""
        return f"{self.plural}.{self.group}"

    @property
    def schema_path(self) -> str:
        """Where the JSON Schema lives, relative to the repository root."""
        return f"schemas/{self.group}/{self.kind}.{self.version}.json"

    @property
    def crd_path(self) -> str:
        """Where the CRD lives, relative to the repository root."""
        return f"manifests/crds/{self.group}_{self.plural}.yaml"


def _info(model: type[TopLevelObject]) -> KindInfo:
    return KindInfo(
        group=model.API_GROUP,
        version=model.API_VERSION,
        kind=model.KIND,
        plural=model.PLURAL,
        scope=model.SCOPE,
        model=model,
    )


def all_kinds() -> list[KindInfo]:
    """Every registered kind: the KAI kinds, then the GitOps documents, each in a fixed order."""
    from kai.api.documents import DOCUMENT_MODELS

    kinds = [_info(m) for m in KAI_MODELS] + [_info(m) for m in DOCUMENT_MODELS]
    seen: set[tuple[str, str, str]] = set()
    for info in kinds:
        key = (info.group, info.version, info.kind)
        if key in seen:
            raise RuntimeError(f"kind {info.kind} of {info.api_version} is registered twice")
        seen.add(key)
    return kinds


def lookup(api_version: str, kind: str) -> KindInfo | None:
    """The kind registered for ``apiVersion`` and ``kind``, or None."""
    for info in all_kinds():
        if info.api_version == api_version and info.kind == kind:
            return info
    return None


def known_versions(group: str, kind: str) -> list[str]:
    """The versions registered for a kind of a group (empty when the kind is unknown)."""
    return sorted({i.version for i in all_kinds() if i.group == group and i.kind == kind})


def known_groups() -> list[str]:
    """Every API group that has at least one registered kind."""
    return sorted({i.group for i in all_kinds()})


@functools.cache
def _cached_schema(model: type[TopLevelObject]) -> dict[str, Any]:
    return model_json_schema(model)


def json_schema(info: KindInfo) -> dict[str, Any]:
    """The JSON Schema (2020-12) of a kind, exactly as committed under ``schemas/``."""
    return copy.deepcopy(_cached_schema(info.model))

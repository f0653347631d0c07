"""The top-owner walk: a pod's owners read through the API (cached), up to the top owner.

A kind's REST resource name comes from API discovery (``/api/v1``, ``/apis/<group>/<version>``),
read once per group/version. Owner objects are cached for ``ttl`` seconds by
(apiVersion, kind, namespace, name); an owner whose UID is not the one the reference names is
read again once (the owner was replaced), and a missing owner ends the walk.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kai.kube.client import ApiError, Kube
from kai.reconcilers.grouping.base import GroupingError, describe

MAX_DEPTH = 16


class OwnerMissing(Exception):
    """An owner named by an ownerReference is not there (yet, or any more)."""


class OwnerReader:
    def __init__(
        self,
        kube: Kube,
        ttl: float = 10.0,
        local: Callable[[str, str, str, str], dict[str, Any] | None] | None = None,
    ) -> None:
        self.kube = kube
        self.ttl = ttl
        self.local = local  # an informer-backed lookup tried first (e.g. batch Jobs)
        self._plurals: dict[str, dict[str, tuple[str, bool]]] = {}
        self._cache: dict[tuple[str, str, str, str], tuple[float, dict[str, Any] | None]] = {}
        self._lock = threading.Lock()
        self.reads = 0  # API reads of owner objects (for tests and metrics)

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        with self._lock:
            known = self._plurals.get(api_version)
        if known is None or kind not in known:  # read again: a CRD may have come since
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            try:
                listing = self.kube.request("GET", path)
            except ApiError as exc:
                if exc.status == 404:
                    raise OwnerMissing(f"API {api_version} is not served") from exc
                raise
            known = {
                str(r["kind"]): (str(r["name"]), bool(r.get("namespaced")))
                for r in listing.get("resources") or []
                if "/" not in str(r.get("name", ""))
            }
            with self._lock:
                self._plurals[api_version] = known
        if kind not in known:
            raise OwnerMissing(f"API {api_version} serves no kind {kind}")
        return known[kind]

    def get(
        self, api_version: str, kind: str, namespace: str, name: str, fresh: bool = False
    ) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        key = (api_version, kind, namespace, name)
        now = time.monotonic()
        if not fresh:
            if self.local is not None:
                found = self.local(api_version, kind, namespace, name)
                if found is not None:
                    return found
            with self._lock:
                hit = self._cache.get(key)
            if hit is not None and now - hit[0] < self.ttl:
                return hit[1]
        plural, namespaced = self._resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        path = (
            f"{base}/namespaces/{namespace}/{plural}/{name}"
            if namespaced
            else f"{base}/{plural}/{name}"
        )
        self.reads += 1
        try:
            obj: dict[str, Any] | None = self.kube.request("GET", path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            obj = None
        if obj is not None:
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind)
        with self._lock:
            self._cache[key] = (now, obj)
        return obj

    def read(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.get(api_version, kind, namespace, name)
        except OwnerMissing:
            return None

    def chain(self, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The pod's owners, nearest first; raises :class:`OwnerMissing` when one is absent."""
        out: list[dict[str, Any]] = []
        obj: Mapping[str, Any] = pod
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        for _ in range(MAX_DEPTH):
            refs = (obj.get("metadata") or {}).get("ownerReferences") or []
            if not refs:
                return out
            ref = next((r for r in refs if r.get("controller")), refs[0])
            api_version, kind, name = ref.get("apiVersion"), ref.get("kind"), ref.get("name")
            if not api_version or not kind or not name:
                raise GroupingError(
                    f"{describe(obj)}: an ownerReference without apiVersion, kind or name"
                )
            uid = ref.get("uid")
            try:
                owner = self.get(str(api_version), str(kind), namespace, str(name))
            except ApiError as exc:
                if exc.status != 403:
                    raise
                # not allowed to read it: the reference is all we know, and the walk ends here
                out.append(
                    {
                        "apiVersion": api_version,
                        "kind": kind,
                        "metadata": {"name": name, "namespace": namespace, "uid": uid},
                    }
                )
                return out
            if owner is not None and uid and owner["metadata"].get("uid") != uid:
                owner = self.get(str(api_version), str(kind), namespace, str(name), fresh=True)
            if owner is None or (uid and owner["metadata"].get("uid") != uid):
                raise OwnerMissing(f"{describe(obj)}: owner {kind} {name} ({uid}) is not there")
            out.append(owner)
            obj = owner
        raise GroupingError(f"{describe(pod)}: more than {MAX_DEPTH} owners above it")

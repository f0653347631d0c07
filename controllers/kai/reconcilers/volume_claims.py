"""What a pod's PersistentVolumeClaims allow, from the PVC, PV and StorageClass caches.

The scheduler's part of Kubernetes VolumeBinding, as a
:class:`~kai.scheduler.snapshot.VolumeConstraint` per pod:

- a claim that does not exist, or one bound (``spec.volumeName``) to a PersistentVolume that
  does not exist: the pod fits no node (``missing``), as in Kubernetes;
- a bound claim: its PersistentVolume's ``spec.nodeAffinity.required`` must hold on the node
  (local disks, zonal volumes);
- an unbound claim whose StorageClass binds immediately (``volumeBindingMode: Immediate``, the
  default, or no class): the pod waits until the PV controller binds it (``unbound``), as in
  Kubernetes;
- an unbound claim whose StorageClass is ``WaitForFirstConsumer``: the pod may go to any node
  the class's ``allowedTopologies`` allow (all when it lists none); a dynamic provisioner then
  creates the volume where the pod is;
- an unbound claim of a ``WaitForFirstConsumer`` class without a provisioner
  (``kubernetes.io/no-provisioner``: pre-provisioned local volumes): as Kubernetes'
  VolumeBinding, the pod may go where a PersistentVolume that could be bound to the claim is
  reachable (:func:`matches`: the claim's class, no other claim, enough capacity, the access
  modes and volume mode, not being released or deleted); the binder then binds one of them on
  the chosen node (:mod:`kai.reconcilers.volume_binding`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kai.api.quantity import parse_quantity
from kai.reconcilers.snapshot_builder import ObjectError, node_selector_terms
from kai.scheduler.snapshot import NodeSelectorTerm, Requirement, VolumeConstraint

NO_PROVISIONER = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


#: the terms of a claim one of whose volumes any node reaches (no constraint)
ANYWHERE: tuple[NodeSelectorTerm, ...] = (NodeSelectorTerm(()),)


def matches(volume: Mapping[str, Any], claim: Mapping[str, Any], class_name: str) -> bool:
    """Whether ``volume`` could be bound to the unbound ``claim`` (Kubernetes' volume binder's
    match, without label selectors on the claim): of the claim's StorageClass, free or already
    reserved for this claim, not Released/Failed or being deleted, at least the requested
    capacity, every requested access mode, the same volume mode."""
    spec, claim_spec = _spec(volume), _spec(claim)
    md, claim_md = _md(volume), _md(claim)
    if md.get("deletionTimestamp") or (volume.get("status") or {}).get("phase") in (
        "Released",
        "Failed",
    ):
        return False
    if str(spec.get("storageClassName") or "") != class_name:
        return False
    ref = spec.get("claimRef")
    if isinstance(ref, dict) and ref:
        same = ref.get("name") == claim_md.get("name") and ref.get("namespace") == claim_md.get(
            "namespace"
        )
        if not same or (ref.get("uid") and ref.get("uid") != claim_md.get("uid")):
            return False
    if claim_spec.get("selector"):
        return False  # label selectors on claims are not matched here: never a wrong volume
    if str(spec.get("volumeMode") or "Filesystem") != str(
        claim_spec.get("volumeMode") or "Filesystem"
    ):
        return False
    if not set(claim_spec.get("accessModes") or []) <= set(spec.get("accessModes") or []):
        return False
    wanted = ((claim_spec.get("resources") or {}).get("requests") or {}).get("storage")
    have = (spec.get("capacity") or {}).get("storage")
    try:
        return wanted is None or parse_quantity(have or 0) >= parse_quantity(wanted)
    except ValueError:
        return False


def volume_terms(volume: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...] | None:
    """A PersistentVolume's ``spec.nodeAffinity.required`` terms (None: any node). Raises
    :class:`ObjectError` naming the volume when they cannot be read."""
    affinity = _spec(volume).get("nodeAffinity")
    required = affinity.get("required") if isinstance(affinity, dict) else None
    if not isinstance(required, dict):
        return None
    try:
        return node_selector_terms(required, "spec.nodeAffinity.required")
    except ObjectError as exc:
        raise ObjectError(
            exc.field, f"PersistentVolume {_md(volume).get('name')}: {exc.message}"
        ) from None


def _md(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    md = obj.get("metadata")
    return md if isinstance(md, dict) else {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


class VolumeIndex:
    """The claims, volumes and classes of one snapshot, by name."""

    def __init__(
        self,
        claims: Iterable[dict[str, Any]] = (),
        volumes: Iterable[dict[str, Any]] = (),
        classes: Iterable[dict[str, Any]] = (),
    ) -> None:
        self._raw = (claims, volumes, classes)  # indexed on first use: most cycles need none
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.volumes: dict[str, dict[str, Any]] = {}
        self.classes: dict[str, dict[str, Any]] = {}
        self._indexed = False
        self._cache: dict[tuple[str, tuple[str, ...]], VolumeConstraint] = {}

    def _index(self) -> None:
        claims, volumes, classes = self._raw
        for claim in claims:
            md = _md(claim)
            self.claims[(str(md.get("namespace") or ""), str(md.get("name")))] = claim
        self.volumes.update((str(_md(v).get("name")), v) for v in volumes)
        self.classes.update((str(_md(c).get("name")), c) for c in classes)
        self._indexed = True

    def constraint(self, namespace: str, claims: tuple[str, ...]) -> VolumeConstraint:
        """The constraint of a pod of ``namespace`` whose volumes use ``claims``. Raises
        :class:`ObjectError` naming the object and field of a volume or class that cannot be
        read."""
        if not self._indexed:
            self._index()
        key = (namespace, claims)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._build(namespace, claims)
        return found

    def _build(self, namespace: str, claims: tuple[str, ...]) -> VolumeConstraint:
        affinity: list[tuple[NodeSelectorTerm, ...]] = []
        missing: list[str] = []
        unbound: list[str] = []
        available: list[tuple[NodeSelectorTerm, ...]] = []
        for name in sorted(set(claims)):
            claim = self.claims.get((namespace, name))
            if claim is None:
                missing.append(name)
                continue
            volume_name = _spec(claim).get("volumeName")
            if volume_name:
                volume = self.volumes.get(str(volume_name))
                if volume is None:
                    missing.append(name)
                    continue
                terms = volume_terms(volume)
                if terms is not None:
                    affinity.append(terms)
                continue
            storage_class = self._class_of(claim)
            if (
                storage_class is not None
                and storage_class.get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER
                and storage_class.get("provisioner") == NO_PROVISIONER
            ):
                available.append(self._available_terms(claim, storage_class))
                continue
            if (
                storage_class is None
                or storage_class.get("volumeBindingMode") != WAIT_FOR_FIRST_CONSUMER
            ):
                unbound.append(name)
                continue
            topologies = self._allowed_topologies(storage_class)
            if topologies:
                affinity.append(topologies)
        return VolumeConstraint(
            node_affinity=tuple(affinity),
            missing=tuple(missing),
            unbound=tuple(unbound),
            available=tuple(a for a in available if a is not ANYWHERE),
        )

    def _available_terms(
        self, claim: Mapping[str, Any], storage_class: Mapping[str, Any]
    ) -> tuple[NodeSelectorTerm, ...]:
        """The node selector terms of every volume that could be bound to ``claim``, ORed;
        :data:`ANYWHERE` when one of them has no node affinity; () when there is none."""
        class_name = str(_md(storage_class).get("name") or "")
        terms: list[NodeSelectorTerm] = []
        for volume in self.volumes.values():
            if not matches(volume, claim, class_name):
                continue
            found = volume_terms(volume)
            if found is None:
                return ANYWHERE
            terms.extend(found)
        return tuple(terms)

    def _class_of(self, claim: Mapping[str, Any]) -> Mapping[str, Any] | None:
        name = _spec(claim).get("storageClassName")
        if name is None:  # the default class (set at creation by the admission plugin)
            for storage_class in self.classes.values():
                annotations = _md(storage_class).get("annotations") or {}
                if annotations.get(DEFAULT_CLASS_ANNOTATION) == "true":
                    return storage_class
            return None
        return self.classes.get(str(name)) if name else None

    @staticmethod
    def _allowed_topologies(storage_class: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...]:
        terms = []
        for term in storage_class.get("allowedTopologies") or []:
            expressions = (term if isinstance(term, dict) else {}).get("matchLabelExpressions")
            terms.append(
                NodeSelectorTerm(
                    tuple(
                        Requirement(
                            str(e.get("key") or ""),
                            "In",
                            tuple(str(v) for v in e.get("values") or []),
                        )
                        for e in expressions or []
                        if isinstance(e, dict)
                    )
                )
            )
        return tuple(terms)

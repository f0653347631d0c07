"""What the workload controllers share: pods made from a template, owner references, pod
states, the template hash, and the Events a controller records."""

from __future__ import annotations

import copy
import hashlib
import threading
from typing import TYPE_CHECKING, Any

import orjson

from kube_emulator import meta

if TYPE_CHECKING:
    from kube_emulator.operations import ApiCore
    from kube_emulator.resources import ResourceType

PODS = ("", "pods")
EVENTS = ("", "events")
JOBS = ("batch", "jobs")
DEPLOYMENTS = ("apps", "deployments")
REPLICASETS = ("apps", "replicasets")
STATEFULSETS = ("apps", "statefulsets")
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand


def owner_reference(obj: dict[str, Any]) -> dict[str, Any]:
    md = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": md["name"],
        "uid": md["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_uid(obj: dict[str, Any]) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def controller_ref(obj: dict[str, Any]) -> dict[str, Any] | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def terminal(pod: dict[str, Any]) -> bool:
    return phase(pod) in ("Succeeded", "Failed")


def deleting(obj: dict[str, Any]) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def active(pod: dict[str, Any]) -> bool:
    """Counted as a running replica: neither finished nor being deleted."""
    return not terminal(pod) and not deleting(pod)


def ready(pod: dict[str, Any]) -> bool:
    if phase(pod) != "Running":
        return False
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def template_hash(template: dict[str, Any], collisions: int = 0) -> str:
    """A short, stable, label-safe hash of a pod template, in the alphabet and length of the
    real controllers' ``pod-template-hash`` (their hash is over the Go struct, so the values
    differ from a real cluster's; the format is the same)."""
    data = orjson.dumps(template, option=orjson.OPT_SORT_KEYS) + str(collisions).encode()
    value = int.from_bytes(hashlib.blake2b(data, digest_size=4).digest(), "big")
    return "".join(_SAFE_ALPHABET[ord(ch) % len(_SAFE_ALPHABET)] for ch in str(value))


def pod_from_template(
    owner: dict[str, Any],
    template: dict[str, Any] | None,
    *,
    name: str | None = None,
    generate_name: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    finalizers: list[str] | None = None,
) -> dict[str, Any]:
    """A pod as the real controllers create it: the template's labels, annotations and spec,
    the owner's namespace and a controller owner reference."""
    template = copy.deepcopy(template or {})
    tmd = template.get("metadata") or {}
    md: dict[str, Any] = {
        "namespace": owner["metadata"]["namespace"],
        "labels": {**(tmd.get("labels") or {}), **(labels or {})},
        "ownerReferences": [owner_reference(owner)],
    }
    if name:
        md["name"] = name
    else:
        md["generateName"] = generate_name or f"{owner['metadata']['name']}-"
    merged_annotations = {**(tmd.get("annotations") or {}), **(annotations or {})}
    if merged_annotations:
        md["annotations"] = merged_annotations
    if finalizers:
        md["finalizers"] = list(finalizers)
    if not md["labels"]:
        del md["labels"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": template.get("spec") or {}}


class Recorder:
    """Events in the owner's namespace, as ``kubectl describe`` shows them; repeated ones are
    counted on the first, as the real event recorder does."""

    def __init__(self, core: ApiCore, component: str) -> None:
        self.core = core
        self.component = component
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str, str, str], str] = {}

    def event(self, obj: dict[str, Any], etype: str, reason: str, message: str) -> None:
        md = obj["metadata"]
        ns = md.get("namespace") or "default"
        key = (md.get("uid") or "", etype, reason, message)
        rt: ResourceType = self.core.types[EVENTS]
        now = meta.now()
        with self.core.store.lock:
            with self._lock:
                existing = self._seen.get(key)
            current = self.core.store.get(EVENTS, ns, existing) if existing else None
            if current is not None:
                new = dict(current)
                new["count"] = int(current.get("count") or 1) + 1
                new["lastTimestamp"] = now
                self.core.update_internal(rt, current, new)
                return
            stored = self.core.create_internal(
                rt,
                {
                    "metadata": {"generateName": f"{md['name']}.", "namespace": ns},
                    "involvedObject": {
                        "apiVersion": obj.get("apiVersion"),
                        "kind": obj.get("kind"),
                        "name": md["name"],
                        "namespace": ns,
                        "uid": md.get("uid"),
                        "resourceVersion": md.get("resourceVersion"),
                    },
                    "reason": reason,
                    "message": message,
                    "type": etype,
                    "source": {"component": self.component},
                    "reportingComponent": self.component,
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "count": 1,
                },
            )
        with self._lock:
            if len(self._seen) > 10_000:
                self._seen.clear()
            self._seen[key] = stored["metadata"]["name"]

"""The pod webhooks: validation and mutation of pods for this scheduler.

Only pods whose ``schedulerName`` is ours are looked at (the webhook configurations send only
those, with a match condition; the check here covers API servers without match conditions).

Validation (CREATE): the GPU request through the one parser (:mod:`kai.api.gpu_request`,
contradictions named); a queue label must name an existing **leaf** queue, and a leaf that
lists ``namespaces`` takes pods from those namespaces only.

Mutation (CREATE), idempotent so that ``reinvocationPolicy: IfNeeded`` and any other webhook's
reordering leave the same result:

- the ``kai.scheduler/queue`` label from the namespace -> queue binding when the pod has neither
  that label nor KAI's legacy ``project`` label;
- fractional GPU pods (``gpu-fraction`` / ``gpu-memory``), as KAI's binder expects them: the
  ``runai/shared-gpu-configmap`` annotation (a name prefix, kept when present), and in the
  receiving container the env vars ``NVIDIA_VISIBLE_DEVICES``, ``RUNAI_NUM_OF_GPUS`` and
  ``GPU_PORTION`` read from ConfigMap ``<prefix>-<index>`` (``-i<index>`` for an init
  container), ``envFrom`` ConfigMap ``<prefix>-<index>-evar``, and the pod volume
  ``<prefix>-<index>-vol`` of the first ConfigMap. The binder writes both ConfigMaps at bind
  time; the kubelet starts the container only once they exist;
- ``runtimeClassName`` on GPU pods that have none, when one is configured.
"""

from __future__ import annotations

import random
from typing import Any

import orjson

from kai.api.gpu_request import (
    MIG_PREFIX,
    PARSED_ANNOTATIONS,
    GpuRequestError,
    ParsedGpuRequest,
    gpu_request_from_pod,
)
from kai.api.namespace_queues import PROJECT_LABEL, QUEUE_LABEL, resolve_queue
from kai.webhooks.cluster import ClusterView
from kai.webhooks.review import Request, Verdict, json_patch

__all__ = ["PodMutator", "PodValidator", "configmap_prefix"]

SHARED_GPU_CONFIGMAP = "runai/shared-gpu-configmap"
SHARED_GPU_ENV = ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION")
MAX_VOLUME_NAME = 63
_RANDOM_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # as Kubernetes' rand.String: no vowels
_random = random.Random()  # a name suffix, not a secret


_PARSED: dict[tuple[Any, ...], ParsedGpuRequest] = {}
_PARSED_MAX = 1024


def _gpu_request(pod: dict[str, Any]) -> ParsedGpuRequest:
    """:func:`gpu_request_from_pod`, remembered for pods that ask the same.

    The parse reads the ``PARSED_ANNOTATIONS`` and each container's name, resources and (init
    containers) restart policy; the pod's name appears only in errors, which are never
    remembered. Pods of one workload ask the same, so both pod webhooks parse each shape once
    (the result is immutable and shared). Anything unusual is parsed every time.
    """
    md, spec = pod.get("metadata"), pod.get("spec")
    if not isinstance(md, dict) or not isinstance(spec, dict):
        return gpu_request_from_pod(pod)
    annotations = md.get("annotations") or {}
    if not isinstance(annotations, dict) or any(k.startswith(MIG_PREFIX) for k in annotations):
        return gpu_request_from_pod(pod)
    shape: list[Any] = [annotations.get(k) for k in PARSED_ANNOTATIONS]
    for field in ("initContainers", "containers"):
        containers = spec.get(field) or []
        if not isinstance(containers, list):
            return gpu_request_from_pod(pod)
        shape.append(field)
        for c in containers:
            if not isinstance(c, dict):
                return gpu_request_from_pod(pod)
            resources = c.get("resources")
            shape.append(
                (
                    c.get("name"),
                    orjson.dumps(resources, option=orjson.OPT_SORT_KEYS) if resources else None,
                    c.get("restartPolicy"),
                )
            )
    try:
        key = tuple(shape)
        parsed = _PARSED.get(key)
    except TypeError:  # a value that cannot be a key (e.g. a list as a name)
        return gpu_request_from_pod(pod)
    if parsed is None:
        parsed = gpu_request_from_pod(pod)  # may raise: not remembered
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = parsed
    return parsed


def _scheduler_pod(pod: dict[str, Any], scheduler: str) -> bool:
    return (pod.get("spec") or {}).get("schedulerName") == scheduler


def configmap_prefix(pod: dict[str, Any], index_text: str) -> str:
    """KAI's name prefix: ``<owner or pod name, cut>-<7 random>-shared-gpu``.

    The cut keeps ``<prefix>-<index>-evar`` and the volume ``<prefix>-<index>-vol`` within 63
    characters.
    """
    md = pod.get("metadata") or {}
    owners = md.get("ownerReferences") or []
    base = str(
        (owners[0].get("name") if owners else None)
        or md.get("name")
        or str(md.get("generateName") or "pod").rstrip("-")
    )
    room = MAX_VOLUME_NAME - (7 + 6) - len("shared-gpu") - len(index_text) - 1 - 5
    base = base[:room].rstrip("-.") or "pod"
    suffix = "".join(_random.choices(_RANDOM_ALPHABET, k=7))
    return f"{base}-{suffix}-shared-gpu"


def _writable_copy(pod: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``pod`` that the mutation may change without touching ``pod``.

    Only what the mutation assigns to is copied: the pod, its metadata and spec, and each
    container (one level each). Everything below them (``managedFields``, env entries, volume
    sources...) is shared, which is safe because the mutation only ever *replaces* those values
    (``_set_env`` and friends build new lists and dicts), never changes them in place; and
    :func:`json_patch` then skips the shared values at once (an object equals itself).
    """
    out = dict(pod)
    out["metadata"] = dict(pod.get("metadata") or {})
    spec = out["spec"] = dict(pod.get("spec") or {})
    for key in ("containers", "initContainers"):
        if isinstance(spec.get(key), list):
            spec[key] = [dict(c) if isinstance(c, dict) else c for c in spec[key]]
    return out


def _patch(pod: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """:func:`json_patch` of ``pod`` to ``after`` (a :func:`_writable_copy` the mutation
    changed), looking only where the mutation can write: the metadata's labels and
    annotations, the spec's ``runtimeClassName`` and ``volumes``, and each container. The rest
    of ``after`` is ``pod``'s own objects, shared, so comparing it would find nothing (and
    cost as much as the pod is large). The operations are those :func:`json_patch` gives for
    the whole pod, in the same order (tests/webhooks/test_webhook_pods.py checks this).
    """
    ops: list[dict[str, Any]] = []
    for part, after_part in after.items():
        keys = _MUTABLE.get(part)
        if keys is None:
            continue  # pod's own value, shared
        if part not in pod:
            ops.append({"op": "add", "path": f"/{part}", "value": after_part})
            continue
        before_part = pod[part]
        if not isinstance(before_part, dict) or not isinstance(after_part, dict):
            ops.extend(json_patch(before_part, after_part, [part]))
            continue
        for key, value in after_part.items():
            if key not in keys:
                continue  # written only by copying: the pod's own value
            if key not in before_part:
                ops.append({"op": "add", "path": f"/{part}/{key}", "value": value})
            elif before_part[key] is not value and before_part[key] != value:
                ops.extend(json_patch(before_part[key], value, [part, key]))
    return ops


#: where the mutation writes: (part of the pod) -> its keys the mutation may set
_MUTABLE = {
    "metadata": frozenset({"labels", "annotations"}),
    "spec": frozenset({"runtimeClassName", "volumes", "containers", "initContainers"}),
}


def _set_env(container: dict[str, Any], name: str, configmap: str) -> None:
    env = [e for e in container.get("env") or [] if e.get("name") != name]
    wanted = {"name": name, "valueFrom": {"configMapKeyRef": {"name": configmap, "key": name}}}
    existing = [e for e in container.get("env") or [] if e.get("name") == name]
    if existing == [wanted]:
        return
    env.append(wanted)
    container["env"] = env


def _set_env_from(container: dict[str, Any], configmap: str) -> None:
    sources = container.get("envFrom") or []
    if any((s.get("configMapRef") or {}).get("name") == configmap for s in sources):
        return
    container["envFrom"] = [*sources, {"configMapRef": {"name": configmap}}]


def _set_volume(spec: dict[str, Any], name: str, configmap: str) -> None:
    wanted = {"name": name, "configMap": {"name": configmap}}
    volumes = spec.get("volumes") or []
    if wanted in volumes:
        return
    spec["volumes"] = [v for v in volumes if v.get("name") != name] + [wanted]


class PodMutator:
    #: what the API server sends to this webhook (its registration's rules)
    kinds = frozenset({("", "Pod")})

    def __init__(
        self,
        cluster: ClusterView,
        *,
        scheduler_name: str = "kai-scheduler",
        gpu_runtime_class: str = "",
    ) -> None:
        self.cluster = cluster
        self.scheduler_name = scheduler_name
        self.gpu_runtime_class = gpu_runtime_class

    def __call__(self, req: Request) -> Verdict:
        pod = req.object
        if req.operation != "CREATE" or pod is None or not _scheduler_pod(pod, self.scheduler_name):
            return Verdict()
        after = self.mutate(pod, req.namespace)
        return Verdict(patch=_patch(pod, after) or None)

    def mutate(self, pod: dict[str, Any], namespace: str) -> dict[str, Any]:
        """The pod as it should be stored (a copy; ``pod`` is left alone)."""
        out = _writable_copy(pod)
        md, spec = out["metadata"], out["spec"]
        labels = md.get("labels") or {}
        if not labels.get(QUEUE_LABEL) and not labels.get(PROJECT_LABEL):
            # the pod-grouper's resolver, minus its default queue (left to the pod-grouper)
            queue = resolve_queue(
                namespace or md.get("namespace", ""),
                labels,
                None,
                self.cluster.namespace_queues(),
                default_queue="",
            )
            if queue:
                md["labels"] = {**labels, QUEUE_LABEL: queue}
        try:
            parsed = _gpu_request(out)
        except GpuRequestError:
            return out  # refused by the validating webhook, with the reason
        request = parsed.request
        if parsed.is_fractional:
            self._share(out, parsed.container)
        uses_gpu = request.whole > 0 or request.is_shared or request.is_mig
        if uses_gpu and self.gpu_runtime_class and not spec.get("runtimeClassName"):
            spec["runtimeClassName"] = self.gpu_runtime_class
        return out

    def _share(self, pod: dict[str, Any], container_name: str | None) -> None:
        md, spec = pod["metadata"], pod["spec"]
        target: dict[str, Any] | None = None
        index_text = "0"
        for key, prefix in (("containers", ""), ("initContainers", "i")):
            for i, container in enumerate(spec.get(key) or []):
                if container.get("name") == container_name:
                    target, index_text = container, f"{prefix}{i}"
                    break
            if target is not None:
                break
        if target is None:
            containers = spec.get("containers") or []
            if not containers:
                return
            target = containers[0]
        annotations = md.get("annotations") or {}
        prefix = str(annotations.get(SHARED_GPU_CONFIGMAP) or "")
        if not prefix:
            prefix = configmap_prefix(pod, index_text)
            md["annotations"] = {**annotations, SHARED_GPU_CONFIGMAP: prefix}
        configmap = f"{prefix}-{index_text}"
        for name in SHARED_GPU_ENV:
            _set_env(target, name, configmap)
        _set_env_from(target, f"{configmap}-evar")
        _set_volume(spec, f"{configmap}-vol", configmap)


class PodValidator:
    #: what the API server sends to this webhook (its registration's rules)
    kinds = frozenset({("", "Pod")})

    def __init__(self, cluster: ClusterView, *, scheduler_name: str = "kai-scheduler") -> None:
        self.cluster = cluster
        self.scheduler_name = scheduler_name

    def __call__(self, req: Request) -> Verdict:
        return self._decide(req, live=True)  # type: ignore[return-value]

    def from_cache(self, req: Request) -> Verdict | None:
        """The verdict from the caches alone, or None when the pod would be refused for its
        queue: the cache may lag a queue created a moment ago, and only a live read may
        refuse (the server then calls this validator in full, on a pool worker)."""
        return self._decide(req, live=False)

    def _decide(self, req: Request, *, live: bool) -> Verdict | None:
        pod = req.object
        if pod is None or not _scheduler_pod(pod, self.scheduler_name):
            return Verdict()
        try:
            _gpu_request(pod)
        except GpuRequestError as exc:
            return Verdict.deny(str(exc))
        labels = (pod.get("metadata") or {}).get("labels") or {}
        queue = labels.get(QUEUE_LABEL)
        if not queue:
            return Verdict()
        namespace = req.namespace or (pod.get("metadata") or {}).get("namespace") or ""
        problem = self._queue_problem(queue, namespace, fresh=False)
        if problem is None:
            return Verdict()
        if not live:
            return None
        # the cache may lag a queue created a moment ago: ask the API server before refusing
        problem = self._queue_problem(queue, namespace, fresh=True)
        if problem is not None:
            return Verdict.deny(f"pod {namespace}/{_name(pod)}: label {QUEUE_LABEL}: {problem}")
        return Verdict()

    def _queue_problem(self, queue: str, namespace: str, *, fresh: bool) -> str | None:
        index = self.cluster.queues(fresh=fresh)
        info = index.get(queue)
        if info is None:
            return f"queue {queue!r} does not exist; create it or use an existing leaf queue"
        if info.children:
            kids = ", ".join(sorted(info.children))
            return (
                f"queue {queue!r} is not a leaf (it has child queues: {kids}); only leaf queues "
                "take workloads"
            )
        if info.namespaces and namespace not in info.namespaces:
            allowed = ", ".join(info.namespaces)
            return (
                f"queue {queue!r} takes workloads only from the namespaces {allowed} "
                f"(its namespaces field), not from {namespace!r}"
            )
        return None


def _name(pod: dict[str, Any]) -> str:
    md = pod.get("metadata") or {}
    return str(md.get("name") or (str(md.get("generateName") or "") + "<generated>"))

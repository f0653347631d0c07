"""The webhook configurations: what the API server sends to ``kai webhook``, and how.

One ValidatingWebhookConfiguration and one MutatingWebhookConfiguration, both named
``kai-webhook``:

- ``policies.webhook.kai.scheduler``: QueueTree, TopologyPolicy, SharingPolicy,
  SchedulerPolicy, Queue (CREATE, UPDATE, DELETE) and Topology (CREATE, UPDATE); Fail, 10 s;
- ``podgroups.webhook.kai.scheduler``: PodGroup CREATE, UPDATE; Fail, 5 s;
- ``pods.webhook.kai.scheduler`` (validating and mutating): pods with our schedulerName,
  CREATE; Fail, 3 s; the mutating one with ``reinvocationPolicy: IfNeeded``.

The pod webhooks carry a match condition on ``spec.schedulerName`` and a namespace selector that
leaves out ``kube-system`` and kai's own namespace, so an outage of ``kai webhook`` stops only
pods meant for kai (which could not run correctly without it), never the rest of the cluster.
A second match condition (CEL, evaluated inside the API server) sends a pod only when the
webhook could act on it: the mutating one when the pod might get a queue label, GPU sharing or a
runtime class (:func:`mutation_condition`), the validating one when the pod carries something
the validation can refuse (:func:`validation_condition`). Every other pod of kai costs the API
server no call. docs/webhooks.md explains each choice.
"""

from __future__ import annotations

import base64
import logging
from typing import Any

from kai.api.gpu_request import (
    GPU_FRACTION,
    GPU_MEMORY,
    GPU_RESOURCE,
    MIG_PREFIX,
    PARSED_ANNOTATIONS,
)
from kai.api.namespace_queues import PROJECT_LABEL, QUEUE_LABEL
from kai.kube.client import ApiError, Kube, Resource

log = logging.getLogger("kai.webhook")

NAME = "kai-webhook"
VALIDATING = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    False,
    "ValidatingWebhookConfiguration",
)
MUTATING = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    False,
    "MutatingWebhookConfiguration",
)

#: URL path -> webhook name
PATHS = {
    "/validate/policies": "policies.webhook.kai.scheduler",
    "/validate/podgroups": "podgroups.webhook.kai.scheduler",
    "/validate/pods": "pods.webhook.kai.scheduler",
    "/mutate/pods": "pods.webhook.kai.scheduler",
}


def _client(base: dict[str, Any], path: str, ca_bundle: bytes) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if "url" in base:
        config["url"] = base["url"].rstrip("/") + path
    else:
        config["service"] = {**base["service"], "path": path}
    if ca_bundle:
        config["caBundle"] = base64.b64encode(ca_bundle).decode()
    return config


def _has_label(name: str) -> str:
    """CEL: the pod has the label ``name`` with a non-empty value."""
    key = _cel_string(name)
    return (
        f"(has(object.metadata.labels) && {key} in object.metadata.labels && "
        f"object.metadata.labels[{key}] != '')"
    )


def _has_annotation(*names: str) -> str:
    keys = " || ".join(f"{_cel_string(n)} in object.metadata.annotations" for n in names)
    return f"(has(object.metadata.annotations) && ({keys}))"


def mutation_condition(gpu_runtime_class: str = "") -> str:
    """CEL: the pod may need kai's mutation (:class:`kai.webhooks.pods.PodMutator`), exactly:

    - no non-empty queue label and no legacy ``project`` label: the namespace binding may give
      it one (the binding lives in the cluster, so every such pod is sent);
    - a ``gpu-fraction`` or ``gpu-memory`` annotation: GPU sharing's env, volume, ConfigMaps;
    - with a GPU runtime class configured, no ``runtimeClassName`` (the webhook decides whether
      the pod uses a GPU).

    A pod outside all three is left exactly as it is by the mutation, so it is not sent.
    """
    labelled = f"({_has_label(QUEUE_LABEL)} || {_has_label(PROJECT_LABEL)})"
    parts = [f"!{labelled}", _has_annotation(GPU_FRACTION, GPU_MEMORY)]
    if gpu_runtime_class:
        parts.append("(!has(object.spec.runtimeClassName) || object.spec.runtimeClassName == '')")
    return " || ".join(parts)


def _gpu_resources(containers: str) -> str:
    """CEL: a container of ``object.spec.<containers>`` asks for a GPU or MIG resource."""

    def asks(field: str) -> str:
        return (
            f"(has(c.resources.{field}) && c.resources.{field}.exists(k, "
            f"k == {_cel_string(GPU_RESOURCE)} || k.startsWith({_cel_string(MIG_PREFIX)})))"
        )

    return (
        f"(has(object.spec.{containers}) && object.spec.{containers}.exists(c, "
        f"has(c.resources) && ({asks('limits')} || {asks('requests')})))"
    )


def validation_condition() -> str:
    """CEL: the pod carries something :class:`kai.webhooks.pods.PodValidator` can refuse:

    - a non-empty queue label (the queue must exist, be a leaf and take the namespace);
    - an annotation the GPU-request parser reads, or one with the MIG prefix (legacy MIG);
    - a container or init container asking for ``nvidia.com/gpu`` or a MIG profile.

    Without any of them the parser finds no GPU request and nothing to contradict, and there
    is no queue to check: the pod would be allowed, so it is not sent.
    """
    mig_annotation = (
        "(has(object.metadata.annotations) && object.metadata.annotations.exists(k, "
        f"k.startsWith({_cel_string(MIG_PREFIX)})))"
    )
    return " || ".join(
        [
            _has_label(QUEUE_LABEL),
            _has_annotation(*PARSED_ANNOTATIONS),
            mig_annotation,
            _gpu_resources("containers"),
            _gpu_resources("initContainers"),
        ]
    )


def _pod_scope(namespace: str, scheduler_name: str, condition: tuple[str, str]) -> dict[str, Any]:
    return {
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": sorted({"kube-system", namespace}),
                }
            ]
        },
        "matchConditions": [
            {
                "name": "kai-scheduler-pods",
                "expression": f"object.spec.schedulerName == {_cel_string(scheduler_name)}",
            },
            {"name": condition[0], "expression": condition[1]},
        ],
    }


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def configurations(
    client: dict[str, Any],
    ca_bundle: bytes,
    *,
    namespace: str = "kai-scheduler",
    scheduler_name: str = "kai-scheduler",
    gpu_runtime_class: str = "",
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (validating, mutating) configurations. ``client`` is ``{"url": BASE}`` or
    ``{"service": {"namespace", "name", "port"}}``; each webhook appends its path.
    ``gpu_runtime_class`` is the webhook's ``--gpu-runtime-class`` (it widens the mutating
    webhook's match condition)."""
    labels = {"app.kubernetes.io/part-of": "kai", "app.kubernetes.io/managed-by": "kai"}
    common = {"admissionReviewVersions": ["v1"], "sideEffects": "None"}
    validated_pods = _pod_scope(
        namespace, scheduler_name, ("kai-can-refuse", validation_condition())
    )
    mutated_pods = _pod_scope(
        namespace, scheduler_name, ("kai-may-mutate", mutation_condition(gpu_runtime_class))
    )
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": NAME, "labels": labels},
        "webhooks": [
            {
                "name": PATHS["/validate/policies"],
                "clientConfig": _client(client, "/validate/policies", ca_bundle),
                "rules": [
                    {
                        "apiGroups": ["gitops.kai.scheduler"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": [
                            "queuetrees",
                            "topologypolicies",
                            "sharingpolicies",
                            "schedulerpolicies",
                        ],
                        "scope": "*",
                    },
                    {
                        "apiGroups": ["scheduling.run.ai"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": ["queues"],
                        "scope": "*",
                    },
                    {
                        "apiGroups": ["kai.scheduler"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["topologies"],
                        "scope": "*",
                    },
                ],
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                **common,
            },
            {
                "name": PATHS["/validate/podgroups"],
                "clientConfig": _client(client, "/validate/podgroups", ca_bundle),
                "rules": [
                    {
                        "apiGroups": ["scheduling.run.ai"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["podgroups"],
                        "scope": "*",
                    }
                ],
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
                **common,
            },
            {
                "name": PATHS["/validate/pods"],
                "clientConfig": _client(client, "/validate/pods", ca_bundle),
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "failurePolicy": "Fail",
                "timeoutSeconds": 3,
                **validated_pods,
                **common,
            },
        ],
    }
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": NAME, "labels": labels},
        "webhooks": [
            {
                "name": PATHS["/mutate/pods"],
                "clientConfig": _client(client, "/mutate/pods", ca_bundle),
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "failurePolicy": "Fail",
                "timeoutSeconds": 3,
                "reinvocationPolicy": "IfNeeded",
                **mutated_pods,
                **common,
            }
        ],
    }
    return validating, mutating


def apply(kube: Kube, objects: tuple[dict[str, Any], ...]) -> None:
    """Create each configuration, or replace the stored one (self-registration)."""
    for obj in objects:
        res = VALIDATING if obj["kind"] == VALIDATING.kind else MUTATING
        for _attempt in range(5):
            try:
                current = kube.get(res, obj["metadata"]["name"])
            except ApiError as exc:
                if exc.status != 404:
                    raise
                try:
                    kube.create(res, obj)
                    break
                except ApiError as exc2:
                    if exc2.status == 409:
                        continue
                    raise
            body = {**obj, "metadata": {**obj["metadata"]}}
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                kube.replace(res, body)
                break
            except ApiError as exc:
                if exc.status != 409:
                    raise


def remove(kube: Kube) -> None:
    for res in (VALIDATING, MUTATING):
        try:
            kube.delete(res, NAME)
        except ApiError as exc:
            if exc.status != 404:
                raise


def publish_ca_bundle(kube: Kube, ca_bundle: bytes) -> int:
    """Set ``caBundle`` on every webhook of the two ``kai-webhook`` configurations that exist
    (installed by the chart or self-registered). Returns how many webhooks were changed."""
    encoded = base64.b64encode(ca_bundle).decode()
    changed = 0
    for res in (VALIDATING, MUTATING):
        try:
            current = kube.get(res, NAME)
        except ApiError as exc:
            if exc.status == 404:
                continue
            raise
        ops = []
        for i, hook in enumerate(current.get("webhooks") or []):
            if (hook.get("clientConfig") or {}).get("caBundle") != encoded:
                ops.append(
                    {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": encoded}
                )
        if ops:
            ops.insert(
                0,
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": current["metadata"]["resourceVersion"],
                },
            )
            kube.patch(res, NAME, ops, content_type="application/json-patch+json")
            changed += len(ops) - 1
            log.info("caBundle of %s/%s updated", res.kind, NAME)
    return changed

"""Small helpers shared by the API conformance tests."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from helpers.polling import eventually  # noqa: F401  (re-exported for the tests here)

# ConfigMaps a real cluster's controllers put into every namespace (kube-root-ca.crt by
# kube-controller-manager; the service CA bundle by some distributions). Tests must not assume
# an empty namespace: they ignore these by name.
SYSTEM_CONFIGMAPS = frozenset({"kube-root-ca.crt", "openshift-service-ca.crt"})


def ours(names: list[str]) -> list[str]:
    """``names`` without the ConfigMaps a real cluster creates by itself, order kept."""
    return [n for n in names if n not in SYSTEM_CONFIGMAPS]


def pod(name: str, **spec: Any) -> dict[str, Any]:
    labels = spec.pop("labels", None)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec},
    }
    if labels:
        body["metadata"]["labels"] = labels
    return body


def status_of(exc: client.ApiException) -> dict[str, Any]:
    return json.loads(exc.body)

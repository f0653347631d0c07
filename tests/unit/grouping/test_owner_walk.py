"""The top-owner walk: discovery for resource names, a cache, UID checks, no permission."""

from __future__ import annotations

from typing import Any

import pytest

from kai.kube.client import ApiError
from kai.reconcilers.grouping.owners import OwnerMissing, OwnerReader

DISCOVERY = {
    "/apis/apps/v1": {
        "resources": [
            {"name": "replicasets", "kind": "ReplicaSet", "namespaced": True},
            {"name": "replicasets/status", "kind": "ReplicaSet", "namespaced": True},
            {"name": "deployments", "kind": "Deployment", "namespaced": True},
        ]
    },
    "/apis/secret.example/v1": {
        "resources": [{"name": "vaults", "kind": "Vault", "namespaced": True}]
    },
}


class FakeKube:
    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects
        self.calls: list[str] = []

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.calls.append(path)
        if path in DISCOVERY:
            return DISCOVERY[path]
        if path.startswith("/apis/secret.example"):
            raise ApiError(403, {"message": "forbidden"}, f"GET {path}")
        if path not in self.objects:
            raise ApiError(404, {"message": "not found"}, f"GET {path}")
        return dict(self.objects[path])


def _ref(kind: str, name: str, uid: str, api_version: str = "apps/v1") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}


DEP = {"metadata": {"name": "web", "namespace": "ns", "uid": "d1"}}
RS = {
    "metadata": {
        "name": "web-1",
        "namespace": "ns",
        "uid": "r1",
        "ownerReferences": [_ref("Deployment", "web", "d1")],
    }
}
POD = {
    "metadata": {
        "name": "web-1-a",
        "namespace": "ns",
        "ownerReferences": [_ref("ReplicaSet", "web-1", "r1")],
    }
}


def test_walks_to_the_top_owner_and_caches() -> None:
    kube = FakeKube(
        {
            "/apis/apps/v1/namespaces/ns/replicasets/web-1": RS,
            "/apis/apps/v1/namespaces/ns/deployments/web": DEP,
        }
    )
    reader = OwnerReader(kube)  # type: ignore[arg-type]
    chain = reader.chain(POD)
    assert [o["kind"] for o in chain] == ["ReplicaSet", "Deployment"]
    assert reader.chain(POD)[1]["metadata"]["uid"] == "d1"
    assert reader.reads == 2  # the second walk came from the cache
    assert kube.calls.count("/apis/apps/v1") == 1


def test_missing_or_replaced_owner() -> None:
    replaced = {"metadata": {**RS["metadata"], "uid": "r2"}}
    kube = FakeKube({"/apis/apps/v1/namespaces/ns/replicasets/web-1": replaced})
    reader = OwnerReader(kube)  # type: ignore[arg-type]
    with pytest.raises(OwnerMissing, match="owner ReplicaSet web-1"):
        reader.chain(POD)
    assert reader.reads == 2  # read again once for the UID


def test_an_owner_it_may_not_read_ends_the_walk() -> None:
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "ownerReferences": [_ref("Vault", "v", "u9", "secret.example/v1")],
        }
    }
    chain = OwnerReader(FakeKube({})).chain(pod)  # type: ignore[arg-type]
    assert chain == [
        {
            "apiVersion": "secret.example/v1",
            "kind": "Vault",
            "metadata": {"name": "v", "namespace": "ns", "uid": "u9"},
        }
    ]

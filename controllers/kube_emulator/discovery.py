"""Discovery documents: /version, /api, /apis, /apis/<group>, and per-version resource lists.

Only the legacy (unaggregated) discovery format is served; kubectl falls back to it when the
answer to its aggregated-discovery Accept header comes back as plain ``application/json``."""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kube_emulator.operations import ApiCore
    from kube_emulator.resources import ResourceType

_SUB_KIND = {"binding": "Binding", "eviction": "Eviction"}
# subresources served in another group version than their resource
_SUB_GROUP = {"eviction": ("policy", "v1")}
_SUB_VERBS = {
    "status": ["get", "patch", "update"],
    "binding": ["create"],
    "eviction": ["create"],
    "finalize": ["update"],
}


def version_info(git_version: str) -> dict[str, Any]:
    core = git_version.lstrip("v").split("-")[0].split(".")
    return {
        "major": core[0],
        "minor": core[1] if len(core) > 1 else "0",
        "gitVersion": git_version,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": f"python{platform.python_version()}",
        "compiler": "cpython",
        "platform": f"{platform.system().lower()}/{platform.machine()}",
    }


def _groups(core: ApiCore) -> dict[str, list[str]]:
    """group -> served versions, preferred first (built-in groups before CRD groups)."""
    out: dict[str, list[str]] = {}
    for rt in list(core.types.values()):
        versions = out.setdefault(rt.group, [])
        for v in rt.versions:
            if v not in versions:
                versions.append(v)
    return out


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group_doc(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(core: ApiCore) -> dict[str, Any]:
    groups = [_group_doc(g, vs) for g, vs in _groups(core).items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(core: ApiCore, group: str) -> dict[str, Any] | None:
    versions = _groups(core).get(group)
    if not versions or not group:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group, versions)}


def _entry(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def resource_list(core: ApiCore, group: str, version: str) -> dict[str, Any] | None:
    resources: list[dict[str, Any]] = []
    found = False
    for rt in sorted(list(core.types.values()), key=lambda r: r.plural):
        if rt.group != group or version not in rt.versions:
            continue
        found = True
        resources.append(_entry(rt))
        for sub in sorted(rt.subresources):
            entry: dict[str, Any] = {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": _SUB_KIND.get(sub, rt.kind),
                "verbs": _SUB_VERBS.get(sub, ["get"]),
            }
            if sub in _SUB_GROUP:
                entry["group"], entry["version"] = _SUB_GROUP[sub]
            resources.append(entry)
    if not found:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }

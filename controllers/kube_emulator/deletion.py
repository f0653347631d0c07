"""Deletion: preconditions, finalizers, graceful pod deletion, namespaces, propagation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kube_emulator import meta
from kube_emulator.errors import ApiError, conflict, field_cause, invalid, not_found

if TYPE_CHECKING:
    from kube_emulator.operations import ApiCore, WriteOptions
    from kube_emulator.resources import ResourceType

CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
NS_KEY = ("", "namespaces")
PODS_KEY = ("", "pods")


def delete(
    core: ApiCore,
    rt: ResourceType,
    version: str,
    ns: str | None,
    name: str,
    body: Any,
    q: dict[str, str],
    opts: WriteOptions,
) -> dict[str, Any]:
    options = body if isinstance(body, dict) else {}
    grace = options.get("gracePeriodSeconds", q.get("gracePeriodSeconds"))
    grace_s: int | None = None
    if grace not in (None, ""):
        try:
            grace_s = max(0, int(grace))
        except (TypeError, ValueError) as exc:
            raise ApiError(
                400, f"gracePeriodSeconds must be a whole number of seconds, got {grace!r}"
            ) from exc
    pre = options.get("preconditions") or {}
    if not isinstance(pre, dict):
        raise ApiError(400, "preconditions must be an object with uid and/or resourceVersion")
    policy = options.get("propagationPolicy") or q.get("propagationPolicy")
    if policy is None:
        orphan = options.get("orphanDependents", q.get("orphanDependents"))
        if orphan in (True, "true"):
            policy = "Orphan"
        elif orphan in (False, "false"):
            policy = "Background"
    if policy is not None and policy not in ("Orphan", "Background", "Foreground"):
        raise invalid(
            "DeleteOptions",
            "",
            name,
            [
                field_cause(
                    "propagationPolicy",
                    f'Unsupported value: "{policy}": supported values: '
                    '"Foreground", "Background", "Orphan", "nil"',
                    "FieldValueNotSupported",
                )
            ],
        )
    cur = core.store.get(rt.store_key, ns or "", name)
    if cur is None:
        raise not_found(rt.plural, rt.group, name)
    core.admission.validate(
        "DELETE", rt, version, "", None, core.at_version(rt, cur, version), opts
    )
    with core.store.lock:
        cur = core.store.get(rt.store_key, ns or "", name)
        if cur is None:
            raise not_found(rt.plural, rt.group, name)
        cmd = cur["metadata"]
        if pre.get("uid") and pre["uid"] != cmd.get("uid"):
            raise conflict(
                rt.plural,
                rt.group,
                name,
                "Precondition failed: UID in "
                f"precondition: {pre['uid']}, UID in object meta: {cmd.get('uid')}",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != cmd["resourceVersion"]:
            raise conflict(
                rt.plural,
                rt.group,
                name,
                "Precondition failed: "
                f"ResourceVersion in precondition: {pre['resourceVersion']}, "
                f"ResourceVersion in object meta: {cmd['resourceVersion']}",
            )
        if opts.dry_run:
            return core.at_version(rt, cur, version)
        result = delete_locked(core, rt, cur, grace_s, policy or rt.default_propagation)
    return core.at_version(rt, result, version)


def delete_locked(
    core: ApiCore, rt: ResourceType, cur: dict[str, Any], grace: int | None, policy: str
) -> dict[str, Any]:
    """The deletion rules (lock held); returns the object's final or pending state."""
    cmd = cur["metadata"]
    finalizers = list(cmd.get("finalizers") or [])
    if policy == "Orphan":
        core.collector.orphan_dependents(cmd["uid"])
    elif (
        policy == "Foreground"
        and "foregroundDeletion" not in finalizers
        and core.store.owner_index.get(cmd["uid"])
    ):
        finalizers.append("foregroundDeletion")
    pending_grace = 0
    if rt.key == PODS_KEY and core.options.pod_deletion == "kubelet":
        spec, status = cur.get("spec") or {}, cur.get("status") or {}
        terminal = status.get("phase") in ("Succeeded", "Failed")
        if spec.get("nodeName") and not terminal:
            pending_grace = (
                grace if grace is not None else int(spec.get("terminationGracePeriodSeconds", 30))
            )
            if cmd.get("deletionTimestamp"):
                pending_grace = min(pending_grace, int(cmd.get("deletionGracePeriodSeconds") or 0))
    if rt.key == NS_KEY:
        finalizers_spec = (cur.get("spec") or {}).get("finalizers") or []
        if cmd.get("deletionTimestamp"):
            return cur
        new = dict(cur)
        new["metadata"] = (
            {**cmd, "deletionTimestamp": meta.now(), "finalizers": finalizers}
            if finalizers
            else {**cmd, "deletionTimestamp": meta.now()}
        )
        new["status"] = {**(cur.get("status") or {}), "phase": "Terminating"}
        new["spec"] = {**(cur.get("spec") or {}), "finalizers": finalizers_spec}
        core.store.next_rv()
        stored = with_rv(new, core.store.rv)
        core.store.commit(rt.store_key, "MODIFIED", stored, cur)
        core.collector.enqueue_namespace(cmd["name"])
        return stored
    if finalizers or pending_grace > 0:
        if (
            cmd.get("deletionTimestamp")
            and finalizers == list(cmd.get("finalizers") or [])
            and pending_grace == int(cmd.get("deletionGracePeriodSeconds") or 0)
        ):
            return cur
        new = dict(cur)
        md = dict(cmd)
        md.setdefault("deletionTimestamp", meta.now())
        md["deletionGracePeriodSeconds"] = pending_grace
        if finalizers:
            md["finalizers"] = finalizers
        new["metadata"] = md
        if rt.has_generation and not cmd.get("deletionTimestamp"):
            md["generation"] = int(cmd.get("generation") or 0) + 1
        core.store.next_rv()
        stored = with_rv(new, core.store.rv)
        if not finalizers and pending_grace == 0:
            core.store.commit(rt.store_key, "DELETED", stored, cur)
            after_delete(core, rt, stored)
        else:
            core.store.commit(rt.store_key, "MODIFIED", stored, cur)
            if "foregroundDeletion" in finalizers:
                core.collector.enqueue_dependents(cmd["uid"], "Background")
        return stored
    core.store.next_rv()
    gone = with_rv(cur, core.store.rv)
    core.store.commit(rt.store_key, "DELETED", gone, cur)
    after_delete(core, rt, gone)
    return gone


def after_delete(core: ApiCore, rt: ResourceType, gone: dict[str, Any]) -> None:
    md = gone["metadata"]
    if rt.key == CRD_KEY:
        core._uninstall_crd(gone)
    if core.store.owner_index.get(md["uid"]):
        core.collector.enqueue_dependents(md["uid"], "Background")
    for ref in md.get("ownerReferences") or []:
        core.collector.enqueue_owner_check(ref, md.get("namespace") or "")
    if md.get("namespace"):
        core.collector.namespace_changed(md["namespace"])


def delete_collection(
    core: ApiCore,
    rt: ResourceType,
    version: str,
    ns: str | None,
    body: Any,
    q: dict[str, str],
    opts: WriteOptions,
) -> dict[str, Any]:
    listing = core.list_objects(
        rt, version, ns, {k: v for k, v in q.items() if k in ("labelSelector", "fieldSelector")}
    )
    deleted = []
    for item in listing["items"]:
        md = item["metadata"]
        try:
            deleted.append(core.delete(rt, version, md.get("namespace"), md["name"], body, q, opts))
        except ApiError as exc:
            if exc.code != 404:
                raise
    listing["items"] = deleted
    return listing


def with_rv(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    out = dict(obj)
    out["metadata"] = {**obj["metadata"], "resourceVersion": str(rv)}
    return out

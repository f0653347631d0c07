"""``pods/binding``: the only way a pod gets its node, at most once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kube_emulator import meta
from kube_emulator.errors import conflict, field_cause, invalid, not_found

if TYPE_CHECKING:
    from kube_emulator.operations import ApiCore, WriteOptions

PODS_KEY = ("", "pods")


def bind(core: ApiCore, ns: str, name: str, body: Any, opts: WriteOptions) -> dict[str, Any]:
    target = _target(name, body)
    pods = core.types[PODS_KEY]
    binding_obj = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": ns},
        "target": target,
    }
    core.admission.validate(
        "CREATE",
        pods,
        "v1",
        "binding",
        binding_obj,
        None,
        opts,
        object_kind=("", "v1", "Binding"),
    )
    with core.store.lock:
        cur = core.store.get(PODS_KEY, ns, name)
        if cur is None:
            raise not_found("pods", "", name)
        if cur["metadata"].get("deletionTimestamp"):
            raise conflict(
                "pods/binding",
                "",
                name,
                f"pod {name} is being deleted, cannot be assigned to a host",
            )
        assigned = (cur.get("spec") or {}).get("nodeName")
        if assigned:
            raise conflict(
                "pods/binding", "", name, f'pod {name} is already assigned to node "{assigned}"'
            )
        if opts.dry_run:
            return _success(201)
        extra = (body.get("metadata") or {}).get("annotations")
        core._commit_update(pods, cur, _bound(cur, target["name"], extra))
    return _success(201)


def _target(name: str, body: Any) -> dict[str, Any]:
    """The Binding's target: a Node, by name."""
    if not isinstance(body, dict) or not isinstance(body.get("target"), dict):
        raise invalid(
            "Binding", "", name, [field_cause("target", "Required value", "FieldValueRequired")]
        )
    target: dict[str, Any] = body["target"]
    if not target.get("name"):
        raise invalid(
            "Binding",
            "",
            name,
            [field_cause("target.name", "Required value", "FieldValueRequired")],
        )
    if target.get("kind", "Node") != "Node":
        raise invalid(
            "Binding",
            "",
            name,
            [
                field_cause(
                    "target.kind",
                    f"Invalid value: \"{target.get('kind')}\": must be empty or 'Node'",
                )
            ],
        )
    return target


def _bound(cur: dict[str, Any], node: str, annotations: dict[str, str] | None) -> dict[str, Any]:
    """The pod on ``node``, with the Binding's annotations and a PodScheduled condition."""
    new = dict(cur)
    new["spec"] = dict(cur.get("spec") or {})
    new["spec"]["nodeName"] = node
    new["metadata"] = dict(cur["metadata"])
    if annotations:
        new["metadata"]["annotations"] = {
            **(cur["metadata"].get("annotations") or {}),
            **annotations,
        }
    status = dict(cur.get("status") or {})
    conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    conds.append(
        {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": meta.now(),
        }
    )
    status["conditions"] = conds
    new["status"] = status
    return new


def _success(code: int) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}

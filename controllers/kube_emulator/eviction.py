"""``pods/eviction`` (policy/v1): delete a pod unless a PodDisruptionBudget forbids it.

The disruption controller is not simulated, so a budget's allowance is computed at eviction
time from the pods it selects: healthy = Ready and not being deleted; the desired number of
healthy pods comes from ``minAvailable`` or ``maxUnavailable`` (integers or percentages of the
selected pods). A healthy pod may go when healthy > desired; an unhealthy one when
healthy >= desired (the default ``IfHealthyBudget`` policy; ``AlwaysAllow`` lets unhealthy
pods go always).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from kube_emulator.errors import ApiError, not_found
from kube_emulator.selectors import match_label_selector_object

if TYPE_CHECKING:
    from kube_emulator.operations import ApiCore, WriteOptions

PODS_KEY = ("", "pods")
PDB_KEY = ("policy", "poddisruptionbudgets")


def _healthy(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _count(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        try:
            share = float(value[:-1]) / 100.0
        except ValueError as exc:
            raise ApiError(500, f"invalid percentage {value!r} in a PodDisruptionBudget") from exc
        return math.ceil(share * total) if round_up else math.floor(share * total)
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ApiError(500, f"invalid count {value!r} in a PodDisruptionBudget") from exc


def evict(core: ApiCore, ns: str, name: str, body: Any, opts: WriteOptions) -> dict[str, Any]:
    pods = core.types[PODS_KEY]
    pod = core.store.get(PODS_KEY, ns, name)
    if pod is None:
        raise not_found("pods", "", name)
    options = (body or {}).get("deleteOptions") if isinstance(body, dict) else None
    phase = (pod.get("status") or {}).get("phase")
    labels = pod["metadata"].get("labels") or {}
    budgets = [
        b
        for b in core.store.iter(PDB_KEY, ns)
        if (b.get("spec") or {}).get("selector") is not None
        and match_label_selector_object((b.get("spec") or {}).get("selector"), labels)
    ]
    # as the real server's canIgnorePDB: a pod that is not running yet, or is done, or is
    # already being deleted is evicted whatever the budgets say
    ignores_budgets = phase in ("Succeeded", "Failed", "Pending")
    if not ignores_budgets and not pod["metadata"].get("deletionTimestamp"):
        if len(budgets) > 1:
            raise ApiError(
                500,
                "This pod has more than one PodDisruptionBudget, which the "
                "eviction subresource does not support.",
                "InternalError",
            )
        if budgets:
            _check_budget(core, budgets[0], pod, ns)
    if opts.dry_run:
        return _success()
    core.delete(pods, "v1", ns, name, options or {}, {}, opts)
    return _success()


def _check_budget(core: ApiCore, budget: dict[str, Any], pod: dict[str, Any], ns: str) -> None:
    spec = budget.get("spec") or {}
    selected = [
        p
        for p in core.store.iter(PODS_KEY, ns)
        if match_label_selector_object(spec.get("selector"), p["metadata"].get("labels"))
    ]
    total = len(selected)
    healthy = sum(1 for p in selected if _healthy(p))
    if spec.get("minAvailable") is not None:
        desired = _count(spec["minAvailable"], total, round_up=True)
    elif spec.get("maxUnavailable") is not None:
        desired = total - _count(spec["maxUnavailable"], total, round_up=True)
    else:
        desired = total
    name = budget["metadata"]["name"]
    if _healthy(pod):
        allowed = healthy > desired
    else:
        allowed = spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow" or healthy >= desired
    if not allowed:
        raise ApiError(
            429,
            "Cannot evict pod as it would violate the pod's disruption budget.",
            "TooManyRequests",
            causes=[
                {
                    "reason": "DisruptionBudget",
                    "message": f"The disruption budget {name} needs {desired} healthy pods and has "
                    f"{healthy} currently",
                }
            ],
        )


def _success() -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

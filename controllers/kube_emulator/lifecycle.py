"""What the real API server's registries and built-in admission plugins do per kind on a write:
pod defaults and priority, node taints, namespace life cycle, CRD status."""

from __future__ import annotations

from typing import Any

from kube_emulator.errors import ApiError, field_cause, invalid

NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
SYSTEM_PRIORITY_CLASSES = (
    (
        "system-node-critical",
        2000001000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2000000000,
        "Used for system critical pods that must run in the "
        "cluster, but can be moved to another node if "
        "necessary.",
    ),
)


def _qos(pod: dict[str, Any]) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    requests_seen = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            requests_seen = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and req[r] != lim[r]):
                guaranteed = False
    if not requests_seen:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def pod_on_create(pod: dict[str, Any], priority_lookup: Any) -> None:
    """Defaults and checks for a new pod (raises 422/403 like the real server)."""
    name = pod["metadata"].get("name") or pod["metadata"].get("generateName") or ""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise invalid(
            "Pod", "", name, [field_cause("spec", "Required value", "FieldValueRequired")]
        )
    causes = []
    containers = spec.get("containers")
    if not containers:
        causes.append(field_cause("spec.containers", "Required value", "FieldValueRequired"))
    else:
        for i, c in enumerate(containers):
            if not isinstance(c, dict) or not c.get("name"):
                causes.append(
                    field_cause(
                        f"spec.containers[{i}].name", "Required value", "FieldValueRequired"
                    )
                )
            elif not c.get("image"):
                causes.append(
                    field_cause(
                        f"spec.containers[{i}].image", "Required value", "FieldValueRequired"
                    )
                )
    if causes:
        raise invalid("Pod", "", name, causes)
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("enableServiceLinks", True)
    for c in containers or []:
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault(
            "imagePullPolicy",
            "Always"
            if str(c.get("image", "")).endswith(":latest") or ":" not in str(c.get("image", ""))
            else "IfNotPresent",
        )
        res = c.setdefault("resources", {})
        # limits without requests default the requests, as the real defaulting does
        if res.get("limits"):
            req = res.setdefault("requests", {})
            for k, v in res["limits"].items():
                req.setdefault(k, v)
    cls_name = spec.get("priorityClassName")
    value, policy = priority_lookup(cls_name)
    if cls_name and value is None:
        raise ApiError(
            403,
            f'pods "{name}" is forbidden: no PriorityClass with name {cls_name} was found',
            "Forbidden",
            name=name,
            kind="pods",
        )
    if value is not None:
        if "priority" in spec and spec["priority"] != value:
            raise ApiError(
                403,
                f'pods "{name}" is forbidden: the integer value of priority '
                f"({spec['priority']}) must not be provided in pod spec; "
                "priority admission controller computed "
                f"{value} from the given PriorityClass name",
                "Forbidden",
                name=name,
                kind="pods",
            )
        spec["priority"] = value
        spec.setdefault("preemptionPolicy", policy or "PreemptLowerPriority")
    else:
        spec.setdefault("priority", 0)
    pod["status"] = {"phase": "Pending", "qosClass": _qos(pod)}
    if spec.get("nodeName"):
        # created already bound (static or pre-assigned pod)
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]


def node_on_create(node: dict[str, Any], taint_new_nodes: bool) -> None:
    if not taint_new_nodes:
        return
    spec = node.setdefault("spec", {})
    taints = spec.setdefault("taints", [])
    if not any(t.get("key") == NOT_READY_TAINT["key"] for t in taints):
        taints.append(dict(NOT_READY_TAINT))


def namespace_on_create(ns: dict[str, Any]) -> None:
    ns.setdefault("spec", {})["finalizers"] = ["kubernetes"]
    ns["status"] = {"phase": "Active"}
    labels = ns["metadata"].setdefault("labels", {})
    labels["kubernetes.io/metadata.name"] = ns["metadata"]["name"]


def crd_status(crd: dict[str, Any]) -> dict[str, Any]:
    names = dict(crd["spec"]["names"])
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", names["kind"] + "List")
    ts = crd["metadata"].get("creationTimestamp")
    return {
        "acceptedNames": names,
        "storedVersions": [v["name"] for v in crd["spec"]["versions"] if v.get("storage")],
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": ts,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": ts,
            },
        ],
    }


def secret_string_data(secret: dict[str, Any]) -> None:
    """``stringData`` is write-only: merged into ``data`` base64-encoded, as the server does."""
    import base64

    plain = secret.pop("stringData", None)
    if isinstance(plain, dict) and plain:
        data = dict(secret.get("data") or {})
        for k, v in plain.items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        secret["data"] = data


_POD_MUTABLE_SPEC = (
    "activeDeadlineSeconds",
    "tolerations",
    "terminationGracePeriodSeconds",
    "schedulingGates",
)


def check_pod_update(old: dict[str, Any], new: dict[str, Any]) -> None:
    def frozen(spec: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in spec.items() if k not in _POD_MUTABLE_SPEC}
        out["containers"] = [
            {k: v for k, v in c.items() if k != "image"} for c in spec.get("containers") or []
        ]
        out["initContainers"] = [
            {k: v for k, v in c.items() if k != "image"} for c in spec.get("initContainers") or []
        ]
        return out

    if frozen(new.get("spec") or {}) != frozen(old.get("spec") or {}):
        name = old["metadata"]["name"]
        raise invalid(
            "Pod",
            "",
            name,
            [
                field_cause(
                    "spec",
                    "Forbidden: pod updates may not change fields other than "
                    "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                    "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
                    "existing tolerations), `spec.terminationGracePeriodSeconds` (allow it to "
                    "be set to 1 if it was previously negative) or `spec.schedulingGates`",
                    "FieldValueForbidden",
                )
            ],
        )

"""Type shapes of the built-in kinds' fields that this server reads or writes.

Real API servers decode built-in objects into Go structs, so a field of the wrong JSON type is
refused with 400 before anything else happens. The server checks the same for every field it
touches itself (everything else in a built-in object is stored as sent), so malformed input
gets a clear error instead of failing somewhere inside. The shapes use the CRD schema dialect
and :mod:`schema_validation`, with unknown fields always allowed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Schema = dict[str, Any]


def _obj(**props: Schema) -> Schema:
    return {"type": "object", "properties": props, "x-kubernetes-preserve-unknown-fields": True}


def _arr(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def _map(values: Schema) -> Schema:
    return {"type": "object", "additionalProperties": values}


STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
BOOL: Schema = {"type": "boolean"}
ANY_OBJ: Schema = _obj()
QUANTITIES = _map({"x-kubernetes-int-or-string": True})
STRINGS = _arr(STR)
SELECTOR = _obj(
    matchLabels=_map(STR),
    matchExpressions=_arr(_obj(key=STR, operator=STR, values=STRINGS)),
)
CONTAINER = _obj(
    name=STR,
    image=STR,
    resources=_obj(limits=QUANTITIES, requests=QUANTITIES),
    env=_arr(_obj(name=STR)),
    ports=_arr(_obj(containerPort=INT)),
    volumeMounts=_arr(_obj(mountPath=STR)),
)
CONDITIONS = _arr(_obj(type=STR, status=STR))
POD = _obj(
    spec=_obj(
        containers=_arr(CONTAINER),
        initContainers=_arr(CONTAINER),
        tolerations=_arr(_obj(key=STR, operator=STR, value=STR, effect=STR)),
        priorityClassName=STR,
        priority=INT,
        nodeName=STR,
        schedulerName=STR,
        serviceAccount=STR,
        serviceAccountName=STR,
        terminationGracePeriodSeconds=INT,
        activeDeadlineSeconds=INT,
        readinessGates=_arr(_obj(conditionType=STR)),
        schedulingGates=_arr(_obj(name=STR)),
        volumes=_arr(_obj(name=STR)),
    ),
    status=_obj(
        phase=STR,
        conditions=CONDITIONS,
        containerStatuses=_arr(_obj(name=STR, ready=BOOL, restartCount=INT)),
        podIP=STR,
        nominatedNodeName=STR,
    ),
)
NODE = _obj(
    spec=_obj(taints=_arr(_obj(key=STR, value=STR, effect=STR)), unschedulable=BOOL),
    status=_obj(
        conditions=CONDITIONS,
        capacity=QUANTITIES,
        allocatable=QUANTITIES,
        addresses=_arr(_obj(type=STR, address=STR)),
    ),
)
WEBHOOK = _obj(
    name=STR,
    clientConfig=_obj(
        url=STR, caBundle=STR, service=_obj(namespace=STR, name=STR, path=STR, port=INT)
    ),
    rules=_arr(
        _obj(
            operations=STRINGS, apiGroups=STRINGS, apiVersions=STRINGS, resources=STRINGS, scope=STR
        )
    ),
    failurePolicy=STR,
    timeoutSeconds=INT,
    namespaceSelector=SELECTOR,
    objectSelector=SELECTOR,
)
CRD = _obj(
    spec=_obj(
        group=STR,
        scope=STR,
        names=_obj(
            plural=STR, singular=STR, kind=STR, listKind=STR, shortNames=STRINGS, categories=STRINGS
        ),
        versions=_arr(
            _obj(
                name=STR,
                served=BOOL,
                storage=BOOL,
                schema=_obj(openAPIV3Schema=ANY_OBJ),
                subresources=_obj(status=ANY_OBJ),
                additionalPrinterColumns=_arr(_obj(name=STR, type=STR, jsonPath=STR, priority=INT)),
                selectableFields=_arr(_obj(jsonPath=STR)),
            )
        ),
    ),
)
INVOLVED = _obj(kind=STR, name=STR, namespace=STR, uid=STR, apiVersion=STR, fieldPath=STR)

SHAPES: dict[tuple[str, str], Schema] = {
    ("", "pods"): POD,
    ("", "nodes"): NODE,
    ("", "namespaces"): _obj(spec=_obj(finalizers=STRINGS), status=_obj(phase=STR)),
    ("", "configmaps"): _obj(data=_map(STR), binaryData=_map(STR)),
    ("", "secrets"): _obj(data=_map(STR), stringData=_map(STR), type=STR),
    ("", "events"): _obj(
        involvedObject=INVOLVED,
        reason=STR,
        message=STR,
        type=STR,
        source=_obj(component=STR, host=STR),
    ),
    ("events.k8s.io", "events"): _obj(regarding=INVOLVED, reason=STR, note=STR, type=STR),
    ("coordination.k8s.io", "leases"): _obj(
        spec=_obj(holderIdentity=STR, leaseDurationSeconds=INT, leaseTransitions=INT)
    ),
    ("batch", "jobs"): _obj(spec=ANY_OBJ, status=_obj(succeeded=INT, active=INT, failed=INT)),
    ("apps", "deployments"): _obj(spec=ANY_OBJ, status=ANY_OBJ),
    ("apps", "replicasets"): _obj(spec=ANY_OBJ, status=ANY_OBJ),
    ("policy", "poddisruptionbudgets"): _obj(
        spec=_obj(
            minAvailable={"x-kubernetes-int-or-string": True},
            maxUnavailable={"x-kubernetes-int-or-string": True},
            selector=SELECTOR,
            unhealthyPodEvictionPolicy=STR,
        )
    ),
    ("scheduling.k8s.io", "priorityclasses"): _obj(
        value=INT, globalDefault=BOOL, preemptionPolicy=STR, description=STR
    ),
    ("storage.k8s.io", "storageclasses"): _obj(
        provisioner=STR,
        volumeBindingMode=STR,
        allowedTopologies=_arr(_obj(matchLabelExpressions=_arr(_obj(key=STR, values=STRINGS)))),
    ),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): _obj(
        webhooks=_arr(WEBHOOK)
    ),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): _obj(webhooks=_arr(WEBHOOK)),
    ("apiextensions.k8s.io", "customresourcedefinitions"): CRD,
}

_SCHEMA_KEYS_OF_TYPE: dict[str, type | tuple[type, ...]] = {
    "properties": dict,
    "items": dict,
    "required": list,
    "enum": list,
    "type": str,
    "allOf": list,
    "anyOf": list,
    "oneOf": list,
    "not": dict,
    "pattern": str,
    "x-kubernetes-validations": list,
    "additionalProperties": (dict, bool),
}


def schema_problem(schema: Any, path: str = "openAPIV3Schema") -> str | None:
    """Why a CRD's ``openAPIV3Schema`` is not a usable structural schema, or None."""
    if not isinstance(schema, dict):
        return f"{path} must be an object"
    for key, expected in _SCHEMA_KEYS_OF_TYPE.items():
        if key in schema and not isinstance(schema[key], expected):
            return f"{path}.{key} has the wrong type"
    for sub, sub_path in _subschemas(schema, path):
        problem = schema_problem(sub, sub_path)
        if problem:
            return problem
    for i, rule in enumerate(schema.get("x-kubernetes-validations") or []):
        if not isinstance(rule, dict) or not isinstance(rule.get("rule"), str):
            return f"{path}.x-kubernetes-validations[{i}].rule must be a string"
    return None


def pattern_causes(schema: Any, path: str) -> list[dict[str, str]]:
    """Every ``pattern`` in ``schema`` that Go's regexp does not compile, as kube-apiserver
    reports them (``must be a valid regular expression, but isn't: error parsing regexp:``)."""
    import json

    from kube_emulator.regex import RegexError, compile_go

    causes: list[dict[str, str]] = []
    todo = [(schema, path)]
    while todo:
        node, where = todo.pop()
        if not isinstance(node, dict):
            continue
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            try:
                compile_go(pattern)
            except RegexError as exc:
                causes.append(
                    {
                        "reason": "FieldValueInvalid",
                        "field": f"{where}.pattern",
                        "message": f"Invalid value: {json.dumps(pattern)}: must be a valid "
                        f"regular expression, but isn't: {exc}",
                    }
                )
        todo.extend(reversed(list(_subschemas(node, where))))
    return causes


def _subschemas(schema: dict[str, Any], path: str) -> Iterator[tuple[Any, str]]:
    """The schemas nested in ``schema``, with their paths, in the order they are checked."""
    for name, sub in (schema.get("properties") or {}).items():
        yield sub, f"{path}.properties[{name}]"
    for key in ("items", "not", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield schema[key], f"{path}.{key}"
    for key in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(schema.get(key) or []):
            yield sub, f"{path}.{key}[{i}]"


_OBJECT = ("apiVersion", "kind", "metadata")
_SPEC_STATUS = (*_OBJECT, "spec", "status")
_CORE_EVENT = (
    *_OBJECT,
    "involvedObject",
    "reason",
    "message",
    "source",
    "firstTimestamp",
    "lastTimestamp",
    "count",
    "type",
    "eventTime",
    "series",
    "action",
    "related",
    "reportingComponent",
    "reportingInstance",
)
_EVENT_V1 = (
    *_OBJECT,
    "eventTime",
    "series",
    "reportingController",
    "reportingInstance",
    "action",
    "reason",
    "regarding",
    "related",
    "note",
    "type",
    "deprecatedSource",
    "deprecatedFirstTimestamp",
    "deprecatedLastTimestamp",
    "deprecatedCount",
)

# The top-level fields of each built-in kind; others are unknown fields (fieldValidation).
TOP_LEVEL: dict[tuple[str, str], frozenset[str]] = {
    ("rbac.authorization.k8s.io", "roles"): frozenset((*_OBJECT, "rules")),
    ("rbac.authorization.k8s.io", "clusterroles"): frozenset(
        (*_OBJECT, "rules", "aggregationRule")
    ),
    ("rbac.authorization.k8s.io", "rolebindings"): frozenset((*_OBJECT, "subjects", "roleRef")),
    ("rbac.authorization.k8s.io", "clusterrolebindings"): frozenset(
        (*_OBJECT, "subjects", "roleRef")
    ),
    ("", "configmaps"): frozenset((*_OBJECT, "data", "binaryData", "immutable")),
    ("", "secrets"): frozenset((*_OBJECT, "data", "stringData", "type", "immutable")),
    ("", "serviceaccounts"): frozenset(
        (*_OBJECT, "secrets", "imagePullSecrets", "automountServiceAccountToken")
    ),
    ("", "events"): frozenset(_CORE_EVENT),
    ("events.k8s.io", "events"): frozenset(_EVENT_V1),
    ("scheduling.k8s.io", "priorityclasses"): frozenset(
        (*_OBJECT, "value", "globalDefault", "description", "preemptionPolicy")
    ),
    ("storage.k8s.io", "storageclasses"): frozenset(
        (
            *_OBJECT,
            "provisioner",
            "parameters",
            "reclaimPolicy",
            "mountOptions",
            "allowVolumeExpansion",
            "volumeBindingMode",
            "allowedTopologies",
        )
    ),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): frozenset(
        (*_OBJECT, "webhooks")
    ),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): frozenset(
        (*_OBJECT, "webhooks")
    ),
}
SPEC_STATUS_KINDS = frozenset(_SPEC_STATUS)


def unknown_top_level(tkey: tuple[str, str], obj: dict[str, Any]) -> list[str]:
    allowed = TOP_LEVEL.get(tkey, SPEC_STATUS_KINDS)
    return [k for k in obj if k not in allowed]

"""The catalogue of resource types the server serves: built-in kinds and those CRDs add.

A :class:`ResourceType` is one ``(group, plural)``; it may be served at several versions (CRDs),
all sharing one stored object per name. Objects are stored as written and only their
``apiVersion`` is rewritten when read at another version, which is what a CRD with conversion
strategy ``None`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kube_emulator.errors import ApiError
from kube_emulator.shapes import pattern_causes, schema_problem

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

# Field selectors each kind accepts beyond metadata.name / metadata.namespace. Asking for any
# other field is refused with 400, as a real server does.
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)


@dataclass(frozen=True)
class ResourceType:
    group: str
    versions: tuple[str, ...]  # served versions, the preferred (storage) one first
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    has_generation: bool = False
    field_selectors: tuple[str, ...] = ()
    default_propagation: str = "Background"
    # version -> openAPIV3Schema (CRDs only); None means "not validated"
    schemas: dict[str, dict[str, Any] | None] = field(default_factory=dict, compare=False)
    printer_columns: dict[str, list[dict[str, Any]]] = field(default_factory=dict, compare=False)
    crd_name: str | None = None
    verbs: tuple[str, ...] = ALL_VERBS
    # another resource whose storage this one shares (events.k8s.io Events -> core Events)
    storage_key: tuple[str, str] | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def store_key(self) -> tuple[str, str]:
        return self.storage_key or (self.group, self.plural)

    @property
    def is_custom(self) -> bool:
        return self.crd_name is not None

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    @property
    def storage_version(self) -> str:
        return self.versions[0]

    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def supports_field(self, name: str) -> bool:
        return name in ("metadata.name", "metadata.namespace") or name in self.field_selectors


def _core(plural: str, singular: str, kind: str, namespaced: bool, **kw: Any) -> ResourceType:
    return ResourceType("", ("v1",), plural, singular, kind, namespaced, **kw)


BUILTIN_TYPES: tuple[ResourceType, ...] = (
    _core(
        "namespaces",
        "namespace",
        "Namespace",
        False,
        short_names=("ns",),
        subresources=frozenset({"status", "finalize"}),
        field_selectors=("status.phase",),
    ),
    _core(
        "nodes",
        "node",
        "Node",
        False,
        short_names=("no",),
        subresources=frozenset({"status"}),
        field_selectors=("spec.unschedulable",),
    ),
    _core(
        "pods",
        "pod",
        "Pod",
        True,
        short_names=("po",),
        categories=("all",),
        subresources=frozenset({"status", "binding", "eviction"}),
        has_generation=True,
        field_selectors=(
            "spec.nodeName",
            "spec.schedulerName",
            "spec.restartPolicy",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ),
    ),
    _core("configmaps", "configmap", "ConfigMap", True, short_names=("cm",)),
    _core("secrets", "secret", "Secret", True, field_selectors=("type",)),
    _core("serviceaccounts", "serviceaccount", "ServiceAccount", True, short_names=("sa",)),
    _core(
        "services",
        "service",
        "Service",
        True,
        short_names=("svc",),
        categories=("all",),
        subresources=frozenset({"status"}),
    ),
    _core("events", "event", "Event", True, short_names=("ev",), field_selectors=_EVENT_FIELDS),
    _core(
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        "PersistentVolumeClaim",
        True,
        short_names=("pvc",),
        subresources=frozenset({"status"}),
    ),
    _core(
        "persistentvolumes",
        "persistentvolume",
        "PersistentVolume",
        False,
        short_names=("pv",),
        subresources=frozenset({"status"}),
    ),
    ResourceType(
        "events.k8s.io",
        ("v1",),
        "events",
        "event",
        "Event",
        True,
        short_names=("ev",),
        field_selectors=_EVENT_FIELDS,
        storage_key=("", "events"),
    ),
    ResourceType(
        "policy",
        ("v1",),
        "poddisruptionbudgets",
        "poddisruptionbudget",
        "PodDisruptionBudget",
        True,
        short_names=("pdb",),
        subresources=frozenset({"status"}),
        has_generation=True,
    ),
    ResourceType(
        "authorization.k8s.io",
        ("v1",),
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
        "SelfSubjectAccessReview",
        False,
        verbs=("create",),
    ),
    ResourceType(
        "authorization.k8s.io",
        ("v1",),
        "subjectaccessreviews",
        "subjectaccessreview",
        "SubjectAccessReview",
        False,
        verbs=("create",),
    ),
    ResourceType(
        "authorization.k8s.io",
        ("v1",),
        "selfsubjectrulesreviews",
        "selfsubjectrulesreview",
        "SelfSubjectRulesReview",
        False,
        verbs=("create",),
    ),
    ResourceType(
        "authentication.k8s.io",
        ("v1",),
        "selfsubjectreviews",
        "selfsubjectreview",
        "SelfSubjectReview",
        False,
        verbs=("create",),
    ),
    ResourceType("coordination.k8s.io", ("v1",), "leases", "lease", "Lease", True),
    ResourceType(
        "batch",
        ("v1",),
        "jobs",
        "job",
        "Job",
        True,
        categories=("all",),
        subresources=frozenset({"status"}),
        has_generation=True,
        field_selectors=("status.successful",),
        default_propagation="Orphan",
    ),
    ResourceType(
        "apps",
        ("v1",),
        "deployments",
        "deployment",
        "Deployment",
        True,
        short_names=("deploy",),
        categories=("all",),
        subresources=frozenset({"status"}),
        has_generation=True,
    ),
    ResourceType(
        "apps",
        ("v1",),
        "replicasets",
        "replicaset",
        "ReplicaSet",
        True,
        short_names=("rs",),
        categories=("all",),
        subresources=frozenset({"status"}),
        has_generation=True,
    ),
    ResourceType(
        "apps",
        ("v1",),
        "statefulsets",
        "statefulset",
        "StatefulSet",
        True,
        short_names=("sts",),
        categories=("all",),
        subresources=frozenset({"status"}),
        has_generation=True,
    ),
    ResourceType(
        "apps",
        ("v1",),
        "daemonsets",
        "daemonset",
        "DaemonSet",
        True,
        short_names=("ds",),
        categories=("all",),
        subresources=frozenset({"status"}),
        has_generation=True,
    ),
    ResourceType(
        "batch",
        ("v1",),
        "cronjobs",
        "cronjob",
        "CronJob",
        True,
        short_names=("cj",),
        categories=("all",),
        subresources=frozenset({"status"}),
        has_generation=True,
    ),
    # RBAC objects are stored as written (nothing is authorized here, see reviews.py)
    ResourceType("rbac.authorization.k8s.io", ("v1",), "roles", "role", "Role", True),
    ResourceType(
        "rbac.authorization.k8s.io", ("v1",), "rolebindings", "rolebinding", "RoleBinding", True
    ),
    ResourceType(
        "rbac.authorization.k8s.io", ("v1",), "clusterroles", "clusterrole", "ClusterRole", False
    ),
    ResourceType(
        "rbac.authorization.k8s.io",
        ("v1",),
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        False,
    ),
    ResourceType(
        "scheduling.k8s.io",
        ("v1",),
        "priorityclasses",
        "priorityclass",
        "PriorityClass",
        False,
        short_names=("pc",),
    ),
    ResourceType(
        "storage.k8s.io",
        ("v1",),
        "storageclasses",
        "storageclass",
        "StorageClass",
        False,
        short_names=("sc",),
    ),
    ResourceType(
        "admissionregistration.k8s.io",
        ("v1",),
        "validatingwebhookconfigurations",
        "validatingwebhookconfiguration",
        "ValidatingWebhookConfiguration",
        False,
        has_generation=True,
    ),
    ResourceType(
        "admissionregistration.k8s.io",
        ("v1",),
        "mutatingwebhookconfigurations",
        "mutatingwebhookconfiguration",
        "MutatingWebhookConfiguration",
        False,
        has_generation=True,
    ),
    ResourceType(
        "apiextensions.k8s.io",
        ("v1",),
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        False,
        short_names=("crd", "crds"),
        categories=("api-extensions",),
        subresources=frozenset({"status"}),
        has_generation=True,
    ),
)


def from_crd(crd: dict[str, Any]) -> ResourceType:
    """The resource type a CustomResourceDefinition declares (validated beforehand)."""
    spec = crd["spec"]
    names = spec["names"]
    served = [v for v in spec["versions"] if v.get("served", True)]
    # storage version first, then the rest in declaration order
    served.sort(key=lambda v: 0 if v.get("storage") else 1)
    subresources: set[str] = set()
    schemas: dict[str, dict[str, Any] | None] = {}
    columns: dict[str, list[dict[str, Any]]] = {}
    for v in served:
        if "status" in (v.get("subresources") or {}):
            subresources.add("status")
        schemas[v["name"]] = (v.get("schema") or {}).get("openAPIV3Schema")
        columns[v["name"]] = list(v.get("additionalPrinterColumns") or [])
    selectable = tuple(
        s["jsonPath"].lstrip(".") for v in served for s in v.get("selectableFields") or []
    )
    return ResourceType(
        group=spec["group"],
        versions=tuple(v["name"] for v in served),
        plural=names["plural"],
        singular=names.get("singular") or names["kind"].lower(),
        kind=names["kind"],
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        subresources=frozenset(subresources),
        has_generation=True,
        field_selectors=selectable,
        schemas=schemas,
        printer_columns=columns,
        crd_name=crd["metadata"]["name"],
    )


def check_crd(crd: dict[str, Any]) -> list[dict[str, str]]:
    """Causes that make a CRD unusable (the subset of the real validation a server needs)."""
    causes: list[dict[str, str]] = []

    def req(cond: bool, fld: str, msg: str = "Required value") -> None:
        if not cond:
            causes.append({"reason": "FieldValueRequired", "message": msg, "field": fld})

    spec = crd.get("spec")
    if not isinstance(spec, dict):
        req(False, "spec")
        return causes
    names = spec.get("names") or {}
    req(bool(spec.get("group")), "spec.group")
    req(bool(names.get("plural")), "spec.names.plural")
    req(bool(names.get("kind")), "spec.names.kind")
    versions = spec.get("versions") or []
    req(
        bool(versions),
        "spec.versions",
        "Invalid value: must have exactly one version marked as storage version",
    )
    storage = [v for v in versions if v.get("storage")]
    if versions and len(storage) != 1:
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "field": "spec.versions",
                "message": "Invalid value: must have exactly one version marked as storage version",
            }
        )
    schemas = [(v.get("schema") or {}).get("openAPIV3Schema") for v in versions]
    shared = len(versions) > 0 and all(x == schemas[0] for x in schemas)
    for i, version in enumerate(versions):
        req(bool(version.get("name")), f"spec.versions[{i}].name")
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            continue
        problem = schema_problem(schema, f"spec.versions[{i}].schema.openAPIV3Schema")
        if not problem and (i == 0 or not shared):
            # the real server names a schema all versions share spec.validation.openAPIV3Schema
            where = (
                "spec.validation.openAPIV3Schema"
                if shared
                else f"spec.versions[{i}].schema.openAPIV3Schema"
            )
            causes.extend(pattern_causes(schema, where))
        if problem:
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "field": problem.split(" ")[0],
                    "message": f"Invalid value: {problem}",
                }
            )
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        causes.append(
            {
                "reason": "FieldValueNotSupported",
                "field": "spec.scope",
                "message": f'Unsupported value: "{scope}": supported values: "Cluster", '
                '"Namespaced"',
            }
        )
    if names.get("plural") and spec.get("group"):
        expected = f"{names['plural']}.{spec['group']}"
        name = (crd.get("metadata") or {}).get("name")
        if name != expected:
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "field": "metadata.name",
                    "message": f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
                }
            )
    return causes


def parse_group_version(api_version: str) -> tuple[str, str]:
    if "/" in api_version:
        group, _, version = api_version.partition("/")
        return group, version
    return "", api_version


def not_served(group: str, version: str, plural: str) -> ApiError:
    gv = f"{group}/{version}" if group else version
    return ApiError(404, f"the server could not find the requested resource ({plural} in {gv})")

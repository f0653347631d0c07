"""The API semantics on top of the store: create, get, list, update, patch, delete, bind.

Writes run in three steps: prepare the new object without the lock (decode, defaults, schema
validation, admission webhooks — which may call back into this server), then commit under the
store lock after checking that the object did not change meanwhile. A PUT or PATCH that names a
resourceVersion fails with 409 if it is stale; a PATCH without one is re-applied to the latest
object, as the real server does.
"""

from __future__ import annotations

import random
import re
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from kube_emulator import apply as server_side_apply
from kube_emulator import binding, conversion, deletion, lifecycle, listing, meta, validation
from kube_emulator.controllers import defaults as workload_defaults
from kube_emulator.deletion import with_rv as _with_rv
from kube_emulator.errors import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    field_cause,
    invalid,
    not_found,
)
from kube_emulator.options import ServerOptions
from kube_emulator.patch import json_patch, merge_patch, strategic_merge_patch
from kube_emulator.resources import (
    BUILTIN_TYPES,
    ResourceType,
    check_crd,
    from_crd,
    not_served,
    parse_group_version,
)
from kube_emulator.schema_validation import validate_custom_resource
from kube_emulator.shapes import SHAPES, unknown_top_level
from kube_emulator.storage import Store

CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
NODES_KEY = ("", "nodes")
NS_KEY = ("", "namespaces")
PODS_KEY = ("", "pods")
JOBS_KEY = ("batch", "jobs")
SECRETS_KEY = ("", "secrets")
PC_KEY = ("scheduling.k8s.io", "priorityclasses")
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"
# pod spec fields an update may change (everything else is immutable once created)
_POD_MUTABLE_SPEC = (
    "activeDeadlineSeconds",
    "tolerations",
    "terminationGracePeriodSeconds",
    "schedulingGates",
)


def _copy(obj: Any) -> Any:
    return orjson.loads(orjson.dumps(obj))


@dataclass
class WriteOptions:
    dry_run: bool = False
    field_validation: str = "Strict"
    field_manager: str | None = None
    force: bool = False
    managed_fields: list[dict[str, Any]] | None = None  # set by server-side apply
    patch: bytes | None = None  # the request body of a PATCH (its errors name the patch)


# What etcd accepts in one request (its --max-request-bytes default, 1.5 MiB) and the largest
# message the API server's etcd client sends (2 MiB): the real server answers 500 past each.
ETCD_MAX_REQUEST_BYTES = 1536 * 1024
ETCD_CLIENT_MAX_SEND_BYTES = 2 * 1024 * 1024
# what stamping adds to an object (uid, creationTimestamp, resourceVersion, generation) and
# what etcd's request adds around it (its key): the limits apply to the stored object
_STORED_OVERHEAD = 256


def check_stored_size(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Refuse an object too large for the store, as the real server does: its etcd refuses a
    request over 1.5 MiB ("etcdserver: request is too large") and its etcd client a message
    over 2 MiB. The size is that of the JSON form plus the stamp and key (etcd stores
    protobuf for built-in kinds: sizes near a limit may differ by a few hundred bytes)."""
    try:
        size = len(orjson.dumps(obj)) + _STORED_OVERHEAD + len(rt.plural) + len(rt.group)
    except (TypeError, orjson.JSONEncodeError):
        return  # not JSON-encodable here: the write fails elsewhere with its own error
    if size > ETCD_CLIENT_MAX_SEND_BYTES:
        message = (
            "rpc error: code = ResourceExhausted desc = trying to send message larger than "
            f"max ({size} vs. {ETCD_CLIENT_MAX_SEND_BYTES})"
        )
    elif size > ETCD_MAX_REQUEST_BYTES:
        message = "etcdserver: request is too large"
    else:
        return
    err = ApiError(500, message)
    err.reason = ""  # the real server's Status for a storage error has no reason
    raise err


class _Retry(Exception):
    pass


class ApiCore:
    def __init__(self, options: ServerOptions | None = None) -> None:
        self.options = options or ServerOptions()
        self.store = Store(history_size=self.options.history_size)
        self.types: dict[tuple[str, str], ResourceType] = {t.key: t for t in BUILTIN_TYPES}
        self._random = random.Random(self.options.seed)
        self._random_lock = threading.Lock()
        from kube_emulator.admission import Admission
        from kube_emulator.collector import Collector
        from kube_emulator.faults import FaultInjector

        self.admission = Admission(self)
        self.faults = FaultInjector()
        self.collector = Collector(self)
        self.data_dir: Any = None
        if self.options.data_dir:
            self._open_data_dir(self.options.data_dir)
        else:
            self._bootstrap()

    def _open_data_dir(self, path: str) -> None:
        """Objects from a data directory (or the bootstrap ones in a new one), journaled from
        now on (kube_emulator.persistence)."""
        from kube_emulator.persistence import DataDir

        data_dir = DataDir(path)
        rv, objects = data_dir.load()
        data_dir.attach(self.store)
        self.data_dir = data_dir
        if not objects:
            self._bootstrap()
            return
        with self.store.lock:
            for crd in objects.get(CRD_KEY, {}).values():
                self._install_crd(crd)
            for tkey, by_key in objects.items():
                for obj in by_key.values():
                    self.store.restore(tkey, obj)
            # one past anything a client may have seen; the history is gone (410 Gone)
            self.store.rv = rv + 1
            self.store.compacted_rv = self.store.rv

    def close(self) -> None:
        """Write the data directory's last snapshot (nothing without one)."""
        if self.data_dir is not None:
            self.data_dir.close()
            self.data_dir = None

    # -- catalogue -------------------------------------------------------------------------
    def resolve(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self.types.get((group, plural))
        if rt is None or version not in rt.versions:
            raise not_served(group, version, plural)
        return rt

    def find_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _ = parse_group_version(api_version)
        for rt in list(self.types.values()):
            if rt.group == group and rt.kind == kind:
                return rt
        return None

    def _bootstrap(self) -> None:
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create_internal(self.types[NS_KEY], {"metadata": {"name": name}})
        for name, value, desc in lifecycle.SYSTEM_PRIORITY_CLASSES:
            self.create_internal(
                self.types[PC_KEY],
                {
                    "metadata": {"name": name},
                    "value": value,
                    "description": desc,
                    "preemptionPolicy": "PreemptLowerPriority",
                },
            )

    # -- reads -----------------------------------------------------------------------------
    def get(self, rt: ResourceType, version: str, ns: str, name: str) -> dict[str, Any]:
        obj = self.store.get(rt.store_key, ns, name)
        if obj is None:
            raise not_found(rt.plural, rt.group, name)
        return self.at_version(rt, obj, version)

    def at_version(self, rt: ResourceType, obj: dict[str, Any], version: str) -> dict[str, Any]:
        """A stored object as the client asked for it (group version, shared storage)."""
        api_version = rt.api_version(version)
        if rt.storage_key is not None:
            return conversion.event_from_core(obj, api_version)
        if obj.get("apiVersion") == api_version:
            return obj
        out = dict(obj)
        out["apiVersion"] = api_version
        return out

    def list_objects(
        self, rt: ResourceType, version: str, ns: str | None, q: dict[str, str]
    ) -> dict[str, Any]:
        return listing.list_objects(self, rt, version, ns, q)

    # -- create ----------------------------------------------------------------------------
    def _decode(
        self,
        rt: ResourceType,
        version: str,
        body: Any,
        ns: str | None,
        unchanged: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        """Check and normalise a request body. ``unchanged``: top-level fields known to be the
        stored object's own (a merge patch that did not touch them); a built-in kind's shape
        never changes, so they are not walked again."""
        if not isinstance(body, dict):
            raise bad_request(f"the body of the request must be a {rt.kind} object")
        api_version = rt.api_version(version)
        if body.get("kind") == "List" and body.get("apiVersion") == "v1" and not rt.is_custom:
            # kubectl splits a List into its items; a List sent as such: the real server's 400
            package = rt.group.split(".")[0] if rt.group else "core"
            raise bad_request(
                f'List in version "v1" cannot be handled as a {rt.kind}: converting (v1.List) '
                f"to ({package}.{rt.kind}): unknown conversion"
            )
        if body.get("kind", rt.kind) != rt.kind:
            raise bad_request(
                f"the body kind {body.get('kind')!r} does not match the "
                f"resource {rt.qualified()!r}, which holds {rt.kind}"
            )
        if body.get("apiVersion", api_version) not in (api_version,) and not (
            parse_group_version(str(body.get("apiVersion")))[0] == rt.group
            and parse_group_version(str(body.get("apiVersion")))[1] in rt.versions
        ):
            raise bad_request(
                f"the API version in the data ({body.get('apiVersion')}) does not "
                f"match the expected API version ({api_version})"
            )
        body["apiVersion"] = api_version
        body["kind"] = rt.kind
        shape = SHAPES.get(rt.key)
        if shape is not None:
            _drop_nulls(body, unchanged)
            errors, _ = validate_custom_resource(body, shape, prune=False, skip=unchanged)
            if errors:
                first = errors[0]
                # the real server's decoder names the Go struct field path, without indices
                path = re.sub(r"\[[^\]]*\]", "", first["field"])
                raise bad_request(
                    f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: '
                    f"{path}: {first['message']}"
                )
        md = body.get("metadata")
        if md is None:
            md = body["metadata"] = {}
        problem = meta.shape_error(md)
        if problem:
            raise bad_request(
                f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: {problem}'
            )
        if rt.namespaced:
            body_ns = md.get("namespace")
            if body_ns and ns and body_ns != ns:
                raise bad_request(
                    "the namespace of the provided object does not match the "
                    "namespace sent on the request"
                )
            if ns:
                md["namespace"] = ns
        else:
            md.pop("namespace", None)
        return body

    def _field_checks(
        self,
        rt: ResourceType,
        version: str,
        obj: dict[str, Any],
        opts: WriteOptions,
        old: dict[str, Any] | None = None,
    ) -> list[str]:
        """Metadata rules, unknown fields (by ``fieldValidation``) and, for custom resources,
        the version's schema; returns the warnings of Warn mode."""
        md = obj["metadata"]
        name = md.get("name") or md.get("generateName") or ""
        causes = meta.label_causes(md) + meta.owner_causes(md)
        finalizer_errors, warnings = validation.finalizer_causes(md, not rt.is_custom)
        causes += finalizer_errors
        if not rt.is_custom:
            validation.check_int64(rt.key, rt.kind, version, obj)
            if old is None or obj.get("spec") != old.get("spec") or rt.key == NODES_KEY:
                causes += validation.resource_causes(rt.key, version, rt.kind, obj)
            causes += validation.data_size_causes(rt.key, obj)
            if rt.key == PODS_KEY:
                validation.default_container_statuses(obj)
        if rt.is_custom:
            prune = opts.field_validation != "Strict"
            errors, unknown = validate_custom_resource(obj, rt.schemas.get(version), prune, old)
            causes += errors
        else:
            unknown = unknown_top_level(rt.key, obj)
            if opts.field_validation != "Strict":
                for field in unknown:
                    del obj[field]
        if unknown and opts.field_validation == "Strict":
            listed = ", ".join(f'unknown field "{u}"' for u in unknown)
            if opts.patch is not None:  # the real server: an invalid patch, 422
                shown = opts.patch.decode("utf-8", "replace")[:256]
                message = f'Invalid value: "{shown}": strict decoding error: {listed}'
                raise ApiError(
                    422,
                    f' "" is invalid: patch: {message}',
                    "Invalid",
                    causes=[field_cause("patch", message)],
                )
            raise ApiError(
                400,
                f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: '
                f"strict decoding error: {listed}",
                "BadRequest",
            )
        if unknown and opts.field_validation == "Warn":
            warnings += [f'unknown field "{u}"' for u in unknown]
        if rt.key == CRD_KEY:
            causes += check_crd(obj)
        elif rt.key == PC_KEY and not isinstance(obj.get("value"), int):
            causes.append(field_cause("value", "Required value", "FieldValueRequired"))
        if causes:
            raise invalid(rt.kind, rt.group, name, causes)
        return warnings

    def create(
        self, rt: ResourceType, version: str, ns: str | None, body: Any, opts: WriteOptions
    ) -> tuple[dict[str, Any], list[str]]:
        obj = self._decode(rt, version, body, ns)
        md = obj["metadata"]
        for k in (
            "uid",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "creationTimestamp",
            "generation",
            "selfLink",
            "managedFields",
        ):
            md.pop(k, None)
        if opts.managed_fields is not None:
            md["managedFields"] = opts.managed_fields
        name = md.get("name") or ""
        if not name and not md.get("generateName"):
            raise invalid(rt.kind, rt.group, "", meta.name_causes(rt.key, "", rt.is_custom))
        if name:
            causes = meta.name_causes(rt.key, name, rt.is_custom)
            if causes:
                raise invalid(rt.kind, rt.group, name, causes)
        if rt.namespaced:
            self._check_namespace(md.get("namespace") or "")
        self._on_create(rt, obj)
        warnings = self._field_checks(rt, version, obj, opts)
        obj, changed = self.admission.mutate("CREATE", rt, version, "", obj, None, opts)
        if changed:
            warnings += self._field_checks(rt, version, obj, opts)
        self.admission.validate("CREATE", rt, version, "", obj, None, opts)
        if opts.dry_run:
            return self._stamp_new(rt, obj, dry_run=True), warnings
        with self.store.lock:
            if rt.namespaced:
                self._check_namespace(md.get("namespace") or "")
            stored = self._commit_create(rt, obj)
        return self.at_version(rt, stored, version), warnings

    def create_internal(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """A write by the server itself (bootstrap, controllers): no admission, no checks."""
        obj["apiVersion"] = rt.api_version(rt.storage_version)
        obj["kind"] = rt.kind
        self._on_create(rt, obj)
        with self.store.lock:
            return self._commit_create(rt, obj)

    @staticmethod
    def _to_storage(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """The form an object is stored in (another kind's, for shared storage)."""
        if rt.storage_key is not None:
            return conversion.event_to_core(obj)
        return obj

    def _check_namespace(self, ns: str) -> None:
        space = self.store.get(NS_KEY, "", ns)
        if space is None:
            raise not_found("namespaces", "", ns)
        if space["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                f"unable to create new content in namespace {ns} because it is being terminated",
                "Forbidden",
                name=ns,
                kind="namespaces",
            )

    def _on_create(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        if rt.key == PODS_KEY:
            lifecycle.pod_on_create(obj, self._priority_of)
        elif rt.key == ("", "nodes"):
            lifecycle.node_on_create(obj, self.options.taint_new_nodes)
        elif rt.key == NS_KEY:
            lifecycle.namespace_on_create(obj)
        elif rt.key == SECRETS_KEY:
            lifecycle.secret_string_data(obj)
        elif rt.key == JOBS_KEY:
            # the generated selector names the Job's uid: it is chosen here, before stamping
            obj["metadata"]["uid"] = str(uuid.uuid4())
            workload_defaults.job_on_create(obj, obj["metadata"]["uid"])
        elif rt.key in workload_defaults.WORKLOAD_KEYS:
            workload_defaults.WORKLOAD_KEYS[rt.key](obj)
        elif rt.key == CRD_KEY or ("status" in rt.subresources and rt.key != ("", "nodes")):
            obj.pop("status", None)

    def _priority_of(self, cls_name: str | None) -> tuple[int | None, str | None]:
        if cls_name:
            pc = self.store.get(PC_KEY, "", cls_name)
            return (pc.get("value"), pc.get("preemptionPolicy")) if pc else (None, None)
        for pc in self.store.iter(PC_KEY, None):
            if pc.get("globalDefault"):
                return pc.get("value"), pc.get("preemptionPolicy")
        return None, None

    def _stamp_new(
        self, rt: ResourceType, obj: dict[str, Any], dry_run: bool = False
    ) -> dict[str, Any]:
        md = dict(obj["metadata"])
        obj = dict(obj)
        obj["metadata"] = md
        md["uid"] = md.get("uid") or str(uuid.uuid4())
        md["creationTimestamp"] = meta.now()
        if rt.has_generation:
            md["generation"] = 1
        if not dry_run:
            md["resourceVersion"] = str(self.store.rv)
        if rt.key == CRD_KEY:
            obj["status"] = lifecycle.crd_status(obj)
        return obj

    def _commit_create(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        md = obj["metadata"]
        ns = md.get("namespace") or ""
        if not md.get("name"):
            base = md["generateName"]
            for _ in range(20):
                with self._random_lock:
                    suffix = "".join(self._random.choice(_SUFFIX_CHARS) for _ in range(5))
                if self.store.get(rt.store_key, ns, base + suffix) is None:
                    md["name"] = base + suffix
                    break
            else:
                raise ApiError(
                    409,
                    f"{rt.qualified()} could not generate a unique name for {base!r}",
                    "AlreadyExists",
                )
            causes = meta.name_causes(rt.key, md["name"], rt.is_custom)
            if causes:
                raise invalid(rt.kind, rt.group, md["name"], causes)
        if self.store.get(rt.store_key, ns, md["name"]) is not None:
            raise already_exists(rt.plural, rt.group, md["name"])
        if rt.key == CRD_KEY:
            self._check_crd_names(obj)
        check_stored_size(rt, self._to_storage(rt, obj))
        self.store.next_rv()
        stored = self._to_storage(rt, self._stamp_new(rt, obj))
        self.store.commit(rt.store_key, "ADDED", stored, None)
        if rt.key == CRD_KEY:
            self._install_crd(stored)
        elif rt.key == NS_KEY:
            sa = self.types[("", "serviceaccounts")]
            self._commit_create(
                sa,
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": md["name"]},
                },
            )
        return stored

    # -- CRDs ------------------------------------------------------------------------------
    def _check_crd_names(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        key = (spec["group"], spec["names"]["plural"])
        existing = self.types.get(key)
        if existing is not None and existing.crd_name != crd["metadata"]["name"]:
            raise invalid(
                "CustomResourceDefinition",
                "apiextensions.k8s.io",
                crd["metadata"]["name"],
                [field_cause("spec.names.plural", f'Invalid value: "{key[1]}": is already in use')],
            )

    def _install_crd(self, crd: dict[str, Any]) -> None:
        rt = from_crd(crd)
        self.types[rt.key] = rt

    def _uninstall_crd(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        key = (spec["group"], spec["names"]["plural"])
        rt = self.types.get(key)
        if rt is None or rt.crd_name != crd["metadata"]["name"]:
            return
        for obj in list(self.store.iter(key, None)):
            self.store.next_rv()
            gone = _with_rv(obj, self.store.rv)
            self.store.commit(key, "DELETED", gone, obj)
        self.store.end_watches(key)
        del self.types[key]

    # -- update / patch --------------------------------------------------------------------
    def update(
        self,
        rt: ResourceType,
        version: str,
        ns: str | None,
        name: str,
        body: Any,
        opts: WriteOptions,
        subresource: str = "",
    ) -> tuple[dict[str, Any], list[str]]:
        new = self._decode(rt, version, body, ns)
        body_name = new["metadata"].get("name")
        if body_name and body_name != name:
            raise bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        new["metadata"]["name"] = name
        wanted_rv = new["metadata"].get("resourceVersion") or None
        for _ in range(8):
            old = self.store.get(rt.store_key, ns or "", name)
            if old is None:
                raise not_found(rt.plural, rt.group, name)
            try:
                return self._write_update(
                    rt, version, old, _copy(new) if _ else new, opts, subresource, wanted_rv
                )
            except _Retry:
                continue
        raise conflict(rt.plural, rt.group, name, "the object is changing too fast; try again")

    def patch(
        self,
        rt: ResourceType,
        version: str,
        ns: str | None,
        name: str,
        ptype: str,
        raw: bytes,
        opts: WriteOptions,
        subresource: str = "",
    ) -> tuple[dict[str, Any], list[str]]:
        patch_doc = _patch_document(rt, ptype, raw, opts)
        opts.patch = raw
        for _ in range(8):
            old = self.store.get(rt.store_key, ns or "", name)
            if old is None:
                if ptype == APPLY_PATCH:
                    return self._apply_creates(rt, version, ns, patch_doc, opts)
                raise not_found(rt.plural, rt.group, name)
            current = self.at_version(rt, old, version)
            new = _patched(rt, version, current, ptype, patch_doc, opts)
            if not isinstance(new, dict):
                raise bad_request("the patched object is not an object")
            # top-level fields the patch left alone are still the stored (checked) objects
            unchanged = frozenset(
                k
                for k, v in new.items()
                if k not in ("apiVersion", "kind", "metadata") and current.get(k) is v
            )
            new = self._decode(rt, version, _copy(new), ns, unchanged)
            if new["metadata"].get("name") != name:
                raise bad_request("the patch may not change metadata.name")
            patched_rv = new["metadata"].get("resourceVersion")
            wanted = patched_rv if patched_rv != old["metadata"].get("resourceVersion") else None
            if ptype != APPLY_PATCH and isinstance(patch_doc, dict):
                asked = (patch_doc.get("metadata") or {}).get("resourceVersion")
                wanted = asked or wanted
            try:
                return self._write_update(rt, version, old, new, opts, subresource, wanted)
            except _Retry:
                continue
        raise conflict(rt.plural, rt.group, name, "the object is changing too fast; try again")

    def _apply_creates(
        self,
        rt: ResourceType,
        version: str,
        ns: str | None,
        patch_doc: Any,
        opts: WriteOptions,
    ) -> tuple[dict[str, Any], list[str]]:
        """Server-side apply to an absent object creates it, owned by the field manager."""
        if not isinstance(patch_doc, dict):
            raise bad_request("the applied configuration must be an object")
        body = _copy(patch_doc)
        opts.managed_fields = server_side_apply.created_fields(
            patch_doc, opts.field_manager or "", rt.is_custom, rt.api_version(version)
        )
        return self.create(rt, version, ns, body, opts)

    def _write_update(
        self,
        rt: ResourceType,
        version: str,
        old: dict[str, Any],
        new: dict[str, Any],
        opts: WriteOptions,
        subresource: str,
        wanted_rv: str | None,
    ) -> tuple[dict[str, Any], list[str]]:
        name = old["metadata"]["name"]
        old_rv = old["metadata"]["resourceVersion"]
        if wanted_rv is not None and wanted_rv != old_rv:
            raise conflict(
                rt.plural,
                rt.group,
                name,
                "the object has been modified; please "
                "apply your changes to the latest version and try again",
            )
        stored_old = old
        if rt.storage_key is not None:  # work on the object in the form the client uses
            old = self.at_version(rt, old, version)
        merged = self._merge_update(rt, old, new, subresource)
        warnings = self._field_checks(rt, version, merged, opts, old)
        merged, changed = self.admission.mutate(
            "UPDATE", rt, version, subresource, merged, old, opts
        )
        if changed:
            warnings += self._field_checks(rt, version, merged, opts, old)
        self.admission.validate("UPDATE", rt, version, subresource, merged, old, opts)
        if opts.dry_run:
            return merged, warnings
        with self.store.lock:
            cur = self.store.get(rt.store_key, stored_old["metadata"].get("namespace") or "", name)
            if cur is None:
                raise not_found(rt.plural, rt.group, name)
            if cur["metadata"]["resourceVersion"] != old_rv:
                if wanted_rv is not None:
                    raise conflict(
                        rt.plural,
                        rt.group,
                        name,
                        "the object has been modified; "
                        "please apply your changes to the latest version and try "
                        "again",
                    )
                raise _Retry
            stored = self._commit_update(rt, cur, merged)
        return self.at_version(rt, stored, version), warnings

    def _merge_update(
        self, rt: ResourceType, old: dict[str, Any], new: dict[str, Any], subresource: str
    ) -> dict[str, Any]:
        old_md = old["metadata"]
        if subresource == "status":
            return _status_update(old, new)
        md = _updated_metadata(rt, old_md, new["metadata"])
        merged = dict(new)
        merged["metadata"] = md
        if "status" in rt.subresources:
            if "status" in old:
                merged["status"] = old["status"]
            else:
                merged.pop("status", None)
        if rt.key == PODS_KEY:
            lifecycle.check_pod_update(old, merged)
        if rt.key == SECRETS_KEY:
            lifecycle.secret_string_data(merged)
        if rt.key == CRD_KEY:
            _check_crd_update(rt, old, merged)
        counted = "status" not in rt.subresources
        if rt.has_generation and meta.spec_of(merged, counted) != meta.spec_of(old, counted):
            md["generation"] = int(old_md.get("generation") or 0) + 1
        return merged

    def _commit_update(
        self, rt: ResourceType, cur: dict[str, Any], merged: dict[str, Any]
    ) -> dict[str, Any]:
        """Store ``merged`` as the successor of ``cur`` (lock held). An object being deleted
        whose last finalizer went away is removed instead."""
        check_stored_size(rt, self._to_storage(rt, merged))
        self.store.next_rv()
        stored = _with_rv(self._to_storage(rt, merged), self.store.rv)
        md = stored["metadata"]
        if (
            md.get("deletionTimestamp")
            and not md.get("finalizers")
            and not (rt.key == PODS_KEY and int(md.get("deletionGracePeriodSeconds") or 0) > 0)
        ):
            self.store.commit(rt.store_key, "DELETED", stored, cur)
            self._after_delete(rt, stored)
        else:
            self.store.commit(rt.store_key, "MODIFIED", stored, cur)
            if rt.key == CRD_KEY:
                self._install_crd(stored)
        return stored

    def update_internal(
        self, rt: ResourceType, cur: dict[str, Any], change: dict[str, Any]
    ) -> dict[str, Any]:
        """Replace ``cur`` by ``change`` as the server's own controllers do (lock held)."""
        return self._commit_update(rt, cur, change)

    # -- bind ------------------------------------------------------------------------------
    def bind(self, ns: str, name: str, body: Any, opts: WriteOptions) -> dict[str, Any]:
        return binding.bind(self, ns, name, body, opts)

    # -- delete ----------------------------------------------------------------------------
    def delete(
        self,
        rt: ResourceType,
        version: str,
        ns: str | None,
        name: str,
        body: Any,
        q: dict[str, str],
        opts: WriteOptions,
    ) -> dict[str, Any]:
        return deletion.delete(self, rt, version, ns, name, body, q, opts)

    def delete_locked(
        self, rt: ResourceType, cur: dict[str, Any], grace: int | None, policy: str
    ) -> dict[str, Any]:
        return deletion.delete_locked(self, rt, cur, grace, policy)

    def _after_delete(self, rt: ResourceType, gone: dict[str, Any]) -> None:
        deletion.after_delete(self, rt, gone)

    def delete_collection(
        self,
        rt: ResourceType,
        version: str,
        ns: str | None,
        body: Any,
        q: dict[str, str],
        opts: WriteOptions,
    ) -> dict[str, Any]:
        return deletion.delete_collection(self, rt, version, ns, body, q, opts)


def _drop_nulls(obj: dict[str, Any], skip: frozenset[str] = frozenset()) -> None:
    """Null fields of built-in kinds mean "not set", as when a real server decodes them.
    Fields named in ``skip`` are not walked (already stored, hence already without nulls)."""
    for key in [k for k, v in obj.items() if v is None]:
        del obj[key]
    for key, value in obj.items():
        if key in skip:
            continue
        if isinstance(value, dict):
            _drop_nulls(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    _drop_nulls(item)


def _load_yaml(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        from kube_emulator.yamlbody import load_yaml

        return load_yaml(raw)  # a YamlBodyError is a ValueError


APPLY_PATCH = "application/apply-patch+yaml"


def _patch_document(rt: ResourceType, ptype: str, raw: bytes, opts: WriteOptions) -> Any:
    """The patch body, parsed; checks that do not depend on the stored object."""
    try:
        patch_doc = _load_yaml(raw) if ptype == APPLY_PATCH else orjson.loads(raw)
    except ValueError as exc:
        from kube_emulator.yamlbody import YamlBodyError, yaml_body_error

        if isinstance(exc, YamlBodyError):
            raise yaml_body_error(exc, apply=True) from exc
        raise bad_request(f"the patch body is not valid: {exc}") from exc
    if ptype == "application/strategic-merge-patch+json" and rt.is_custom:
        raise ApiError(
            415,
            "the body of the request was in an unknown format - accepted "
            "media types include: application/json-patch+json, "
            "application/merge-patch+json, application/apply-patch+yaml",
            "UnsupportedMediaType",
        )
    if ptype == APPLY_PATCH and not opts.field_manager:
        raise ApiError(
            422,
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
            "is required for apply patch",
            "Invalid",
            name="",
            group="meta.k8s.io",
            kind="PatchOptions",
            causes=[
                field_cause(
                    "fieldManager",
                    "Required value: is required for apply patch",
                    "FieldValueRequired",
                )
            ],
        )
    return patch_doc


def _patched(
    rt: ResourceType,
    version: str,
    current: dict[str, Any],
    ptype: str,
    patch_doc: Any,
    opts: WriteOptions,
) -> Any:
    """``current`` with the patch applied (a new object: ``current`` is the stored one)."""
    if ptype == "application/merge-patch+json":
        if not isinstance(patch_doc, dict):
            raise bad_request("a merge patch must be a JSON object")
        # merge_patch copies what it changes and never writes into ``current``, and
        # the result is copied whole afterwards: the stored object needs no copy first
        return merge_patch(current, patch_doc)
    if ptype == "application/json-patch+json":
        return json_patch(_copy(current), patch_doc)
    if ptype == APPLY_PATCH:
        if not isinstance(patch_doc, dict):
            raise bad_request("the applied configuration must be an object")
        return server_side_apply.apply(
            _copy(current),
            _copy(patch_doc),
            opts.field_manager or "",
            opts.force,
            rt.is_custom,
            rt.api_version(version),
        )
    if ptype == "application/strategic-merge-patch+json":
        if not isinstance(patch_doc, dict):
            raise bad_request("the patch must be an object")
        return strategic_merge_patch(_copy(current), patch_doc)
    raise ApiError(
        415,
        f"the body of the request was in an unknown format - {ptype!r}",
        "UnsupportedMediaType",
    )


def _status_update(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A write to the status subresource changes the status (and the version asked for) only."""
    merged = dict(old)
    merged["metadata"] = dict(old["metadata"])
    if "status" in new:
        merged["status"] = new["status"]
    else:
        merged.pop("status", None)
    merged["apiVersion"] = new["apiVersion"]
    return merged


# metadata an update cannot change: kept from the stored object (or absent, as there)
_SERVER_OWNED_METADATA = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "namespace",
    "name",
)


def _updated_metadata(
    rt: ResourceType, old_md: dict[str, Any], new_md: dict[str, Any]
) -> dict[str, Any]:
    md = dict(new_md)
    for k in _SERVER_OWNED_METADATA:
        if k in old_md:
            md[k] = old_md[k]
        else:
            md.pop(k, None)
    md["resourceVersion"] = old_md["resourceVersion"]
    if "managedFields" not in md and "managedFields" in old_md:
        md["managedFields"] = old_md["managedFields"]
    if old_md.get("deletionTimestamp"):
        added = set(md.get("finalizers") or []) - set(old_md.get("finalizers") or [])
        if added:
            raise invalid(
                rt.kind,
                rt.group,
                old_md["name"],
                [
                    field_cause(
                        "metadata.finalizers",
                        "Forbidden: no new finalizers can be added if the "
                        f"object is being deleted, found new finalizers {sorted(added)}",
                        "FieldValueForbidden",
                    )
                ],
            )
    return md


def _check_crd_update(rt: ResourceType, old: dict[str, Any], merged: dict[str, Any]) -> None:
    causes = check_crd(merged)
    if causes:
        raise invalid(rt.kind, rt.group, old["metadata"]["name"], causes)
    if (merged["spec"]["group"], merged["spec"]["names"]["plural"]) != (
        old["spec"]["group"],
        old["spec"]["names"]["plural"],
    ):
        raise invalid(
            rt.kind,
            rt.group,
            old["metadata"]["name"],
            [field_cause("spec.names.plural", "Invalid value: field is immutable")],
        )

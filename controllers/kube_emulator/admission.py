"""Calling admission webhooks (admissionregistration.k8s.io/v1) with AdmissionReview v1.

For each write the server collects the webhooks whose rules match (operation, apiGroups,
apiVersions, resources incl. ``resource/subresource`` and ``*``, scope), whose
``namespaceSelector`` matches the labels of the object's namespace and whose ``objectSelector``
matches the labels of the object (or the old object). Mutating webhooks run first, in order of
configuration name then list order, and may return a JSON patch; validating webhooks run after
schema validation. ``failurePolicy`` (default Fail) decides what a call error or a timeout
(``timeoutSeconds``, default 10) means.

Where the request goes: ``clientConfig.url`` as given; ``clientConfig.service`` (namespace,
name, port default 443, path) connects to the address mapped for ``namespace/name`` (or
``namespace/name:port``) in ``ServerOptions.webhook_services`` and otherwise to
``127.0.0.1:<port>``, while TLS checks the certificate for ``<name>.<namespace>.svc`` against
``caBundle`` (system roots when absent) — as the real server does via cluster DNS.
"""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from kube_emulator.errors import ApiError
from kube_emulator.patch import json_patch
from kube_emulator.selectors import match_label_selector_object

if TYPE_CHECKING:
    from kube_emulator.operations import ApiCore, WriteOptions
    from kube_emulator.resources import ResourceType

MUTATING = ("admissionregistration.k8s.io", "mutatingwebhookconfigurations")
VALIDATING = ("admissionregistration.k8s.io", "validatingwebhookconfigurations")


def _matches(values: list[str] | None, value: str) -> bool:
    return bool(values) and ("*" in values or value in values)  # type: ignore[operator]


def _resource_matches(patterns: list[str] | None, resource: str, sub: str) -> bool:
    full = f"{resource}/{sub}" if sub else resource
    for p in patterns or []:
        if p in ("*/*",):
            return True
        if p == "*" and not sub:
            return True
        if p == full:
            return True
        if sub and p == f"*/{sub}":
            return True
        if p == f"{resource}/*" and sub:
            return True
    return False


class _PinnedHTTPS(http.client.HTTPSConnection):
    """Connect to one address but verify the certificate for another host name."""

    def __init__(
        self,
        address: tuple[str, int],
        server_hostname: str,
        context: ssl.SSLContext,
        timeout: float,
    ) -> None:
        super().__init__(server_hostname, address[1], timeout=timeout, context=context)
        self._address = address
        self._server_hostname = server_hostname
        self._ctx = context

    def connect(self) -> None:
        sock = socket.create_connection(self._address, self.timeout)
        self.sock = self._ctx.wrap_socket(sock, server_hostname=self._server_hostname)


class Admission:
    def __init__(self, core: ApiCore) -> None:
        self.core = core
        self._contexts: dict[str, ssl.SSLContext] = {}  # caBundle -> TLS client context

    # -- selection --------------------------------------------------------------------------
    def _hooks(
        self,
        which: tuple[str, str],
        operation: str,
        rt: ResourceType,
        version: str,
        sub: str,
        obj: dict[str, Any] | None,
        old: dict[str, Any] | None,
    ) -> list[tuple[str, dict[str, Any]]]:
        if rt.key in (MUTATING, VALIDATING):
            return []  # webhook configurations are never sent to webhooks
        if not self.core.store.objects.get(which):
            # the usual case, no configuration of this kind: one dict read instead of taking
            # the store lock on every write (a lone dict lookup is atomic)
            return []
        configs = list(self.core.store.iter(which, None))
        if not configs:
            return []
        configs.sort(key=lambda c: c["metadata"]["name"])
        subject = obj if obj is not None else old or {}
        ns = (subject.get("metadata") or {}).get("namespace") or ""
        found = []
        for cfg in configs:
            for hook in cfg.get("webhooks") or []:
                if not self._rule_matches(hook, operation, rt, version, sub):
                    continue
                if not self._selectors_match(hook, rt, ns, obj, old):
                    continue
                found.append((cfg["metadata"]["name"], hook))
        return found

    def _rule_matches(
        self, hook: dict[str, Any], operation: str, rt: ResourceType, version: str, sub: str
    ) -> bool:
        for rule in hook.get("rules") or []:
            if not _matches(rule.get("operations"), operation):
                continue
            if not _matches(rule.get("apiGroups"), rt.group):
                continue
            if not _matches(rule.get("apiVersions"), version):
                continue
            if not _resource_matches(rule.get("resources"), rt.plural, sub):
                continue
            scope = rule.get("scope", "*")
            if scope == "Cluster" and rt.namespaced:
                continue
            if scope == "Namespaced" and not rt.namespaced:
                continue
            return True
        return False

    def _selectors_match(
        self,
        hook: dict[str, Any],
        rt: ResourceType,
        ns: str,
        obj: dict[str, Any] | None,
        old: dict[str, Any] | None,
    ) -> bool:
        ns_sel = hook.get("namespaceSelector")
        if ns_sel and (ns_sel.get("matchLabels") or ns_sel.get("matchExpressions")):
            if rt.key == ("", "namespaces"):
                labels = ((obj or old or {}).get("metadata") or {}).get("labels")
                if not match_label_selector_object(ns_sel, labels):
                    return False
            elif rt.namespaced:
                space = self.core.store.get(("", "namespaces"), "", ns)
                labels = (space or {}).get("metadata", {}).get("labels")
                if not match_label_selector_object(ns_sel, labels):
                    return False
        obj_sel = hook.get("objectSelector")
        if obj_sel and (obj_sel.get("matchLabels") or obj_sel.get("matchExpressions")):
            candidates = [o for o in (obj, old) if o is not None]
            if not any(
                match_label_selector_object(obj_sel, (o.get("metadata") or {}).get("labels"))
                for o in candidates
            ):
                return False
        return True

    # -- the two phases ----------------------------------------------------------------------
    def mutate(
        self,
        operation: str,
        rt: ResourceType,
        version: str,
        sub: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        opts: WriteOptions,
    ) -> tuple[dict[str, Any], bool]:
        hooks = self._hooks(MUTATING, operation, rt, version, sub, obj, old)
        changed = False
        for cfg_name, hook in hooks:
            response = self._call(cfg_name, hook, operation, rt, version, sub, obj, old, opts=opts)
            if response is None:
                continue
            patch = response.get("patch")
            if patch:
                if response.get("patchType", "JSONPatch") != "JSONPatch":
                    raise ApiError(
                        500,
                        f'Internal error occurred: webhook "{hook["name"]}" '
                        f"returned an unsupported patchType "
                        f"{response.get('patchType')!r}",
                        "InternalError",
                    )
                try:
                    ops = orjson.loads(base64.b64decode(patch))
                    obj = json_patch(obj, ops)
                except (ValueError, ApiError) as exc:
                    raise ApiError(
                        500,
                        f'Internal error occurred: webhook "{hook["name"]}" '
                        f"returned a patch that cannot be applied: {exc}",
                        "InternalError",
                    ) from exc
                changed = True
        return obj, changed

    def validate(
        self,
        operation: str,
        rt: ResourceType,
        version: str,
        sub: str,
        obj: dict[str, Any] | None,
        old: dict[str, Any] | None,
        opts: WriteOptions,
        object_kind: tuple[str, str, str] | None = None,
    ) -> None:
        for cfg_name, hook in self._hooks(VALIDATING, operation, rt, version, sub, obj, old):
            self._call(
                cfg_name,
                hook,
                operation,
                rt,
                version,
                sub,
                obj,
                old,
                opts=opts,
                object_kind=object_kind,
            )

    # -- one call ------------------------------------------------------------------------------
    def _call(
        self,
        cfg_name: str,
        hook: dict[str, Any],
        operation: str,
        rt: ResourceType,
        version: str,
        sub: str,
        obj: dict[str, Any] | None,
        old: dict[str, Any] | None,
        *,
        opts: WriteOptions,
        object_kind: tuple[str, str, str] | None = None,
    ) -> dict[str, Any] | None:
        name = hook.get("name", cfg_name)
        subject = obj if obj is not None else old or {}
        md = subject.get("metadata") or {}
        group, kver, kind = object_kind or (rt.group, version, rt.kind)
        uid = str(uuid.uuid4())
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": group, "version": kver, "kind": kind},
                "resource": {"group": rt.group, "version": version, "resource": rt.plural},
                "requestKind": {"group": group, "version": kver, "kind": kind},
                "requestResource": {"group": rt.group, "version": version, "resource": rt.plural},
                "name": md.get("name", ""),
                "namespace": md.get("namespace", ""),
                "operation": operation,
                "userInfo": {
                    "username": "kai-sim-admin",
                    "groups": ["system:masters", "system:authenticated"],
                },
                "object": obj,
                "oldObject": old,
                "dryRun": opts.dry_run,
                "options": None,
            },
        }
        if sub:
            review["request"]["subResource"] = sub  # type: ignore[index]
            review["request"]["requestSubResource"] = sub  # type: ignore[index]
        fail_closed = hook.get("failurePolicy", "Fail") == "Fail"
        try:
            answer = self._post(hook, orjson.dumps(review))
            response = answer.get("response")
            if not isinstance(response, dict):
                raise ValueError("the AdmissionReview answer has no response")
            if response.get("uid") not in (None, uid):
                raise ValueError(
                    f"response uid {response.get('uid')!r} does not match the request uid {uid!r}"
                )
        except (OSError, ValueError, http.client.HTTPException, ssl.SSLError) as exc:
            if not fail_closed:
                return None
            raise ApiError(
                500,
                f'Internal error occurred: failed calling webhook "{name}": {exc}',
                "InternalError",
            ) from exc
        if not response.get("allowed"):
            status = response.get("status") or {}
            code = int(status.get("code") or 403)
            message = status.get("message") or ""
            text = (
                f'admission webhook "{name}" denied the request: {message}'
                if message
                else f'admission webhook "{name}" denied the request without explanation'
            )
            raise ApiError(
                code,
                text,
                status.get("reason") or None,
                name=md.get("name"),
                group=rt.group,
                kind=rt.plural,
            )
        return response

    def _context(self, ca: str) -> ssl.SSLContext:
        """The TLS client context for a ``caBundle`` ("": the system's CAs), made once per
        bundle: making one reads and parses the CA certificates (a system bundle takes tens of
        milliseconds, far more on a busy machine), which per call would cost more than the call.
        A few bundles at most (a CA rotation adds one); the cache is emptied past that."""
        context = self._contexts.get(ca)
        if context is None:
            if len(self._contexts) >= 8:
                self._contexts.clear()
            if ca:
                context = ssl.create_default_context(cadata=base64.b64decode(ca).decode())
            else:
                context = ssl.create_default_context()
            self._contexts[ca] = context
        return context

    def _post(self, hook: dict[str, Any], body: bytes) -> dict[str, Any]:
        cc = hook.get("clientConfig") or {}
        timeout = float(hook.get("timeoutSeconds") or 10)
        context = self._context(cc.get("caBundle") or "")
        if cc.get("url"):
            parts = urlsplit(cc["url"])
            if parts.scheme != "https":
                raise ValueError(f"webhook url {cc['url']!r} must use https")
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                parts.hostname or "", parts.port or 443, timeout=timeout, context=context
            )
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
        elif cc.get("service"):
            svc = cc["service"]
            ns, name, port = svc.get("namespace"), svc.get("name"), int(svc.get("port") or 443)
            mapping = self.core.options.webhook_services
            target = (
                mapping.get(f"{ns}/{name}:{port}")
                or mapping.get(f"{ns}/{name}")
                or f"127.0.0.1:{port}"
            )
            host, _, tport = target.rpartition(":")
            conn = _PinnedHTTPS((host, int(tport)), f"{name}.{ns}.svc", context, timeout)
            path = svc.get("path") or "/"
        else:
            raise ValueError("clientConfig needs a url or a service")
        try:
            conn.request(
                "POST",
                path,
                body=body,
                headers={"Content-Type": "application/json", "Accept": "application/json"},
            )
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                raise ValueError(f"the server responded with HTTP {resp.status}")
            answer = orjson.loads(data)
            if not isinstance(answer, dict):
                raise ValueError("the answer is not an AdmissionReview object")
            return answer
        except TimeoutError as exc:
            raise ValueError(f"context deadline exceeded after {timeout:g}s") from exc
        finally:
            conn.close()

"""The server's own controllers: the garbage collector (ownerReference cascading deletion,
foreground deletion) and the namespace controller (empties a terminating namespace, then
removes it). They run on one background thread, as the real controller-manager's loops do, so
background deletion is asynchronous and observable through watches."""

from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING, Any

from kube_emulator.deletion import with_rv

if TYPE_CHECKING:
    from kube_emulator.operations import ApiCore

Work = tuple[str, Any, Any]


class Collector:
    def __init__(self, core: ApiCore) -> None:
        self.core = core
        self.queue: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._terminating: set[str] = set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kai-apiserver-gc", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self.queue.put(None)
            self._thread.join(timeout=5)
            self._thread = None

    # -- producers (called with the store lock held) -----------------------------------------
    def enqueue_dependents(self, uid: str, policy: str) -> None:
        self.queue.put(("dependents", uid, policy))

    def enqueue_owner_check(self, ref: dict[str, Any], ns: str) -> None:
        self.queue.put(("owner", ref, ns))

    def enqueue_namespace(self, name: str) -> None:
        self._terminating.add(name)
        self.queue.put(("namespace", name, None))

    def namespace_changed(self, name: str) -> None:
        if name in self._terminating:
            self.queue.put(("namespace", name, None))

    def orphan_dependents(self, uid: str) -> None:
        """Strip the owner reference ``uid`` from its dependents now (lock held)."""
        for tkey, ns, name in self.core.store.dependents(uid):
            dep = self.core.store.get(tkey, ns, name)
            rt = self.core.types.get(tkey)
            if dep is None or rt is None:
                continue
            self._drop_ref(rt, dep, uid)

    # -- the loop -------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            kind, a, b = item
            try:
                with self.core.store.lock:
                    if kind == "dependents":
                        self._delete_dependents(a)
                    elif kind == "owner":
                        self._check_owner(a, b)
                    elif kind == "namespace":
                        self._sweep_namespace(a)
            except Exception:  # keep collecting; one bad object must not stop the loop
                import logging

                logging.getLogger(__name__).exception("garbage collection of %r failed", item)

    def _owner_alive(self, ref: dict[str, Any], ns: str) -> dict[str, Any] | None:
        rt = self.core.find_kind(ref.get("apiVersion", ""), ref.get("kind", ""))
        if rt is None:
            return None
        owner = self.core.store.get(rt.store_key, ns if rt.namespaced else "", ref.get("name", ""))
        if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
            return None
        return owner

    def _drop_ref(self, rt: Any, dep: dict[str, Any], uid: str) -> None:
        md = dict(dep["metadata"])
        md["ownerReferences"] = [r for r in md.get("ownerReferences") or [] if r.get("uid") != uid]
        if not md["ownerReferences"]:
            del md["ownerReferences"]
        new = dict(dep)
        new["metadata"] = md
        self.core.update_internal(rt, dep, new)

    def _delete_dependents(self, uid: str) -> None:
        core = self.core
        for tkey, ns, name in core.store.dependents(uid):
            dep = core.store.get(tkey, ns, name)
            rt = core.types.get(tkey)
            if dep is None or rt is None:
                continue
            refs = dep["metadata"].get("ownerReferences") or []
            others = [r for r in refs if r.get("uid") != uid and self._owner_alive(r, ns)]
            owner_gone_or_deleting = True
            for r in refs:
                if r.get("uid") == uid:
                    owner = self._owner_alive(r, ns)
                    owner_gone_or_deleting = owner is None or bool(
                        owner["metadata"].get("deletionTimestamp")
                    )
            if not owner_gone_or_deleting:
                continue
            if others:
                self._drop_ref(rt, dep, uid)
            elif not dep["metadata"].get("deletionTimestamp"):
                core.delete_locked(rt, dep, None, "Background")

    def _check_owner(self, ref: dict[str, Any], ns: str) -> None:
        owner = self._owner_alive(ref, ns)
        if owner is None:
            return
        md = owner["metadata"]
        if "foregroundDeletion" not in (md.get("finalizers") or []):
            return
        if self.core.store.dependents(md["uid"]):
            return
        rt = self.core.find_kind(ref.get("apiVersion", ""), ref.get("kind", ""))
        if rt is None:
            return
        new = dict(owner)
        new["metadata"] = {
            **md,
            "finalizers": [f for f in md["finalizers"] if f != "foregroundDeletion"],
        }
        self.core.update_internal(rt, owner, new)

    def _sweep_namespace(self, name: str) -> None:
        core = self.core
        ns_obj = core.store.get(("", "namespaces"), "", name)
        if ns_obj is None or not ns_obj["metadata"].get("deletionTimestamp"):
            self._terminating.discard(name)
            return
        # each stored object once: types sharing another's storage are skipped
        stored_types = [t for t in core.types.values() if t.namespaced and not t.storage_key]
        for rt in stored_types:
            for obj in list(core.store.iter(rt.key, name)):
                if not obj["metadata"].get("deletionTimestamp"):
                    core.delete_locked(rt, obj, None, "Background")
        leftover = sum(core.store.count(rt.key, name) for rt in stored_types)
        if leftover == 0 and not ns_obj["metadata"].get("finalizers"):
            self._terminating.discard(name)
            core.store.next_rv()
            gone = with_rv(ns_obj, core.store.rv)
            gone["spec"] = {**(ns_obj.get("spec") or {}), "finalizers": []}
            core.store.commit(("", "namespaces"), "DELETED", gone, ns_obj)

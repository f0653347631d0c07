"""The in-use protection's rules, on generated trees of queues (hypothesis), against an
in-memory API that enforces what the real one does: a delete only sets ``deletionTimestamp``
while finalizers remain; the object goes when the last one is removed; a write with a stale
``resourceVersion`` is a 409.

Whatever the tree, the order of the deletes and when the workloads end:

- every object that is not being deleted gets the finalizer;
- a Queue never goes while a child Queue or a workload of it exists; a QueueTree never goes
  while one of its Queues exists;
- once the workloads have ended, everything deleted is gone within a few rounds (a round per
  level of the tree), and nothing that was not deleted ever goes;
- a Terminating object that is held names its holders in ``InUse``, with an Event.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kai.api.protection import FINALIZER, IN_USE
from kai.kube.client import ApiError, Resource
from kai.reconcilers.gitops_controller import DOCUMENTS
from kai.reconcilers.protection import Protector, deleting, listing

TREES = DOCUMENTS["QueueTree"]


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = itertools.count(1)
        self.gone: set[tuple[str, str]] = set()

    def add(self, plural: str, obj: dict[str, Any]) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self.version))
        self.objects[(plural, obj["metadata"]["name"])] = obj

    def items(self, plural: str) -> list[dict[str, Any]]:
        return [o for (p, _), o in sorted(self.objects.items()) if p == plural]

    def delete(self, plural: str, name: str) -> None:
        obj = self.objects.get((plural, name))
        if obj is None:
            return
        obj["metadata"]["deletionTimestamp"] = "2026-12-08T00:00:00Z"
        obj["metadata"]["resourceVersion"] = str(next(self.version))
        self._maybe_gone(plural, name)

    def _maybe_gone(self, plural: str, name: str) -> None:
        md = self.objects[(plural, name)]["metadata"]
        if md.get("deletionTimestamp") and not md.get("finalizers"):
            del self.objects[(plural, name)]
            self.gone.add((plural, name))

    # the part of Kube the protector uses
    def patch(
        self,
        res: Resource,
        name: str,
        patch: dict[str, Any],
        namespace: str | None = None,
        *,
        sub: str = "",
    ) -> dict[str, Any]:
        obj = self.objects.get((res.plural, name))
        if obj is None:
            raise ApiError(404, None, "patch")
        if sub == "status":
            obj["status"] = {**(obj.get("status") or {}), **patch["status"]}
            return obj
        md = patch["metadata"]
        if md["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise ApiError(409, None, "patch")
        finalizers = md.get("finalizers") or []
        old = obj["metadata"].get("finalizers") or []
        if obj["metadata"].get("deletionTimestamp") and set(finalizers) - set(old):
            raise ApiError(422, None, "no new finalizers can be added if the object is deleted")
        obj["metadata"]["finalizers"] = finalizers
        obj["metadata"]["resourceVersion"] = str(next(self.version))
        self._maybe_gone(res.plural, name)
        return obj


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def event(self, obj: dict[str, Any], etype: str, reason: str, message: str) -> None:
        self.seen.append((obj["metadata"]["name"], reason, message))


@st.composite
def worlds(draw: st.DrawFn) -> dict[str, Any]:
    """Queues with parents (raw ones, and two trees' compiled ones), workloads on some,
    a deletion order over a subset."""
    count = draw(st.integers(2, 9))
    names = [f"q{i}" for i in range(count)]
    parents = {
        n: (draw(st.sampled_from(names[:i])) if i and draw(st.booleans()) else None)
        for i, n in enumerate(names)
    }
    owner = {n: draw(st.sampled_from([None, "t0", "t1"])) for n in names}
    workloads = {n: draw(st.integers(0, 2)) for n in names}
    deleted = draw(st.lists(st.sampled_from([*names, "t0", "t1"]), unique=True))
    end_after = draw(st.integers(0, 4))  # rounds before the workloads end
    return {
        "parents": parents,
        "owner": owner,
        "workloads": workloads,
        "deleted": deleted,
        "end_after": end_after,
    }


def _queue(name: str, parent: str | None, tree: str | None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name}
    if tree:
        md["labels"] = {"app.kubernetes.io/managed-by": "kai"}
        md["annotations"] = {"gitops.kai.scheduler/source": f"QueueTree/{tree}"}
    return {"kind": "Queue", "metadata": md, "spec": {"parentQueue": parent} if parent else {}}


SOURCE = "gitops.kai.scheduler/source"


def _source(queue: dict[str, Any]) -> str | None:
    return (queue["metadata"].get("annotations") or {}).get(SOURCE)


class Sim:
    """The world, the protector, and the controller's prune of a Terminating tree's Queues."""

    def __init__(self, world: dict[str, Any]) -> None:
        self.api = FakeApi()
        for name, parent in world["parents"].items():
            self.api.add("queues", _queue(name, parent, world["owner"][name]))
        for tree in ("t0", "t1"):
            self.api.add(TREES.plural, {"kind": "QueueTree", "metadata": {"name": tree}})
        self.workloads = dict(world["workloads"])
        self.events = Events()
        self.protector = Protector(self.api, self.events, self.holders, TREES)  # type: ignore[arg-type]

    def children(self, name: str) -> list[str]:
        return [
            q["metadata"]["name"]
            for q in self.api.items("queues")
            if q["spec"].get("parentQueue") == name
        ]

    def holders(self, name: str) -> list[str]:
        pods = [f"pod ns/{name}-{i}" for i in range(self.workloads.get(name, 0))]
        return [f"child queue {c}" for c in self.children(name)] + pods

    def round(self) -> None:
        api = self.api
        for tree in api.items(TREES.plural):
            if deleting(tree):
                for q in api.items("queues"):
                    if _source(q) == f"QueueTree/{tree['metadata']['name']}":
                        api.delete("queues", q["metadata"]["name"])
        found = self.protector.reconcile(api.items("queues"), api.items(TREES.plural))
        for plural, name in api.gone:  # nothing held went
            if plural == "queues":
                assert not self.children(name), f"queue {name} went before its child"
                assert not self.workloads.get(name), f"queue {name} went with workloads"
            else:
                assert not any(_source(q) == f"QueueTree/{name}" for q in api.items("queues"))
        for name, held in found.queues.items():
            queue = api.objects[("queues", name)]
            condition = next(c for c in queue["status"]["conditions"] if c["type"] == IN_USE)
            assert listing(held) in condition["message"]
            assert any(e[0] == name and e[1] == IN_USE for e in self.events.seen)


def _doomed(world: dict[str, Any]) -> set[str]:
    """The queues that must be gone in the end: deleted, or of a deleted tree, unless a queue
    that stays is below them (it holds them for good: that is the point)."""
    deleted = set(world["deleted"])
    doomed = deleted | {n for n, tree in world["owner"].items() if tree in deleted}
    changed = True
    while changed:
        changed = False
        for name, parent in world["parents"].items():
            if parent in doomed and name not in doomed:
                doomed.discard(parent)
                changed = True
    return doomed


@settings(max_examples=150, deadline=None)
@given(worlds())
def test_deletes_in_any_order_converge_and_never_strand(world: dict[str, Any]) -> None:
    sim = Sim(world)
    for _ in range(3):  # protection reaches everything first
        sim.round()
    for obj in sim.api.objects.values():
        assert FINALIZER in obj["metadata"]["finalizers"], obj["metadata"]["name"]
    for name in world["deleted"]:  # the worst order is one of those generated
        sim.api.delete(TREES.plural if name.startswith("t") else "queues", name)
    for round_ in range(world["end_after"] + len(world["parents"]) + 4):
        if round_ == world["end_after"]:
            sim.workloads.clear()
        sim.round()
    doomed = _doomed(world)
    for name in world["parents"]:
        present = ("queues", name) in sim.api.objects
        assert present == (name not in doomed), (name, doomed, list(sim.api.objects))
    for tree in ("t0", "t1"):
        queues_left = any(
            world["owner"][n] == tree and ("queues", n) in sim.api.objects for n in world["parents"]
        )
        present = (TREES.plural, tree) in sim.api.objects
        assert present == (tree not in world["deleted"] or queues_left), tree

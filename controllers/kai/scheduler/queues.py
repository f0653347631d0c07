"""The queue tree as the session sees it.

KAI drops queues whose parent does not exist (and so their whole subtree): their jobs, like jobs
naming an unknown queue, get ``QueueDoesNotExist``. Jobs may only sit on leaf queues; a job
naming an inner queue gets the same reason with a message saying so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kai.scheduler.snapshot import QueueSpec


@dataclass(eq=False)
class QueueInfo:
    spec: QueueSpec
    parent: QueueInfo | None = None
    children: list[QueueInfo] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def ancestors(self) -> list[QueueInfo]:
        """This queue and its ancestors, leaf first."""
        chain: list[QueueInfo] = []
        node: QueueInfo | None = self
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain

    def __repr__(self) -> str:
        return f"QueueInfo({self.name})"


class QueueTree:
    """The session's queues as linked :class:`QueueInfo` nodes, orphans left out; roots and
    every list of children in name order (the order the job and victim orders walk them).
    The fair-share package numbers the same queues in ``(creation_rank, name)`` order instead
    (``fairshare.QueueIndex``, index arrays for its arithmetic)."""

    def __init__(self, specs: list[QueueSpec]) -> None:
        by_name = {spec.name: spec for spec in sorted(specs, key=lambda s: s.name)}
        self.queues: dict[str, QueueInfo] = {}
        self.orphans: dict[str, str] = {}  # queue name -> why it is not in the tree

        def resolve(name: str, seen: tuple[str, ...]) -> QueueInfo | None:
            if name in self.queues:
                return self.queues[name]
            if name in self.orphans:
                return None
            spec = by_name[name]
            if spec.parent is None:
                info = QueueInfo(spec)
            elif spec.parent in seen:
                self.orphans[name] = f"queue {name!r} is part of a parent cycle"
                return None
            elif spec.parent not in by_name:
                self.orphans[name] = f"parent queue {spec.parent!r} of {name!r} does not exist"
                return None
            else:
                parent = resolve(spec.parent, (*seen, name))
                if parent is None:
                    self.orphans[name] = f"queue {name!r}: {self.orphans[spec.parent]}"
                    return None
                info = QueueInfo(spec, parent)
                parent.children.append(info)
            self.queues[name] = info
            return info

        for name in by_name:
            resolve(name, ())
        self.roots: list[QueueInfo] = [q for q in self.queues.values() if q.parent is None]

    def job_queue_problem(self, queue: str) -> str | None:
        """Why a job naming ``queue`` cannot be scheduled, or None when it can."""
        info = self.queues.get(queue)
        if info is None:
            if queue in self.orphans:
                return f"queue {queue!r} is not in the queue tree: {self.orphans[queue]}"
            return f"queue {queue!r} does not exist"
        if not info.is_leaf:
            children = ", ".join(child.name for child in info.children)
            return (
                f"queue {queue!r} is not a leaf queue (children: {children}); "
                "jobs belong to leaf queues"
            )
        return None

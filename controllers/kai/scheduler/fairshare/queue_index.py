"""The queue hierarchy as index arrays: parents, children, ancestor chains.

Queues are numbered in ``(creation_rank, name)`` order — oldest first, then by name — and every
list of siblings is kept in that order. This is the one iteration order the fair-share code
uses wherever KAI iterates a Go map (in Go's randomised order), so results never depend on
the order of the input list.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from kai.scheduler.fairshare.resources import ZERO, ResourcesLike, Vector, to_vector
from kai.scheduler.snapshot import MANAGED_RESOURCES, UNLIMITED, QueueSpec


class QueueIndex:
    """Immutable structure of a queue tree (n levels).

    Raises ``ValueError`` naming the queue and the field for a duplicate name, an unknown
    parent or a cycle; the snapshot builder is expected to have removed orphans already
    (KAI removes a queue whose parent is missing, with its subtree).
    """

    __slots__ = ("ancestors", "children", "depth", "index", "names", "parents", "specs", "top")

    def __init__(self, queues: Sequence[QueueSpec]) -> None:
        seen: set[str] = set()
        for q in queues:
            if not q.name:
                raise ValueError("queue with an empty name: every queue needs a name")
            if q.name in seen:
                raise ValueError(f"queue '{q.name}': duplicate queue name")
            seen.add(q.name)
            _check_values(q)
        ordered = sorted(queues, key=lambda q: (q.creation_rank, q.name))
        self.specs: tuple[QueueSpec, ...] = tuple(ordered)
        self.names: tuple[str, ...] = tuple(q.name for q in ordered)
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        parents: list[int] = []
        for q in ordered:
            if q.parent is None or q.parent == "":
                parents.append(-1)
            elif q.parent not in self.index:
                raise ValueError(f"queue '{q.name}': parent '{q.parent}' does not exist")
            elif q.parent == q.name:
                raise ValueError(f"queue '{q.name}': parent is the queue itself")
            else:
                parents.append(self.index[q.parent])
        self.parents: tuple[int, ...] = tuple(parents)
        children: list[list[int]] = [[] for _ in ordered]
        for i, p in enumerate(parents):
            if p >= 0:
                children[p].append(i)  # i ascends, so siblings stay in (rank, name) order
        self.children: tuple[tuple[int, ...], ...] = tuple(tuple(c) for c in children)
        self.top: tuple[int, ...] = tuple(i for i, p in enumerate(parents) if p < 0)
        ancestors: list[tuple[int, ...]] = []
        for i in range(len(ordered)):
            chain = [i]
            p = parents[i]
            while p >= 0:
                if p in chain or len(chain) > len(ordered):
                    cycle = " -> ".join(self.names[c] for c in [*chain, p])
                    raise ValueError(f"queue '{self.names[i]}': parent chain has a cycle: {cycle}")
                chain.append(p)
                p = parents[p]
            ancestors.append(tuple(chain))
        #: for each queue: itself, its parent, ..., its top-level queue
        self.ancestors: tuple[tuple[int, ...], ...] = tuple(ancestors)
        self.depth: tuple[int, ...] = tuple(len(a) - 1 for a in ancestors)

    def __len__(self) -> int:
        return len(self.names)

    def lookup(self, name: str) -> int:
        try:
            return self.index[name]
        except KeyError:
            raise ValueError(f"queue '{name}' does not exist") from None

    def is_leaf(self, name: str) -> bool:
        return not self.children[self.lookup(name)]

    def path(self, name: str) -> list[str]:
        """Names from the top-level queue down to ``name``."""
        return [self.names[i] for i in reversed(self.ancestors[self.lookup(name)])]

    def levels(self) -> Iterable[tuple[int, tuple[int, ...]]]:
        """Sibling sets top-down: ``(parent index or -1, children)``, parents before children."""
        yield -1, self.top
        stack = list(reversed(self.top))
        while stack:
            i = stack.pop()
            if self.children[i]:
                yield i, self.children[i]
                stack.extend(reversed(self.children[i]))

    def roll_up(self, own: Mapping[str, ResourcesLike], what: str = "value") -> list[Vector]:
        """Per-queue totals: each queue's own figure plus those of all its descendants.

        ``own`` maps queue names (normally leaves) to figures; unknown names are an error.
        """
        totals = [list(ZERO) for _ in self.names]
        for name in sorted(own):
            if name not in self.index:
                raise ValueError(f"{what} given for queue '{name}', which does not exist")
            v = to_vector(own[name])
            for a in self.ancestors[self.index[name]]:
                t = totals[a]
                t[0] += v[0]
                t[1] += v[1]
                t[2] += v[2]
        return [(t[0], t[1], t[2]) for t in totals]


def _check_values(q: QueueSpec) -> None:
    """Quotas and limits are >= 0 or exactly -1; weights too (KAI uses -1 only with an
    unlimited quota); everything finite. Unknown resource keys are refused."""
    for resource, values in sorted(q.resources.items()):
        if resource not in MANAGED_RESOURCES:
            raise ValueError(
                f"queue '{q.name}': resources.{resource}: unknown resource, expected one of "
                f"{', '.join(MANAGED_RESOURCES)}"
            )
        for field, value in (
            ("quota", values.quota),
            ("limit", values.limit),
            ("over_quota_weight", values.over_quota_weight),
        ):
            if not math.isfinite(value) or (value < 0 and value != UNLIMITED):
                raise ValueError(
                    f"queue '{q.name}': resources.{resource}.{field}: must be >= 0 or -1, "
                    f"got {value}"
                )
    for resource, value in sorted(q.usage.items()):
        if resource not in MANAGED_RESOURCES or not math.isfinite(value):
            raise ValueError(
                f"queue '{q.name}': usage.{resource}: expected a finite number for one of "
                f"{', '.join(MANAGED_RESOURCES)}, got {value}"
            )

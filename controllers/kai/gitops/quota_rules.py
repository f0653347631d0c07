"""The hierarchy rules of ``gitops-format.md``, over plain queue records: no I/O, no YAML.

Every queue to check together (QueueTree queues and raw KAI Queues alike) comes in as a
:class:`QueueRecord`: its name, its parent, its effective quota / limit / over-quota weight per
resource as exact numbers in base units (GPU devices, CPU cores, memory bytes), and the
:class:`~kai.gitops.problems.Source` where each value is written. :func:`check_queues` returns the
problems of the rules ``name``, ``parent-exists``, ``cycle``, ``values``, ``limit-below-quota``,
``children-quota-sum``, ``child-quota-over-parent-limit``, ``child-limit-over-parent-limit``,
``namespaces-on-leaf`` and (given a capacity) ``over-capacity``.

``kai validate`` builds the records from YAML (:mod:`kai.gitops.queue_records`); the admission
webhook builds them from API objects. The rules never see where the numbers came from, which is
what lets both callers share them. Comparisons are exact (a whole amount is an ``int``, any
other a :class:`fractions.Fraction`, the cheaper type where it is enough): the
rounding to KAI's millicores and megabytes happens only when objects are rendered.

The meaning of -1: a quota of -1 is "the parent's whole share", a limit of -1 is "no cap".
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal, NamedTuple, Protocol

from kai.gitops.amount_text import decimal_text as _decimal
from kai.gitops.amount_text import format_amount
from kai.gitops.problems import Problem, Severity, Source

__all__ = [
    "RESOURCES",
    "Amount",
    "QueueRecord",
    "check_queues",
    "format_amount",
]

RESOURCES: tuple[str, ...] = ("gpu", "cpu", "memory")
UNLIMITED = -1
Exact = Fraction | int  # an exact amount: an int when it is whole
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

Origin = Literal["set", "default", "implied"]


class Places(Protocol):
    """Finds where a field of a queue is written (a loaded document)."""

    def value_in(self, base: tuple[str | int, ...], rel: tuple[str | int, ...]) -> Source: ...

    def key_in(self, base: tuple[str | int, ...], rel: tuple[str | int, ...]) -> Source: ...


class Amount(NamedTuple):
    """One effective number of a queue (a quota, limit or weight of one resource).

    ``value`` is exact, in base units (GPU devices, CPU cores, memory bytes), or None when the
    written value could not be read (its own problem is reported by the schema check).
    ``origin`` says where the value comes from: ``set`` on the queue, a tree ``default``, or
    ``implied`` (nothing written: the documented default applies). ``at`` is where it is written
    (for an implied value: the queue's entry). ``field`` is the field path used in messages
    (``limit.gpu`` for a QueueTree queue, ``resources.gpu.limit`` for a KAI Queue); for a default,
    ``default_path`` is the path of the default itself (``defaults.limit.gpu``).
    """

    value: Exact | None
    at: Source | None  # None: on the queue, at ``field`` (see QueueRecord.places)
    field: str
    origin: Origin = "set"
    default_path: str | None = None


@dataclass(frozen=True, slots=True)
class QueueRecord:
    """One queue, as the rules see it.

    ``object`` and ``path`` name it in problems (``QueueTree/research`` and
    ``queues[0].children[1] (nlp)``; a KAI Queue has ``Queue/nlp`` and an empty path).
    ``parent_at`` is where the parent reference is written (``spec.parent``, ``parentQueue``);
    it is None when the parent comes from nesting (``nested``) or there is no parent.
    ``kai_queue`` marks a raw ``scheduling.run.ai/v2`` Queue, whose omitted limits are warned
    about (KAI reads them as 0) when ``warn_omitted_limits`` is set. ``priority`` is the
    written priority (None if unreadable). An amount without a place of its own (``at`` None,
    so that one amount object serves every queue that writes the same value) is found by
    ``places`` under ``base``, the queue's field path: at its ``field``, or for an implied
    amount at the key of the queue's name.
    """

    name: str
    at: Source
    object: str
    path: str
    parent: str | None = None
    parent_at: Source | None = None
    nested: bool = False
    quota: Mapping[str, Amount] = field(default_factory=dict)
    limit: Mapping[str, Amount] = field(default_factory=dict)
    over_quota_weight: Mapping[str, Amount] = field(default_factory=dict)
    priority: int | float | None = 100
    priority_at: Source | None = None
    priority_origin: Origin = "implied"
    namespaces: tuple[tuple[str, Source], ...] = ()
    namespaces_at: Source | None = None
    kai_queue: bool = False
    warn_omitted_limits: bool = False
    places: Places | None = None
    base: tuple[str | int, ...] = ()

    def where(self) -> str:
        return f"{self.object} {self.path}".strip()


# --------------------------------------------------------------------------------------------
# Formatting


def _origin_note(amount: Amount) -> str:
    if amount.origin == "default":
        return " (from spec.defaults)"
    if amount.origin == "implied":
        return " (not set)"
    return ""


# --------------------------------------------------------------------------------------------
# The rules


class _Checker:
    """The rules over ``records``.

    ``exact``: in the order of the places of the queue names, which decides which of two
    queues of one name is the first and the order of the queues a message lists. Without it
    the records keep the order given, and no place is looked at: the problems found are the
    same ones (only their messages may differ), which is all a first pass needs to know."""

    def __init__(self, records: Sequence[QueueRecord], *, exact: bool = True) -> None:
        self.exact = exact
        self.records = sorted(records, key=lambda r: r.at) if exact else list(records)
        self.problems: list[Problem] = []
        self.first: dict[str, QueueRecord] = {}
        for record in self.records:
            self.first.setdefault(record.name, record)
        self.children: dict[str, list[QueueRecord]] = {}
        for record in self.records:
            if record.parent is not None and record.parent in self.first:
                self.children.setdefault(record.parent, []).append(record)

    def report(
        self,
        record: QueueRecord,
        at: Source,
        rule: str,
        message: str,
        *,
        field: str | None = None,
        severity: Severity = "error",
    ) -> None:
        path = " ".join(p for p in (record.path, field) if p) or None
        self.problems.append(
            Problem.at(at, rule, message, object=record.object, path=path, severity=severity)
        )

    @staticmethod
    def _at(record: QueueRecord, amount: Amount) -> Source:
        """Where ``amount`` of ``record`` is written (for an implied one: the queue's name)."""
        if amount.at is not None:
            return amount.at
        if record.places is None:
            return record.at
        if amount.origin == "implied":
            return record.places.key_in(record.base, ("name",))
        return record.places.value_in(record.base, tuple(amount.field.split(".")))

    # name --------------------------------------------------------------------------------
    def names(self) -> None:
        seen: dict[str, QueueRecord] = {}
        for record in self.records:
            if not DNS_LABEL.match(record.name) or len(record.name) > 63:
                self.report(
                    record,
                    record.at,
                    "name",
                    f"queue name {record.name!r} is not a DNS-1123 label: use at most 63 "
                    "lower-case letters, digits and '-', starting and ending with a letter or "
                    "digit",
                    field="metadata.name" if record.kai_queue else "name",
                )
            first = seen.get(record.name)
            if first is None:
                seen[record.name] = record
                continue
            self.report(
                record,
                record.at,
                "name",
                f"queue name {record.name!r} is already used by {first.where()} "
                f"({first.at.file}:{first.at.line}); queue names must be unique",
                field="metadata.name" if record.kai_queue else "name",
            )

    # parent-exists -------------------------------------------------------------------------
    def parents(self) -> None:
        reported: set[Source] = set()
        for record in self.records:
            if record.parent is None or record.nested or record.parent in self.first:
                continue
            at = record.parent_at or record.at
            if at in reported:  # one reference (a tree's spec.parent) serves several queues
                continue
            reported.add(at)
            hint = difflib.get_close_matches(record.parent, list(self.first), n=1)
            suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
            self._report_reference(
                record,
                "parent-exists",
                f"parent queue {record.parent!r} does not exist in the documents validated "
                f"together{suggestion}",
            )

    def _report_reference(self, record: QueueRecord, rule: str, message: str) -> None:
        """A problem at a parent reference (``spec.parent`` / ``parentQueue``)."""
        if record.parent_at is not None:
            path = "parentQueue" if record.kai_queue else "parent"
            self.problems.append(
                Problem.at(record.parent_at, rule, message, object=record.object, path=path)
            )
        else:
            self.report(record, record.at, rule, message)

    # cycle ---------------------------------------------------------------------------------
    def cycles(self) -> None:
        parent_of = {
            name: record.parent
            for name, record in self.first.items()
            if record.parent is not None and record.parent in self.first
        }
        done: set[str] = set()
        starts = sorted(self.first, key=lambda n: self.first[n].at) if self.exact else self.first
        for start in starts:
            if start in done:
                continue
            trail: list[str] = []
            position: dict[str, int] = {}
            node: str | None = start
            while node is not None and node not in done and node not in position:
                position[node] = len(trail)
                trail.append(node)
                node = parent_of.get(node)
            if node is not None and node in position:
                members = trail[position[node] :]
                head = min(members, key=lambda n: self.first[n].at)
                turn = members.index(head)
                ordered = members[turn:] + members[:turn] + [head]
                self._report_reference(
                    self.first[head],
                    "cycle",
                    f"queue {head!r} is its own ancestor: {' -> '.join(ordered)} "
                    "(each arrow points to the parent)",
                )
            done.update(trail)

    # values --------------------------------------------------------------------------------
    def values(self) -> None:
        for record in self.records:
            for kind, amounts in (("quota", record.quota), ("limit", record.limit)):
                for resource in RESOURCES:
                    amount = amounts.get(resource)
                    if amount is None or amount.value is None:
                        continue
                    if (
                        amount.value < 0
                        and amount.value != UNLIMITED
                        and amount.origin != "implied"
                    ):
                        self._value_problem(
                            record,
                            amount,
                            f"{kind} of {resource} must be -1 (unlimited) or at least 0, got "
                            f"{format_amount(resource, amount.value)}",
                        )
                    if (
                        kind == "limit"
                        and record.warn_omitted_limits
                        and amount.origin == "implied"
                    ):
                        self.report(
                            record,
                            self._at(record, amount),
                            "values",
                            f"the {resource} limit is omitted: KAI reads an omitted limit as 0, "
                            "which allows nothing; write limit: -1 for no limit",
                            field=amount.field,
                            severity="warning",
                        )
            for resource in RESOURCES:
                weight = record.over_quota_weight.get(resource)
                if weight is None or weight.value is None or weight.origin == "implied":
                    continue
                if weight.value < 0:
                    self._value_problem(
                        record,
                        weight,
                        f"overQuotaWeight of {resource} must be 0 or more, got "
                        f"{_decimal(weight.value)}",
                    )
            if (
                isinstance(record.priority, float)
                and record.priority_origin != "implied"
                and record.priority_at is not None
            ):
                problem = Problem.at(
                    record.priority_at,
                    "values",
                    f"priority must be an integer, got {record.priority!r}",
                    object=record.object,
                    path=(
                        "defaults.priority"
                        if record.priority_origin == "default"
                        else " ".join(p for p in (record.path, "priority") if p)
                    ),
                )
                self.problems.append(problem)

    def _value_problem(self, record: QueueRecord, amount: Amount, message: str) -> None:
        if amount.origin == "default" and amount.default_path:
            # Reported once for the tree, not once per queue that inherits it.
            self.problems.append(
                Problem.at(
                    self._at(record, amount),
                    "values",
                    message,
                    object=record.object,
                    path=amount.default_path,
                )
            )
        else:
            self.report(record, self._at(record, amount), "values", message, field=amount.field)

    # limit-below-quota ---------------------------------------------------------------------
    def limits(self) -> None:
        for record in self.records:
            for resource in RESOURCES:
                quota = record.quota.get(resource)
                limit = record.limit.get(resource)
                if quota is None or limit is None or quota.value is None or limit.value is None:
                    continue
                if limit.value == UNLIMITED or not _valid(limit.value) or not _valid(quota.value):
                    continue
                if quota.value != UNLIMITED and quota.value <= limit.value:
                    continue
                # Point at the limit when the queue writes it, else at its own quota.
                target = limit if limit.origin == "set" or quota.origin != "set" else quota
                shown_limit = format_amount(resource, limit.value) + _origin_note(limit)
                if quota.value == UNLIMITED:
                    message = (
                        f"quota -1 (the parent's whole share) with a finite limit "
                        f"{shown_limit}; give a finite quota or set the limit to -1"
                    )
                else:
                    message = (
                        f"limit {shown_limit} is below quota "
                        f"{format_amount(resource, quota.value)}{_origin_note(quota)}"
                    )
                self.report(
                    record,
                    self._at(record, target),
                    "limit-below-quota",
                    message,
                    field=target.field,
                )

    # children-quota-sum, child-quota-over-parent-limit, child-limit-over-parent-limit -------
    def children_rules(self) -> None:
        for parent_name, kids in self.children.items():
            parent = self.first[parent_name]
            for resource in RESOURCES:
                self._quota_sum(parent, kids, resource)
                self._against_parent_limit(parent, kids, resource)

    def _quota_sum(self, parent: QueueRecord, kids: list[QueueRecord], resource: str) -> None:
        quota = parent.quota.get(resource)
        if quota is None or quota.value is None or quota.value == UNLIMITED:
            return
        if not _valid(quota.value):
            return
        total: Exact = 0
        counted: list[tuple[QueueRecord, Exact, Exact]] = []
        for kid in kids:
            amount = kid.quota.get(resource)
            if amount is None or amount.value is None or not _valid(amount.value):
                continue
            share = quota.value if amount.value == UNLIMITED else amount.value
            total += share
            counted.append((kid, amount.value, share))
        if total <= quota.value:
            return
        parts = [
            f"{kid.name} {'-1' if value == UNLIMITED else format_amount(resource, share)}"
            for kid, value, share in counted
            if value != 0
        ]
        self.report(
            parent,
            self._at(parent, quota),
            "children-quota-sum",
            f"the children's {resource} quotas sum to {format_amount(resource, total)} "
            f"({', '.join(parts)}), above the parent's quota "
            f"{format_amount(resource, quota.value)}{_origin_note(quota)}"
            + (
                "; a child quota of -1 counts as the parent's whole quota"
                if any(p.endswith(" -1") for p in parts)
                else ""
            ),
            field=quota.field,
        )

    def _against_parent_limit(
        self, parent: QueueRecord, kids: list[QueueRecord], resource: str
    ) -> None:
        limit = parent.limit.get(resource)
        if limit is None or limit.value is None or limit.value == UNLIMITED:
            return
        if not _valid(limit.value):
            return
        shown_limit = format_amount(resource, limit.value) + _origin_note(limit)
        for kid in kids:
            quota = kid.quota.get(resource)
            if quota is not None and quota.value is not None and _valid(quota.value):
                if quota.value == UNLIMITED:
                    self.report(
                        kid,
                        self._at(kid, quota),
                        "child-quota-over-parent-limit",
                        f"quota -1 (the parent's whole share) but parent {parent.name!r} is "
                        f"capped at limit {shown_limit}",
                        field=quota.field,
                    )
                elif quota.value > limit.value:
                    self.report(
                        kid,
                        self._at(kid, quota),
                        "child-quota-over-parent-limit",
                        f"quota {format_amount(resource, quota.value)}{_origin_note(quota)} is "
                        f"above the limit {shown_limit} of parent {parent.name!r}",
                        field=quota.field,
                    )
            kid_limit = kid.limit.get(resource)
            if (
                kid_limit is not None
                and kid_limit.value is not None
                and kid_limit.value != UNLIMITED
                and _valid(kid_limit.value)
                and kid_limit.value > limit.value
            ):
                self.report(
                    kid,
                    self._at(kid, kid_limit),
                    "child-limit-over-parent-limit",
                    f"limit {format_amount(resource, kid_limit.value)}{_origin_note(kid_limit)} "
                    f"can never be reached: parent {parent.name!r} is capped at {shown_limit}",
                    field=kid_limit.field,
                    severity="warning",
                )

    # namespaces-on-leaf --------------------------------------------------------------------
    def namespaces(self) -> None:
        bound: dict[str, QueueRecord] = {}
        for record in self.records:
            if (
                record.namespaces
                and record.name in self.children
                and self.first[record.name] is record
            ):
                kids = ", ".join(k.name for k in self.children[record.name])
                self.report(
                    record,
                    record.namespaces_at or record.at,
                    "namespaces-on-leaf",
                    f"namespaces are allowed only on leaf queues, and {record.name!r} has "
                    f"children ({kids}); move them to a leaf",
                    field="namespaces",
                )
            for index, (namespace, at) in enumerate(record.namespaces):
                owner = bound.get(namespace)
                if owner is None:
                    bound[namespace] = record
                    continue
                self.report(
                    record,
                    at,
                    "namespaces-on-leaf",
                    f"namespace {namespace!r} is already bound to queue {owner.name!r} "
                    f"({owner.at.file}:{owner.at.line}); a namespace may feed only one leaf",
                    field=f"namespaces[{index}]",
                )

    # over-capacity -------------------------------------------------------------------------
    def capacity(self, capacity: Mapping[str, tuple[Fraction, Source]]) -> None:
        tops = [r for r in self.records if r.parent is None and self.first[r.name] is r]
        for resource in RESOURCES:
            if resource not in capacity:
                continue
            total_capacity, at = capacity[resource]
            total: Exact = 0
            parts: list[str] = []
            for record in tops:
                amount = record.quota.get(resource)
                if amount is None or amount.value is None or not _valid(amount.value):
                    continue
                share = total_capacity if amount.value == UNLIMITED else amount.value
                total += share
                if amount.value != 0:
                    shown = "-1" if amount.value == UNLIMITED else format_amount(resource, share)
                    parts.append(f"{record.name} {shown}")
            if total > total_capacity:
                self.problems.append(
                    Problem.at(
                        at,
                        "over-capacity",
                        f"top-level {resource} quotas sum to {format_amount(resource, total)} "
                        f"({', '.join(parts)}), more than the cluster's capacity "
                        f"{format_amount(resource, total_capacity)}",
                        object=None,
                        path=resource,
                        severity="warning",
                    )
                )


def _valid(value: Exact) -> bool:
    """-1 or a non-negative amount; other negatives are `values` problems and skipped here."""
    return value == UNLIMITED or value >= 0


def check_queues(
    records: Iterable[QueueRecord],
    *,
    capacity: Mapping[str, tuple[Fraction, Source]] | None = None,
) -> list[Problem]:
    """Every hierarchy problem of the queues, in no particular order.

    ``capacity`` maps a resource to the cluster's amount (base units) and where it is written;
    given, the top-level quotas are checked against it (``over-capacity`` warnings).
    """
    records = list(records)
    # A first pass in the order given finds whether there is any problem at all without looking
    # at a single place (finding places can mean reading files again); only when there is one
    # do the rules run again in the order of the places, for the exact messages.
    if not _run(_Checker(records, exact=False), capacity):
        return []
    return _run(_Checker(records), capacity)


def _run(
    checker: _Checker, capacity: Mapping[str, tuple[Fraction, Source]] | None
) -> list[Problem]:
    checker.names()
    checker.parents()
    checker.cycles()
    checker.values()
    checker.limits()
    checker.children_rules()
    checker.namespaces()
    if capacity:
        checker.capacity(capacity)
    return checker.problems

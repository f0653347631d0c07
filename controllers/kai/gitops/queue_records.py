"""Build :class:`~kai.gitops.quota_rules.QueueRecord` values from loaded documents.

A QueueTree yields one record per queue (defaults merged resource by resource, parents from the
nesting or from ``spec.parent``); a raw ``scheduling.run.ai/v2`` Queue yields one record with
KAI's meaning (numbers in millicores and megabytes, an omitted field is 0). Reading is tolerant:
a value of the wrong type becomes "unknown" (the schema check reports it), so one bad field does
not hide the rest of the tree from the hierarchy rules.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from kai.api.quantity import QuantityError, parse_quantity
from kai.gitops.loader import Document, FieldPath
from kai.gitops.quota_rules import RESOURCES, Amount, Exact, Origin, QueueRecord

__all__ = [
    "QUEUE_TREE",
    "RAW_QUEUE",
    "records_from_documents",
    "records_from_objects",
    "tree_amount",
]

QUEUE_TREE = ("gitops.kai.scheduler/v1alpha1", "QueueTree")
RAW_QUEUE = ("scheduling.run.ai/v2", "Queue")

_IMPLIED: dict[str, Exact] = {"quota": 0, "limit": -1, "overQuotaWeight": 1}
_FIELDS = {(kind, resource): f"{kind}.{resource}" for kind in _IMPLIED for resource in RESOURCES}
_IMPLIED_AMOUNTS = {
    (kind, resource): Amount(value, None, _FIELDS[kind, resource], "implied")
    for kind, value in _IMPLIED.items()
    for resource in RESOURCES
}


def tree_amount(resource: str, value: Any) -> Exact | None:
    """The exact base-unit value of a QueueTree amount (an int when whole), or None when it
    cannot be read."""
    try:  # keyed by the type too: True == 1, yet True is no amount
        return _tree_amount(resource, type(value).__name__, value)
    except TypeError:  # not hashable: not an amount either
        return None


@functools.lru_cache(maxsize=4096)
def _tree_amount(resource: str, _type: str, value: Any) -> Exact | None:
    if isinstance(value, bool):
        return None
    if resource == "gpu" and not isinstance(value, int | float):
        return None
    if not isinstance(value, int | float | str):
        return None
    try:
        return _whole(parse_quantity(value))
    except QuantityError:
        return None


def _whole(value: Fraction) -> Exact:
    """``value`` as an int when it is whole (int arithmetic and comparisons are much faster)."""
    return value.numerator if value.denominator == 1 else value


def _finite_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not isinstance(value, float) or math.isfinite(value)


def _weight(value: Any) -> Exact | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return _whole(parse_quantity(value))
    except QuantityError:
        return None


def _kai_amount(resource: str, value: Any) -> Exact | None:
    """A raw KAI Queue number in base units (cpu millicores -> cores, memory MB -> bytes)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = parse_quantity(value)
    except QuantityError:
        return None
    if number == -1:
        return number
    if resource == "cpu":
        return number / 1000
    if resource == "memory":
        return number * 10**6
    return number


def _display(path: FieldPath, names: list[str]) -> str:
    """``spec.queues[0].children[1]`` -> ``queues[0].children[1] (nlp)``."""
    text = ""
    for part in path[1:]:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return f"{text} ({names[-1]})" if names else text


class _TreeReader:
    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.object = doc.object_name
        spec = doc.data.get("spec")
        self.spec = spec if isinstance(spec, dict) else {}
        defaults = self.spec.get("defaults")
        self.defaults = defaults if isinstance(defaults, dict) else {}
        self.records: list[QueueRecord] = []
        self._set: dict[tuple[str, str, Exact | None], Amount] = {}
        self._dicts: dict[tuple[int, ...], dict[str, Amount]] = {}
        self._defaults_read: dict[tuple[str, str], Amount] = {}

    def read(self) -> list[QueueRecord]:
        queues = self.spec.get("queues")
        parent = self.spec.get("parent")
        parent_name = parent if isinstance(parent, str) and parent else None
        parent_at = self.doc.value_at(("spec", "parent")) if parent_name else None
        if isinstance(queues, list):
            for index, item in enumerate(queues):
                self._queue(item, ("spec", "queues", index), parent_name, parent_at, nested=False)
        return self.records

    def _amounts(self, item: dict[str, Any], kind: str) -> dict[str, Amount]:
        """The queue's amounts of ``kind``: shared objects (their places are found from the
        queue's record), and one dict for every queue with the same three amounts."""
        own = item.get(kind)
        default = self.defaults.get(kind)
        reader = _weight if kind == "overQuotaWeight" else None
        found: list[Amount] = []
        for resource in RESOURCES:
            if isinstance(own, dict) and resource in own:
                value = (reader or _reader(resource))(own[resource])
                key = (kind, resource, value)
                amount = self._set.get(key)
                if amount is None:
                    amount = self._set[key] = Amount(value, None, _FIELDS[kind, resource])
            elif isinstance(default, dict) and resource in default:
                amount = self._default(kind, resource, default[resource], reader)
            else:
                amount = _IMPLIED_AMOUNTS[kind, resource]
            found.append(amount)
        # Keyed by identity: every amount here lives as long as the reader (hashing one would
        # look up its place).
        identity = tuple(id(amount) for amount in found)
        shared = self._dicts.get(identity)
        if shared is None:
            shared = self._dicts[identity] = dict(zip(RESOURCES, found, strict=True))
        return shared

    def _default(self, kind: str, resource: str, value: Any, reader: Any) -> Amount:
        """The amount a queue takes from ``spec.defaults``: one object for the whole tree."""
        found = self._defaults_read.get((kind, resource))
        if found is None:
            found = Amount(
                (reader or _reader(resource))(value),
                self.doc.value_at(("spec", "defaults", kind, resource)),
                _FIELDS[kind, resource],
                "default",
                f"defaults.{kind}.{resource}",
            )
            self._defaults_read[kind, resource] = found
        return found

    def _queue(
        self,
        item: Any,
        path: FieldPath,
        parent: str | None,
        parent_at: Any,
        *,
        nested: bool,
    ) -> None:
        if not isinstance(item, dict):
            return
        name = item.get("name")
        if not isinstance(name, str):
            # Without a name the queue cannot be checked (the schema check reports it); its
            # children still are, as top queues without a known parent.
            self._children(item, path, None)
            return
        display = _display(path, [name])
        priority: int | float | None
        origin: Origin
        if "priority" in item:
            raw, origin, at = item["priority"], "set", self.doc.value_in(path, ("priority",))
        elif "priority" in self.defaults:
            raw, origin = self.defaults["priority"], "default"
            at = self.doc.value_at(("spec", "defaults", "priority"))
        else:
            raw, origin, at = 100, "implied", None
        priority = raw if _finite_number(raw) else None
        namespaces: list[tuple[str, Any]] = []
        raw_namespaces = item.get("namespaces")
        if isinstance(raw_namespaces, list):
            for i, namespace in enumerate(raw_namespaces):
                if isinstance(namespace, str):
                    namespaces.append((namespace, self.doc.value_in(path, ("namespaces", i))))
        self.records.append(
            QueueRecord(
                name=name,
                at=self.doc.value_in(path, ("name",)),
                object=self.object,
                path=display,
                parent=parent,
                parent_at=parent_at,
                nested=nested,
                quota=self._amounts(item, "quota"),
                limit=self._amounts(item, "limit"),
                over_quota_weight=self._amounts(item, "overQuotaWeight"),
                priority=priority,
                priority_at=at,
                priority_origin=origin,
                namespaces=tuple(namespaces),
                namespaces_at=(
                    self.doc.value_in(path, ("namespaces",)) if "namespaces" in item else None
                ),
                places=self.doc,
                base=path,
            )
        )
        self._children(item, path, name)

    def _children(self, item: dict[str, Any], path: FieldPath, name: str | None) -> None:
        children = item.get("children")
        if not isinstance(children, list):
            return
        for index, child in enumerate(children):
            self._queue(child, (*path, "children", index), name, None, nested=name is not None)


def _reader(resource: str) -> Any:
    return _READERS[resource]


_READERS = {
    resource: functools.partial(tree_amount, resource) for resource in ("gpu", "cpu", "memory")
}


def _raw_queue(doc: Document) -> QueueRecord | None:
    name = doc.name
    if name is None:
        return None
    spec = doc.data.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    parent = spec.get("parentQueue")
    parent_name = parent if isinstance(parent, str) and parent else None
    resources = spec.get("resources")
    has_resources = isinstance(resources, dict)
    resources = resources if isinstance(resources, dict) else {}
    amounts: dict[str, dict[str, Amount]] = {"quota": {}, "limit": {}, "overQuotaWeight": {}}
    for resource in RESOURCES:
        entry = resources.get(resource)
        for kind in amounts:
            field = f"resources.{resource}.{kind}"
            path: FieldPath = ("spec", "resources", resource, kind)
            if isinstance(entry, dict) and kind in entry:
                reader = _weight if kind == "overQuotaWeight" else _kai_reader(resource)
                amounts[kind][resource] = Amount(reader(entry[kind]), doc.value_at(path), field)
            else:
                # KAI reads an omitted number as 0. Without spec.resources at all the schema
                # check already complains, so the omitted limits are not warned about as well.
                where = (
                    doc.key_at(("spec", "resources", resource))
                    if has_resources
                    else (doc.value_at(("metadata", "name")))
                )
                amounts[kind][resource] = Amount(Fraction(0), where, field, "implied")
    raw_priority = spec.get("priority", 100)
    priority = raw_priority if _finite_number(raw_priority) else None
    return QueueRecord(
        name=name,
        at=doc.value_at(("metadata", "name")),
        object=doc.object_name,
        path="",
        parent=parent_name,
        parent_at=doc.value_at(("spec", "parentQueue")) if parent_name else None,
        quota=amounts["quota"],
        limit=amounts["limit"],
        over_quota_weight=amounts["overQuotaWeight"],
        priority=priority,
        priority_at=doc.value_at(("spec", "priority")) if "priority" in spec else None,
        priority_origin="set" if "priority" in spec else "implied",
        kai_queue=True,
        warn_omitted_limits=has_resources,
    )


def _kai_reader(resource: str) -> Any:
    return lambda value: _kai_amount(resource, value)


def records_from_documents(documents: list[Document]) -> list[QueueRecord]:
    """Every queue of the QueueTrees and KAI Queues among ``documents``."""
    records: list[QueueRecord] = []
    for doc in documents:
        identity = (doc.api_version, doc.kind)
        if identity == QUEUE_TREE:
            records.extend(_TreeReader(doc).read())
        elif identity == RAW_QUEUE:
            record = _raw_queue(doc)
            if record is not None:
                records.append(record)
    return records


def records_from_objects(objects: Iterable[tuple[str, dict[str, Any]]]) -> list[QueueRecord]:
    """Records for callers that hold objects rather than YAML text (the admission webhook).

    Each entry is ``(label, object)``; the label stands in for the file name in problems, and
    every position is line 1, column 1 (the field path still says which value is wrong).
    """
    return records_from_documents([Document(label, 0, obj) for label, obj in objects])

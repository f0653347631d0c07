"""Validate GitOps documents together: the engine behind ``kai validate`` and ``kai render``.

Order of work: load (``yaml``, ``duplicate-key``, ``io``), identify (``document``), JSON Schema
(``schema``), then the hierarchy rules over every queue of every document at once
(:mod:`kai.gitops.quota_rules`) and the policy rules (:mod:`kai.gitops.policy_rules`).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field, replace
from fractions import Fraction

from kai.api.quantity import QuantityError, parse_quantity
from kai.api.untrusted_files import DEFAULT_LIMITS, FileLimits, UntrustedFileError, read_untrusted
from kai.gitops.api_limits import check_api_limits
from kai.gitops.loader import Document, LoadResult, UsageError, load_paths, load_text
from kai.gitops.policy_rules import check_policies
from kai.gitops.problems import Problem, Source, sort_problems
from kai.gitops.queue_records import records_from_documents
from kai.gitops.quota_rules import RESOURCES, check_queues
from kai.gitops.schema_check import check_documents

__all__ = ["Capacity", "Report", "load_capacity", "validate", "validate_paths"]

Capacity = dict[str, tuple[Fraction, Source]]


@dataclass
class Report:
    """The outcome of validating a set of documents."""

    documents: list[Document] = field(default_factory=list)  # the known documents of our groups
    problems: list[Problem] = field(default_factory=list)  # sorted
    files: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def strict(self) -> Report:
        """The same report with every warning turned into an error (``--strict``)."""
        return Report(
            self.documents,
            [replace(p, severity="error") for p in self.problems],
            self.files,
        )


def validate(loaded: LoadResult, capacity: Capacity | None = None) -> Report:
    """Check everything ``loaded`` holds, together."""
    known, problems = check_documents(loaded.documents)
    problems = loaded.problems + problems
    # What the API server refuses (names, number ranges), unless a place already has a problem.
    taken = {(p.file, p.line, p.column) for p in problems}
    problems += [p for p in check_api_limits(known) if (p.file, p.line, p.column) not in taken]
    problems += check_queues(records_from_documents(known), capacity=capacity)
    problems += check_policies(known)
    return Report(known, sort_problems(problems), loaded.files)


def validate_paths(
    paths: list[str],
    *,
    capacity_file: str | None = None,
    stdin: io.BufferedIOBase | None = None,
    limits: FileLimits = DEFAULT_LIMITS,
) -> Report:
    """Load and check ``paths``. Raises :class:`UsageError` for bad paths or capacity file."""
    capacity = load_capacity(capacity_file, limits) if capacity_file else None
    return validate(load_paths(paths, stdin=stdin, limits=limits), capacity)


def load_capacity(path: str, limits: FileLimits = DEFAULT_LIMITS) -> Capacity:
    """Read a ``--capacity`` file: a mapping of gpu / cpu / memory to quantities."""
    try:
        raw = read_untrusted(path, os.path.dirname(path) or ".", limits.max_file_bytes)
    except UntrustedFileError as exc:
        raise UsageError(f"cannot read capacity file: {exc}") from exc
    except OSError as exc:
        raise UsageError(f"{path}: cannot read capacity file: {exc.strerror}") from exc
    loaded = load_text(raw, path, limits=limits)
    if loaded.problems:
        raise UsageError(loaded.problems[0].text())
    if len(loaded.documents) != 1 or not isinstance(loaded.documents[0].data, dict):
        raise UsageError(
            f'{path}: a capacity file is one mapping, e.g. {{gpu: 512, cpu: "4096", memory: 32Ti}}'
        )
    doc = loaded.documents[0]
    capacity: Capacity = {}
    for key, value in doc.data.items():
        at = doc.value_at((key,))
        if key not in RESOURCES:
            raise UsageError(
                f"{path}:{at.line}:{at.column}: unknown resource {key!r} "
                f"(expected {', '.join(RESOURCES)})"
            )
        try:
            amount = parse_quantity(value)
        except QuantityError as exc:
            raise UsageError(f"{path}:{at.line}:{at.column}: {key}: {exc}") from exc
        if amount < 0:
            raise UsageError(f"{path}:{at.line}:{at.column}: {key}: capacity must be at least 0")
        capacity[key] = (amount, at)
    return capacity

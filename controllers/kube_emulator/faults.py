"""Fault injection for tests: failed requests, conflicts and dropped watches, reproducible from
a seed and switchable while the server runs (in process through ``server.faults.configure``,
or from another process with ``PUT /kai-sim/faults`` and a JSON body of the same fields)."""

from __future__ import annotations

import random
import threading
from dataclasses import asdict, dataclass, fields
from typing import Any

from kube_emulator.errors import ApiError


@dataclass
class FaultSettings:
    error_rate: float = 0.0  # share of API requests (not discovery) answered 500
    conflict_rate: float = 0.0  # share of updates/patches answered 409 Conflict
    watch_drop_rate: float = 0.0  # chance, per event sent, that the watch connection is cut
    watch_drop_after: int = 0  # cut every watch after this many events (0 = never)
    seed: int = 0


class FaultInjector:
    def __init__(self) -> None:
        self.settings = FaultSettings()
        self._random = random.Random(0)
        self._lock = threading.Lock()
        self.injected = {"errors": 0, "conflicts": 0, "watch_drops": 0}

    def configure(self, **changes: Any) -> FaultSettings:
        known = {f.name for f in fields(FaultSettings)}
        unknown = set(changes) - known
        if unknown:
            raise ValueError(
                f"unknown fault setting(s): {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(known))}"
            )
        with self._lock:
            data = asdict(self.settings)
            data.update(changes)
            for name in ("error_rate", "conflict_rate", "watch_drop_rate"):
                value = float(data[name])
                if not 0.0 <= value <= 1.0:
                    raise ValueError(f"{name} must be between 0 and 1, got {value}")
                data[name] = value
            data["watch_drop_after"] = int(data["watch_drop_after"])
            data["seed"] = int(data["seed"])
            self.settings = FaultSettings(**data)
            self._random = random.Random(self.settings.seed)
            return self.settings

    def clear(self) -> None:
        self.configure(**asdict(FaultSettings()))

    @property
    def active(self) -> bool:
        s = self.settings
        return bool(s.error_rate or s.conflict_rate or s.watch_drop_rate or s.watch_drop_after)

    def _roll(self, rate: float) -> bool:
        if rate <= 0.0:
            return False
        with self._lock:
            return self._random.random() < rate

    def before_request(self, verb: str, resource: str, name: str) -> None:
        """Raise the injected failure for this request, if any."""
        s = self.settings
        if s.error_rate and self._roll(s.error_rate):
            self.injected["errors"] += 1
            raise ApiError(
                500, "Internal error occurred: injected fault (kai.sim faults)", "InternalError"
            )
        if s.conflict_rate and verb in ("update", "patch") and self._roll(s.conflict_rate):
            self.injected["conflicts"] += 1
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on {resource} "{name}": the '
                "object has been modified; please apply your changes to the "
                "latest version and try again (injected fault)",
                "Conflict",
                name=name,
                kind=resource,
            )

    def drop_watch(self, events_sent: int) -> bool:
        s = self.settings
        if s.watch_drop_after and events_sent >= s.watch_drop_after:
            self.injected["watch_drops"] += 1
            return True
        if s.watch_drop_rate and self._roll(s.watch_drop_rate):
            self.injected["watch_drops"] += 1
            return True
        return False

    def describe(self) -> dict[str, Any]:
        return {**asdict(self.settings), "injected": dict(self.injected)}

"""Leader election with a ``coordination.k8s.io/v1`` Lease (client-go's protocol).

The holder renews ``spec.renewTime`` every ``renew_period``; a candidate takes the Lease over
when it has not been renewed for ``lease_duration``. Every write carries the resourceVersion it
read, so two candidates can never both win a round: the loser gets 409 and reads again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kai.kube.client import ApiError, Kube, KubeError
from kai.kube.resources import LEASES

log = logging.getLogger("kai.kube.leader")


def _now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(ts: str | None) -> float | None:
    if not ts:
        return None
    for fmt in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(ts, fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    return None


class LeaderElector:
    """Runs in its own thread; ``is_leader`` says whether this process holds the Lease now."""

    def __init__(
        self,
        kube: Kube,
        name: str,
        namespace: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_period: float = 10.0,
        retry_period: float = 2.0,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.kube = kube
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_period = renew_period
        self.retry_period = retry_period
        self.on_change = on_change
        self.leading = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._observed: tuple[str, float] | None = None  # (renewTime seen, local time seen)

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    def start(self) -> LeaderElector:
        self._thread = threading.Thread(target=self._run, name=f"leader-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if release and self.is_leader:
            self._release()
        self._set(False)

    def _set(self, leading: bool) -> None:
        if leading == self.leading.is_set():
            return
        if leading:
            self.leading.set()
            log.info("%s: became leader of lease %s/%s", self.identity, self.namespace, self.name)
        else:
            self.leading.clear()
            log.info(
                "%s: no longer leader of lease %s/%s", self.identity, self.namespace, self.name
            )
        if self.on_change is not None:
            self.on_change(leading)

    def _run(self) -> None:
        last_renew = 0.0
        while not self._stop.is_set():
            try:
                ok = self._try_acquire_or_renew()
            except KubeError as exc:
                log.warning("%s: lease %s: %s", self.identity, self.name, exc)
                ok = False
            now = time.monotonic()
            if ok:
                last_renew = now
                self._set(True)
                wait = self.renew_period
            else:
                # a leader that cannot renew steps down before anyone may take over
                if self.is_leader and now - last_renew >= self.lease_duration * 0.8:
                    self._set(False)
                wait = self.retry_period
            self._stop.wait(wait)

    def _lease_body(self, spec: dict[str, Any], transitions: int) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                **spec,
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.lease_duration)),
                "renewTime": _now_micro(),
                "leaseTransitions": transitions,
            },
        }

    def _try_acquire_or_renew(self) -> bool:
        try:
            lease = self.kube.get(LEASES, self.name, self.namespace)
        except ApiError as exc:
            if exc.status != 404:
                raise
            body = self._lease_body({"acquireTime": _now_micro()}, 0)
            try:
                self.kube.create(LEASES, body)
                return True
            except ApiError as create_exc:
                if create_exc.status == 409:
                    return False
                raise
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        renew = str(spec.get("renewTime") or "")
        now = time.monotonic()
        if self._observed is None or self._observed[0] != renew:
            self._observed = (renew, now)
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder and holder != self.identity:
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
            # judged on the local clock since the renewTime last changed: no clock-skew trust
            if now - self._observed[1] < duration:
                return False
            transitions += 1
            new_spec = {"acquireTime": _now_micro()}
        elif not holder:
            transitions += 1
            new_spec = {"acquireTime": _now_micro()}
        else:
            new_spec = {"acquireTime": spec.get("acquireTime") or _now_micro()}
        body = self._lease_body(new_spec, transitions)
        body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
        try:
            self.kube.replace(LEASES, body)
        except ApiError as exc:
            if exc.status in (409, 404):
                return False
            raise
        return True

    def _release(self) -> None:
        try:
            lease = self.kube.get(LEASES, self.name, self.namespace)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "resourceVersion": lease["metadata"]["resourceVersion"],
                },
                "spec": {
                    **spec,
                    "holderIdentity": "",
                    "leaseDurationSeconds": 1,
                    "renewTime": _now_micro(),
                },
            }
            self.kube.replace(LEASES, body)
        except KubeError as exc:
            log.info("%s: could not release lease %s: %s", self.identity, self.name, exc)

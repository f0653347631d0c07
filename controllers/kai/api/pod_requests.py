"""A pod's effective resource requests, by Kubernetes' rule (with native sidecars, KEP-753).

- Main containers run together: their requests are summed.
- Init containers run one after another before them: each is max'ed against the rest.
- A native sidecar is an init container with ``restartPolicy: Always``: it starts in the init
  sequence and keeps running next to everything after it, so its requests are added to every
  later init container and to the main containers.

Effective = max(sum(main) + sum(sidecars), max over init containers i of (request_i + the
sidecars started before i)), then ``spec.overhead`` is added by the caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def is_sidecar(container: Mapping[str, Any]) -> bool:
    """An init container that keeps running: ``restartPolicy: Always``."""
    return container.get("restartPolicy") == "Always"


def effective_requests(
    containers: Iterable[Mapping[str, Any]],
    init_containers: Iterable[tuple[Mapping[str, Any], bool]],
    zero: Any,
) -> dict[str, Any]:
    """``containers``: each main container's requests; ``init_containers``: each init
    container's requests and whether it is a sidecar, in spec order; ``zero``: 0 of the
    number type used (float, Fraction)."""
    main: dict[str, Any] = {}
    for requests in containers:
        for key, value in requests.items():
            main[key] = main.get(key, zero) + value
    sidecars: dict[str, Any] = {}
    peak: dict[str, Any] = {}
    for requests, sidecar in init_containers:
        if sidecar:
            for key, value in requests.items():
                sidecars[key] = sidecars.get(key, zero) + value
            running = sidecars
        else:
            keys = dict.fromkeys([*sidecars, *requests])  # ordered: results are reproducible
            running = {k: sidecars.get(k, zero) + requests.get(k, zero) for k in keys}
        for key, value in running.items():
            if value > peak.get(key, zero):
                peak[key] = value
    keys = dict.fromkeys([*main, *sidecars])
    total = {k: main.get(k, zero) + sidecars.get(k, zero) for k in keys}
    for key, value in peak.items():
        if value > total.get(key, zero):
            total[key] = value
    return total

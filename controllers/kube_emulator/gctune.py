"""Garbage-collector settings for processes that keep large object caches.

A controller's informer caches (and the embedded API server's store and event history) hold
hundreds of thousands of long-lived dicts and lists, and decoding watch events allocates
millions more per minute. With CPython's default thresholds (700, 10, 10) the collector then
runs full (generation 2) collections every few seconds, each walking every cached object:
measured in the scheduler during a 5,000-pod burst, 1,446 collections took 5.1 s of its ~7 s of
CPU, the full ones 0.3-0.46 s each. Decoded JSON holds no reference cycles, so collecting far
less often loses nothing; cycles that do form (exceptions, frames) are still collected.
"""

from __future__ import annotations

import gc
import threading

# collections of generation 0 after this many net allocations (default 700); generation 1
# after 20 of those, and a full collection after 20 of generation 1 (the interpreter also
# waits until a quarter of the long-lived objects are new)
THRESHOLDS = (50_000, 20, 20)
_done = threading.Event()


def tune_for_large_caches() -> None:
    """Raise the collector's thresholds and move everything allocated so far (modules,
    classes, configuration) out of the collector's view with ``gc.freeze``. Idempotent; meant
    to be called once a process has imported what it needs."""
    if _done.is_set():
        return
    _done.set()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)

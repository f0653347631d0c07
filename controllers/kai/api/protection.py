"""In-use protection of Queues and QueueTrees: the names every component agrees on.

``kai controller`` puts :data:`FINALIZER` on every Queue (written by hand or compiled from a
QueueTree) and on every QueueTree. A delete is then accepted at once: the object stays
Terminating, with the condition :data:`IN_USE` naming what holds it, and the controller removes
the finalizer when nothing does any more (Kubernetes' convention, as
``kubernetes.io/pvc-protection``). The admission webhook only warns on such a delete; the
scheduler's status writer leaves the condition alone.
"""

from __future__ import annotations

__all__ = ["FINALIZER", "IN_USE"]

FINALIZER = "kai.scheduler/queue-in-use-protection"
IN_USE = "InUse"  # condition type on a Terminating Queue or QueueTree while something holds it

"""Read-only answers from the scheduler's own core: ``kai explain``, ``kai queues``, ``kai plan``.

Every answer starts from a :class:`~kai.reconcilers.cluster_snapshot.ClusterSnapshot` (captured
from a cluster or read from a file), builds the core's input with the live scheduler's builder,
and runs the same session (:func:`kai.scheduler.session.run_session`) or the same fair-share
division. Nothing here writes to a cluster.
"""

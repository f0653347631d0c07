"""Which GPU sharing modes a node allows (SharingPolicy, this project's GitOps document).

A SharingPolicy names a node pool (the value of the node-pool label, ``""`` for nodes without it)
and the modes its nodes allow: ``fraction`` (``gpu-fraction``), ``gpu-memory``, ``mps``, ``mig``.
The snapshot producer turns the policies into :attr:`NodeSpec.sharing_modes` with
:func:`node_sharing_modes`; the core's predicate then keeps a shared or MIG request off nodes
whose pool does not allow its mode. No policy at all means every mode everywhere (KAI's
behaviour). ``mps`` is only checked at admission: the scheduler places an MPS pod like any other
shared request.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from kai.scheduler.snapshot import NodeSpec, TaskSpec

__all__ = ["MODES", "NODE_POOL_LABEL", "node_sharing_modes", "sharing_mode"]

MODES = ("fraction", "gpu-memory", "mps", "mig")
NODE_POOL_LABEL = "kai.scheduler/node-pool"


def sharing_mode(task: TaskSpec) -> str | None:
    """The sharing mode a task's GPU request needs (None for whole GPUs or no GPU)."""
    if task.gpu.fraction is not None:
        return "fraction"
    if task.gpu.memory_mib is not None:
        return "gpu-memory"
    if task.gpu.mig:
        return "mig"
    return None


def node_sharing_modes(
    policies: Mapping[str, Collection[str]],
    nodes: Sequence[NodeSpec],
    pool_label: str = NODE_POOL_LABEL,
) -> list[frozenset[str] | None]:
    """Allowed modes per node, in the order of ``nodes``: the modes of the policy of the node's
    pool; ``None`` (everything) when no policy exists at all; a pool without a policy next to
    pools with one gets the empty set (whole GPUs only), so that adding a first policy never
    silently leaves the other pools open."""
    if not policies:
        return [None] * len(nodes)
    unknown = sorted({m for modes in policies.values() for m in modes} - set(MODES))
    if unknown:
        raise ValueError(
            f"unknown GPU sharing mode(s) {', '.join(unknown)}; known: {', '.join(MODES)}"
        )
    out: list[frozenset[str] | None] = []
    for node in nodes:
        pool = node.labels.get(pool_label, "")
        out.append(frozenset(policies.get(pool, ())))
    return out

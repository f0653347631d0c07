"""Small controllers of the embedded API server that do what kube-controller-manager's do for
the workloads users submit: Jobs, ReplicaSets, Deployments and StatefulSets get their pods
(names, labels, owner references and status as the real ones write them). ``kai up`` runs them;
``kai apiserver --workload-controllers`` too. Each module says what it leaves out."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kube_emulator.controllers.manager import ControllerManager
    from kube_emulator.operations import ApiCore


def workload_controllers(core: ApiCore, resync: float = 5.0) -> ControllerManager:
    """The Job, ReplicaSet, Deployment and StatefulSet controllers on one loop (not started)."""
    # imported here: the API server's create path imports this package's defaults
    from kube_emulator.controllers.common import DEPLOYMENTS, JOBS, REPLICASETS, STATEFULSETS
    from kube_emulator.controllers.deployments import DeploymentController
    from kube_emulator.controllers.jobs import JobController
    from kube_emulator.controllers.manager import ControllerManager
    from kube_emulator.controllers.replicasets import ReplicaSetController
    from kube_emulator.controllers.statefulsets import StatefulSetController

    return ControllerManager(
        core,
        {
            JOBS: JobController(core).reconcile,
            REPLICASETS: ReplicaSetController(core).reconcile,
            DEPLOYMENTS: DeploymentController(core).reconcile,
            STATEFULSETS: StatefulSetController(core).reconcile,
        },
        resync=resync,
    )


__all__ = ["workload_controllers"]

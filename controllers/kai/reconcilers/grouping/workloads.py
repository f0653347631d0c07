"""Kubernetes' own workload kinds and bare pods (Spark's driver and executors included)."""

from __future__ import annotations

from kai.reconcilers.grouping.base import (
    BUILD,
    INFERENCE,
    Chain,
    Plan,
    labels_of,
    md,
    min_member_annotation,
)
from kai.reconcilers.grouping.registry import default_plan, register

SPARK_APP_NAME = "spark-app-name"
SPARK_APP_SELECTOR = "spark-app-selector"


@register("v1", "Pod")
def bare_pod(chain: Chain) -> Plan:
    """A pod without owner: its own PodGroup; Spark pods (driver and executors owned by the
    driver) share one PodGroup per ``spark-app-selector``."""
    top = chain.top
    plan = default_plan(chain)
    selector = labels_of(top).get(SPARK_APP_SELECTOR)
    if selector and labels_of(top).get(SPARK_APP_NAME):
        plan.name = f"pg-{selector}-{md(top)['uid']}"
        plan.kind_name = "SparkApplication"
    return plan


@register("batch/v1", "Job")
def job(chain: Chain) -> Plan:
    """One PodGroup per Job; ``kai.scheduler/batch-min-member`` makes it a gang."""
    plan = default_plan(chain)
    plan.min_member = min_member_annotation(chain.top) or 1
    return plan


@register("batch/v1", "CronJob")
def cron_job(chain: Chain) -> Plan:
    """One PodGroup per run (the Job), the CronJob's labels counting first."""
    cron = chain.top
    run = chain.owners[-2] if len(chain.owners) > 1 else cron
    plan = job(chain.below(cron)) if run is not cron else default_plan(chain)
    plan.sources = [cron, run, chain.pod] if run is not cron else [cron, chain.pod]
    plan.kind_name = "CronJob"
    plan.kind_group = "batch"
    return plan


@register("apps/v1", "Deployment")
def deployment(chain: Chain) -> Plan:
    """A Deployment's replicas are independent: one PodGroup per pod, priority inference."""
    plan = default_plan(chain, INFERENCE)
    pm = md(chain.pod)
    plan.name = f"pg-{pm['name']}-{pm['uid']}"
    plan.owner = chain.pod
    return plan


@register("apps/v1", "ReplicaSet", "StatefulSet")
def replica_set(chain: Chain) -> Plan:
    return default_plan(chain)


@register("sparkoperator.k8s.io/*", "SparkApplication", "ScheduledSparkApplication")
@register("kubeflow.org/v1alpha1", "ScheduledWorkflow")
@register("machinelearning.seldon.io/*", "SeldonDeployment")
@register("kubevirt.io/v1", "VirtualMachineInstance")
@register("workspace.devfile.io/*", "DevWorkspace")
@register("tekton.dev/*", "PipelineRun", "TaskRun")
def whole_owner(chain: Chain) -> Plan:
    """Kinds KAI groups with its default grouper: one PodGroup for the whole top owner."""
    return default_plan(chain)


@register("kubeflow.org/v1beta1", "Notebook")
def notebook(chain: Chain) -> Plan:
    return default_plan(chain, BUILD)


@register("egx.nvidia.io/v1", "SPOTRequest")
def spot_request(chain: Chain) -> Plan:
    return default_plan(chain, INFERENCE)

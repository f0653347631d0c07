"""Argo Workflows (argoproj.io Workflow): the Workflow's queue, priority class and
preemptibility on every pod, and, beyond KAI, a gang for a step's parallel fan-out.

Without the annotation each pod gets its own PodGroup (KAI skips the Workflow owner). A
template whose ``metadata.annotations`` carry ``kai.scheduler/gang-fan-out`` (Argo copies them
onto the template's pods) makes the fan-out of the step or DAG task that runs it
(``withItems``, ``withParam``, ``withSequence``) one PodGroup, owned by the Workflow:

- ``"true"``: minMember = the number of items (``withParam``: the fan-out's nodes in the
  Workflow's status), capped by the ``parallelism`` of the template holding the step and of
  the Workflow, since Argo never runs more at once;
- a positive integer N: minMember = N.

Argo names a fan-out pod's node ``<parent>.<step>(<index>:<item>)`` (annotation
``workflows.argoproj.io/node-name``). The Workflow is read with the ``argo-workflows`` models.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from kai.reconcilers.grouping.base import Chain, GroupingError, Plan, annotations_of, describe, md
from kai.reconcilers.grouping.registry import plan_for, register

GANG_FAN_OUT = "kai.scheduler/gang-fan-out"
NODE_NAME = "workflows.argoproj.io/node-name"
_FAN_OUT = re.compile(r"^(?P<prefix>.*)\((?P<index>\d+):.*\)$", re.DOTALL)
_STEP = re.compile(r"(?P<step>[A-Za-z0-9_-]+)$")


def workflow_model(obj: dict[str, Any]) -> Any:
    """The Workflow as an ``argo_workflows`` model (its schema checks the shape)."""
    from argo_workflows.configuration import Configuration
    from argo_workflows.model.io_argoproj_workflow_v1alpha1_workflow import (
        IoArgoprojWorkflowV1alpha1Workflow,
    )
    from argo_workflows.model_utils import validate_and_convert_types

    config = Configuration()
    config.discard_unknown_keys = True
    try:
        return validate_and_convert_types(
            obj, (IoArgoprojWorkflowV1alpha1Workflow,), ["workflow"], True, True, config
        )
    except Exception as exc:  # the models raise several exception types for a bad shape
        raise GroupingError(f"{describe(obj)}: not a valid Workflow: {exc}") from exc


def _get(model: Any, name: str) -> Any:
    if model is None:
        return None
    getter = getattr(model, "get", None)
    if getter is not None:
        return getter(name)
    return getattr(model, name, None)


def _items(value: Any) -> list[Any]:
    inner = _get(value, "value") if not isinstance(value, list) else value
    return list(inner or [])


def _templates(wf: Any) -> list[Any]:
    templates = list(_get(_get(wf, "spec"), "templates") or [])
    stored = _get(_get(wf, "status"), "stored_workflow_template_spec")
    templates += list(_get(stored, "templates") or [])
    templates += list((_get(_get(wf, "status"), "stored_templates") or {}).values())
    return templates


def _fan_out_steps(wf: Any, step: str) -> list[tuple[Any, Any]]:
    """(the template holding it, the step or DAG task) named ``step``."""
    out = []
    for template in _templates(wf):
        for group in _get(template, "steps") or []:
            for candidate in _items(group):
                if _get(candidate, "name") == step:
                    out.append((template, candidate))
        for task in _get(_get(template, "dag"), "tasks") or []:
            if _get(task, "name") == step:
                out.append((template, task))
    return out


def _sequence_size(seq: Any, where: str) -> int:
    count, start, end = (_get(seq, k) for k in ("count", "start", "end"))
    try:
        if count is not None:
            return int(str(count))
        return abs(int(str(end or 0)) - int(str(start or 0))) + 1
    except ValueError as exc:
        raise GroupingError(f"{where}: withSequence is not resolved to numbers") from exc


def fan_out_size(wf_obj: dict[str, Any], prefix: str, index: int) -> int:
    """How many pods of the fan-out ``prefix`` Argo runs at once."""
    wf = workflow_model(wf_obj)
    match = _STEP.search(prefix)
    step = match.group("step") if match else ""
    found = _fan_out_steps(wf, step)
    where = f"{describe(wf_obj)} step {step!r}"
    if not found:
        raise GroupingError(f"{where}: no step or DAG task of that name in the Workflow")
    sizes = set()
    caps = []
    for template, candidate in found:
        with_items = _get(candidate, "with_items")
        if with_items is not None:
            sizes.add(len(list(with_items)))
        elif _get(candidate, "with_sequence") is not None:
            sizes.add(_sequence_size(_get(candidate, "with_sequence"), where))
        elif _get(candidate, "with_param") is not None:
            nodes = _get(_get(wf, "status"), "nodes") or {}
            siblings = {
                m.group("index")
                for node in nodes.values()
                if (m := _FAN_OUT.match(str(_get(node, "name") or "")))
                and m.group("prefix") == prefix
            }
            sizes.add(max(len(siblings), index + 1))
        else:
            raise GroupingError(f"{where}: has no withItems, withParam or withSequence to fan out")
        if _get(template, "parallelism"):
            caps.append(int(_get(template, "parallelism")))
    if len(sizes) > 1:
        raise GroupingError(
            f"{where}: several steps of that name fan out to different sizes {sorted(sizes)}"
        )
    size = sizes.pop()
    if _get(_get(wf, "spec"), "parallelism"):
        caps.append(int(_get(_get(wf, "spec"), "parallelism")))
    return max(1, min([size, *caps]))


@register("argoproj.io/*", "Workflow")
def workflow(chain: Chain) -> Plan:
    top = chain.top
    inner = chain.below(top)
    plan = plan_for(inner)
    plan.sources = [top, *(plan.sources or [chain.pod])]
    ask = annotations_of(chain.pod).get(GANG_FAN_OUT)
    if not ask or ask.lower() == "false":
        return plan
    node = annotations_of(chain.pod).get(NODE_NAME, "")
    match = _FAN_OUT.match(node)
    if match is None:
        return plan  # not part of a fan-out: a gang of one
    prefix, index = match.group("prefix"), int(match.group("index"))
    if ask.lower() == "true":
        size = fan_out_size(top, prefix, index)
    else:
        try:
            size = int(ask)
        except ValueError:
            size = 0
        if size < 1 or str(size) != ask.strip():
            raise GroupingError(
                f"{describe(chain.pod)}: annotation {GANG_FAN_OUT}={ask!r}: "
                "must be true, false or a positive integer"
            )
    wm = md(top)
    digest = hashlib.sha256(f"{wm['uid']}/{prefix}".encode()).hexdigest()[:12]
    step_match = _STEP.search(prefix)
    step = step_match.group("step").lower() if step_match else "fan-out"
    plan.owner = top
    plan.name = f"pg-{wm['name']}-{step}-{digest}"
    plan.min_member = size
    plan.kind_name, plan.kind_group = "Workflow", "argoproj.io"
    return plan

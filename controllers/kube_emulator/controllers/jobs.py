"""The Job controller, as kube-controller-manager's for what schedulers see: pods
``<job>-<random>`` (``<job>-<index>-<random>`` for ``completionMode: Indexed``) from the
template, up to ``parallelism`` at once until ``completions`` pods succeeded; each pod carries
the finalizer ``batch.kubernetes.io/job-tracking`` until it is counted in the Job's status. A
pod that fails or is deleted before finishing counts as failed and is replaced (policy
``TerminatingOrFailed``) until ``backoffLimit`` is exceeded; then the Job fails and its active
pods are deleted. ``suspend: true`` deletes the active pods and creates none.

Not done (what kai never needed): ``activeDeadlineSeconds``, ``podFailurePolicy``,
``successPolicy``, ``backoffLimitPerIndex``, the exponential back-off between replacements,
``ttlSecondsAfterFinished``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kube_emulator import meta
from kube_emulator.controllers.common import (
    JOBS,
    PODS,
    Recorder,
    active,
    controller_ref,
    controller_uid,
    deleting,
    phase,
    pod_from_template,
    ready,
    terminal,
)
from kube_emulator.operations import WriteOptions

if TYPE_CHECKING:
    from kube_emulator.operations import ApiCore

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def _index(pod: dict[str, Any]) -> int | None:
    raw = (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _parse_indexes(text: str | None) -> set[int]:
    out: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _format_indexes(indexes: set[int]) -> str:
    """``status.completedIndexes`` as the real controller writes it: runs of three or more as
    ``first-last``, shorter ones listed (``0,1,3-6``)."""
    runs: list[list[int]] = []
    for i in sorted(indexes):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    parts = [
        f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(str(i) for i in run) for run in runs
    ]
    return ",".join(parts)


def _condition(ctype: str, reason: str, message: str, now: str) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }


def _finished(job: dict[str, Any]) -> bool:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return True
    return False


@dataclass
class _Counts:
    succeeded: int
    failed: int
    completed: set[int]  # completion indexes that succeeded (Indexed Jobs)


class JobController:
    def __init__(self, core: ApiCore) -> None:
        self.core = core
        self.events = Recorder(core, "job-controller")

    def _owned_pods(self, uid: str) -> list[dict[str, Any]]:
        store = self.core.store
        pods = []
        for tkey, ns, name in store.dependents(uid):
            if tkey != PODS:
                continue
            pod = store.get(PODS, ns, name)
            if pod is not None and controller_uid(pod) == uid:
                pods.append(pod)
        return pods

    def _release_pods(self, ns: str, name: str, job: dict[str, Any] | None) -> None:
        """A deleted Job (gone, or being deleted) keeps no pod: as the real controller
        (``cleanupPodFinalizers`` on a Job's deletion, orphan pods without their Job), the
        tracking finalizer goes from each of its pods, so that their deletion by the garbage
        collector completes (store lock held)."""
        pod_rt = self.core.types[PODS]
        uid = job["metadata"]["uid"] if job is not None else None
        for pod in self.core.store.iter(PODS, ns):
            finalizers = pod["metadata"].get("finalizers") or []
            if TRACKING_FINALIZER not in finalizers:
                continue
            ref = controller_ref(pod)
            if ref is None or ref.get("kind") != "Job" or ref.get("name") != name:
                continue
            if uid is not None and ref.get("uid") != uid:
                continue
            new = dict(pod)
            new["metadata"] = {
                **pod["metadata"],
                "finalizers": [f for f in finalizers if f != TRACKING_FINALIZER],
            }
            self.core.update_internal(pod_rt, pod, new)

    def _count_finished(self, job: dict[str, Any], counts: _Counts) -> None:
        """Count each finished pod once, dropping its tracking finalizer in the same step
        (store lock held): a pod deleted before it finished counts as failed."""
        pod_rt = self.core.types[PODS]
        indexed = (job.get("spec") or {}).get("completionMode") == "Indexed"
        for pod in self._owned_pods(job["metadata"]["uid"]):
            finalizers = pod["metadata"].get("finalizers") or []
            if TRACKING_FINALIZER not in finalizers or not (terminal(pod) or deleting(pod)):
                continue
            index = _index(pod)
            if phase(pod) != "Succeeded":
                counts.failed += 1
            elif not indexed or index is None:
                counts.succeeded += 1
            elif index not in counts.completed:
                counts.completed.add(index)
                counts.succeeded += 1
            new = dict(pod)
            new["metadata"] = {
                **pod["metadata"],
                "finalizers": [f for f in finalizers if f != TRACKING_FINALIZER],
            }
            self.core.update_internal(pod_rt, pod, new)

    @staticmethod
    def _plan(
        job: dict[str, Any], pods: list[dict[str, Any]], counts: _Counts
    ) -> tuple[list[int | None], list[dict[str, Any]]]:
        """The pods to create (their completion indexes, None when not Indexed) and the active
        pods to delete, for a Job that is neither finished nor suspended."""
        spec = job.get("spec") or {}
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism") or 0)
        if completions is None:  # a work queue: no new pods once one succeeded
            want = parallelism if counts.succeeded == 0 else 0
        else:
            want = max(0, min(parallelism, int(completions) - counts.succeeded))
        # surplus pods: the newest go first, as the real controller prefers
        by_age = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")
        surplus = by_age[want:]
        if spec.get("completionMode") == "Indexed" and completions is not None:
            running = {_index(p) for p in pods}
            free = [
                i for i in range(int(completions)) if i not in counts.completed and i not in running
            ]
            return list(free[: max(0, want - len(pods))]), surplus
        return [None] * max(0, want - len(pods)), surplus

    @staticmethod
    def _outcome(
        job: dict[str, Any], pods: list[dict[str, Any]], counts: _Counts, now: str
    ) -> tuple[list[dict[str, Any]], tuple[str, str, str] | None]:
        """The conditions a Job gains now that it failed or completed, and the Event to say so."""
        spec = job.get("spec") or {}
        if _finished(job):
            return [], None
        if counts.failed > int(spec.get("backoffLimit", 6)):
            message = "Job has reached the specified backoff limit"
            return [
                _condition("FailureTarget", "BackoffLimitExceeded", message, now),
                _condition("Failed", "BackoffLimitExceeded", message, now),
            ], ("Warning", "BackoffLimitExceeded", message)
        completions = spec.get("completions")
        if completions is not None:
            done = counts.succeeded >= int(completions)
        else:
            done = counts.succeeded > 0 and not pods
        if done:
            message = "Reached expected number of succeeded pods"
            return [
                _condition("SuccessCriteriaMet", "CompletionsReached", message, now),
                _condition("Complete", "CompletionsReached", message, now),
            ], ("Normal", "Completed", "Job completed")
        return [], None

    def reconcile(self, ns: str, name: str) -> None:
        core = self.core
        with core.store.lock:
            job = core.store.get(JOBS, ns, name)
            if job is None or deleting(job):
                self._release_pods(ns, name, job)
                return
            spec, status = job.get("spec") or {}, dict(job.get("status") or {})
            uid = job["metadata"]["uid"]
            counts = _Counts(
                int(status.get("succeeded") or 0),
                int(status.get("failed") or 0),
                _parse_indexes(status.get("completedIndexes")),
            )
            self._count_finished(job, counts)
            pods = [p for p in self._owned_pods(uid) if active(p)]
            now = meta.now()
            gained, event = self._outcome(job, pods, counts, now)
            conditions = [
                c for c in status.get("conditions") or [] if c.get("type") != "Suspended"
            ] + gained
            finished = _finished(job) or bool(gained)
            create: list[int | None] = []
            if finished or spec.get("suspend"):
                delete = pods
            else:
                create, delete = self._plan(job, pods, counts)
            if spec.get("suspend") and not finished:
                conditions.append(_condition("Suspended", "JobSuspended", "Job suspended", now))
            remaining = [p for p in pods if p not in delete]
            status.setdefault("startTime", now)
            if any(c.get("type") == "Complete" for c in gained):
                status["completionTime"] = now
            for key, value in (
                ("active", 0 if finished else len(remaining) + len(create)),
                ("succeeded", counts.succeeded),
                ("failed", counts.failed),
            ):
                status[key] = value
                if not value:
                    del status[key]
            status["ready"] = sum(1 for p in remaining if ready(p))
            status["terminating"] = sum(
                1 for p in self._owned_pods(uid) if deleting(p) and not terminal(p)
            )
            status["uncountedTerminatedPods"] = {}
            if spec.get("completionMode") == "Indexed":
                status["completedIndexes"] = _format_indexes(counts.completed)
            if conditions:
                status["conditions"] = conditions
            if status != (job.get("status") or {}):
                job = core.update_internal(core.types[JOBS], job, {**job, "status": status})
            for pod in delete:
                core.delete_locked(core.types[PODS], pod, None, "Background")
        if event is not None:
            self.events.event(job, *event)
        for index in create:
            self._create_pod(job, index)

    def _create_pod(self, job: dict[str, Any], index: int | None) -> None:
        name = job["metadata"]["name"]
        template = (job.get("spec") or {}).get("template")
        if index is None:
            body = pod_from_template(job, template, finalizers=[TRACKING_FINALIZER])
        else:
            body = pod_from_template(
                job,
                template,
                generate_name=f"{name}-{index}-",
                labels={COMPLETION_INDEX: str(index)},
                annotations={COMPLETION_INDEX: str(index)},
                finalizers=[TRACKING_FINALIZER],
            )
            spec = body["spec"]
            spec.setdefault("hostname", f"{name}-{index}")
            for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
                env = [
                    e for e in container.get("env") or [] if e.get("name") != "JOB_COMPLETION_INDEX"
                ]
                env.append(
                    {
                        "name": "JOB_COMPLETION_INDEX",
                        "valueFrom": {
                            "fieldRef": {
                                "apiVersion": "v1",
                                "fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']",
                            }
                        },
                    }
                )
                container["env"] = env
        try:
            pod, _ = self.core.create(
                self.core.types[PODS], "v1", job["metadata"]["namespace"], body, WriteOptions()
            )
        except Exception as exc:  # what the API server refused: said where users look
            self.events.event(job, "Warning", "FailedCreate", f"Error creating: {exc}")
            return
        self.events.event(
            job, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}"
        )

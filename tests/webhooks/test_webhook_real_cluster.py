"""``kai webhook`` called by a real kube-apiserver (v1.36) over HTTPS.

The webhook runs in this process and registers itself with a ``url`` clientConfig
(``--self-register``), since no Service can route to a process here. Its serving certificate
lives 15 s and its CA 45 s, so certificates rotate (the CA once) while the tests run; the
rotation test then drives admissions through a whole rotation and counts failures.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.polling import eventually
from kai.api.protection import FINALIZER
from kai.kube.client import ApiError, Kube
from kai.kube.resources import NAMESPACES, PODS, QUEUES
from kai.webhooks import registration
from kai.webhooks.app import Options, WebhookApp, free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow]


@dataclass
class Env:
    kube: Kube
    app: WebhookApp
    kubeconfig: Path
    kubectl: str

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.kubectl, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        out = self.run(*args, stdin=stdin)
        assert out.returncode == 0, out.stderr
        return out.stdout + out.stderr


def _pod(name: str, namespace: str, *, scheduler: str = "kai-scheduler", **md: object) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, **md},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "main", "image": "busybox"}]},
    }


@pytest.fixture(scope="module")
def env(real_cluster, kubectl) -> Iterator[Env]:  # type: ignore[no-untyped-def]
    kube = Kube.from_kubeconfig(str(real_cluster.kubeconfig))
    crds = sorted(str(p) for p in (ROOT / "manifests" / "crds").glob("*_*.yaml"))
    base = [kubectl, "--kubeconfig", str(real_cluster.kubeconfig)]
    for crd in crds:
        subprocess.run([*base, "apply", "-f", crd], check=True, capture_output=True, timeout=60)
    subprocess.run(
        [*base, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"],
        check=True,
        capture_output=True,
        timeout=90,
    )
    for ns in ("kai-scheduler", "team-nlp", "elsewhere"):
        try:
            kube.create(NAMESPACES, {"metadata": {"name": ns}})
        except ApiError as exc:
            if exc.status != 409:
                raise
    port = free_port()
    app = WebhookApp(
        kube,
        Options(
            port=port,
            host="127.0.0.1",
            self_register=f"https://127.0.0.1:{port}",
            cert_secret=f"kai-webhook-certs-{uuid.uuid4().hex[:6]}",
            cert_validity=dt.timedelta(seconds=15),
            ca_validity=dt.timedelta(seconds=45),
            publish_delay=3.0,
        ),
    ).start()
    environment = Env(kube, app, real_cluster.kubeconfig, kubectl)
    try:
        yield environment
    finally:
        app.stop()
        # the webhook is gone: clean up freely for the next tests on this cluster
        for kind in ("queuetrees", "topologypolicies", "sharingpolicies", "schedulerpolicies"):
            environment.run("delete", kind, "--all", "--wait=false")
        environment.run("delete", "queues.scheduling.run.ai", "--all", "--wait=false")
        environment.run("delete", "pods", "--all", "-n", "team-nlp", "--wait=false")
        kube.close()


@pytest.fixture(scope="module")
def examples(env: Env) -> Env:
    """The valid example repository, applied (dry run first: the same verdict)."""
    dry = env.ok("apply", "-k", str(ROOT / "examples" / "gitops"), "--dry-run=server")
    assert "created (server dry run)" in dry
    env.ok("apply", "-k", str(ROOT / "examples" / "gitops"))
    return env


def test_every_valid_example_is_accepted(examples: Env) -> None:
    names = examples.ok("get", "queuetrees", "-o", "name")
    assert set(names.split()) == {
        f"queuetree.gitops.kai.scheduler/{n}"
        for n in ("departments", "research-teams", "product-teams", "platform-teams")
    }


def _documents(path: Path) -> list[str]:
    return [d for d in path.read_text().split("\n---\n") if d.strip()]


# document (file, index) -> (who refuses, fragments the message must hold)
BROKEN = {
    ("legacy/queues.yaml", 1): ("webhook", ["[cycle]"]),
    ("legacy/queues.yaml", 2): ("kubectl", ['no matches for kind "Queue"']),
    ("policies/gpu-sharing.yaml", 0): ("api-server", ['unknown field "spec.mode"']),
    ("policies/scheduler.yaml", 1): ("webhook", ["[policy]", "already has a SchedulerPolicy"]),
    ("queues/departments.yaml", 0): ("api-server", ["spec.queues[2].quota.cpu", "overQuotaWeight"]),
    ("queues/platform.yaml", 0): ("api-server", ["preemptMinRuntime"]),
    ("queues/product.yaml", 0): (
        "webhook",
        ["[name]", "[namespaces-on-leaf]", "[children-quota-sum]"],
    ),
    ("queues/research.yaml", 0): ("api-server", ['unknown field "spec.queues[2].colour"']),
    ("topology/datacenter.yaml", 0): ("webhook", ["[topology]"]),
    ("topology/datacenter.yaml", 1): ("kubectl", ['no matches for kind "QueueForest"']),
    ("broken/tabs.yaml", 0): ("kubectl", ["tab character"]),
    ("broken/unclosed-quote.yaml", 0): ("kubectl", ["error converting YAML"]),
}
# Valid on their own, so accepted (with the warning that names their problem)
ACCEPTED = {
    ("legacy/queues.yaml", 0): "[parent-exists]",  # its cycle needs legacy-b, refused above
    ("policies/scheduler.yaml", 0): "[policy]",  # a warning in `kai validate` too
}


def test_every_invalid_broken_document_is_refused_with_its_rule(examples: Env) -> None:
    broken = ROOT / "examples" / "gitops-broken"
    seen = set()
    for path in sorted(broken.rglob("*.yaml")):
        rel = str(path.relative_to(broken))
        if rel in ("kustomization.yaml", "broken/empty.yaml"):
            continue
        for index, doc in enumerate(_documents(path)):
            key = (rel, index)
            seen.add(key)
            dry = examples.run("apply", "--dry-run=server", "-f", "-", stdin=doc)
            real = examples.run("apply", "-f", "-", stdin=doc)
            assert (dry.returncode == 0) == (real.returncode == 0), key
            if key in ACCEPTED:
                assert real.returncode == 0, (key, real.stderr)
                assert ACCEPTED[key] in real.stderr and ACCEPTED[key] in dry.stderr
                continue
            who, fragments = BROKEN[key]
            assert real.returncode != 0, (key, real.stdout)
            for fragment in fragments:
                assert fragment in real.stderr, (key, real.stderr)
                assert fragment in dry.stderr, (key, dry.stderr)
            if who == "webhook":
                assert 'admission webhook "policies.webhook.kai.scheduler" denied' in real.stderr
    assert seen == set(BROKEN) | set(ACCEPTED)
    # the empty file: kubectl itself has nothing to send
    empty = examples.run("apply", "-f", str(broken / "broken" / "empty.yaml"))
    assert empty.returncode != 0 and "no objects passed to apply" in empty.stderr


def test_schema_refusals_hide_no_hierarchy_problem(examples: Env) -> None:
    """research.yaml without what the API server refuses first reaches the webhook."""
    doc = (ROOT / "examples" / "gitops-broken" / "queues" / "research.yaml").read_text()
    doc = doc.replace("Vision_Team", "vision-team").replace("colour: blue", "")
    out = examples.run("apply", "-f", "-", stdin=doc)
    assert out.returncode != 0
    for rule in ("[children-quota-sum]", "[child-quota-over-parent-limit]"):
        assert rule in out.stderr, out.stderr
    assert "[child-limit-over-parent-limit]" in out.stderr  # the warning comes along


def _queue(name: str, parent: str | None = None) -> str:
    parent_line = f"\n  parentQueue: {parent}" if parent else ""
    return f"""apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: {name}
spec:{parent_line}
  resources:
    gpu: {{quota: 0, overQuotaWeight: 1, limit: -1}}
    cpu: {{quota: 0, overQuotaWeight: 1, limit: -1}}
    memory: {{quota: 0, overQuotaWeight: 1, limit: -1}}
"""


def test_queue_deletion_in_use_is_accepted_with_a_warning(examples: Env) -> None:
    """Deletes are never refused (any order converges); what still uses the queue is named in
    a warning. Without kai controller there is no finalizer: the Queue goes at once."""
    env = examples
    env.ok(
        "apply", "-f", "-", stdin=_queue("wh-parent") + "---\n" + _queue("wh-child", "wh-parent")
    )
    dry = env.run("delete", "queue", "wh-parent", "--dry-run=server")
    assert dry.returncode == 0, dry.stderr
    assert "still has child queues: wh-child" in dry.stderr, dry.stderr
    tree = env.run("delete", "queuetree", "departments", "--dry-run=server")
    assert tree.returncode == 0 and "queue 'research' still has child queues" in tree.stderr
    pod = _pod("wh-running", "elsewhere", labels={"kai.scheduler/queue": "wh-child"})
    env.kube.create(PODS, pod)
    env.kube.patch(PODS, "wh-running", {"status": {"phase": "Running"}}, "elsewhere", sub="status")
    # with kai controller's finalizer on it (as the controller puts it), the output of
    # docs/webhooks.md; the Queue then stays Terminating until the finalizer is taken off
    env.kube.patch(QUEUES, "wh-child", {"metadata": {"finalizers": [FINALIZER]}})
    busy = env.run("delete", "queue", "wh-child", "--wait=false")
    assert busy.returncode == 0, busy.stderr
    documented = (ROOT / "docs" / "webhooks.md").read_text()
    shown = re.search(r"\n(Warning: Queue/wh-child: .*)\n", documented)
    assert shown is not None
    assert shown[1] in busy.stderr, busy.stderr
    assert env.kube.get(QUEUES, "wh-child")["metadata"].get("deletionTimestamp")
    env.ok("patch", "queue", "wh-child", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    env.ok("delete", "queue", "wh-parent")
    env.kube.delete(PODS, "wh-running", "elsewhere", grace_period_seconds=0)


def test_fractional_pod_is_admitted_with_its_gpu_sharing_env(examples: Env) -> None:
    env = examples
    manifest = _pod("frac", "team-nlp", annotations={"gpu-fraction": "0.5"})
    dry = env.kube.request("POST", PODS.path("team-nlp"), params={"dryRun": "All"}, body=manifest)
    pod = env.kube.create(PODS, manifest)
    for got in (dry, pod):
        assert got["metadata"]["labels"]["kai.scheduler/queue"] == "nlp"  # namespace binding
        prefix = got["metadata"]["annotations"]["runai/shared-gpu-configmap"]
        container = got["spec"]["containers"][0]
        assert [e["name"] for e in container["env"]] == [
            "NVIDIA_VISIBLE_DEVICES",
            "RUNAI_NUM_OF_GPUS",
            "GPU_PORTION",
        ]
        assert container["env"][0]["valueFrom"]["configMapKeyRef"]["name"] == f"{prefix}-0"
        assert container["envFrom"] == [{"configMapRef": {"name": f"{prefix}-0-evar"}}]
        assert {
            "name": f"{prefix}-0-vol",
            "configMap": {"name": f"{prefix}-0", "defaultMode": 420},
        } in (got["spec"]["volumes"])
    bad = env.run(
        "run",
        "bad-frac",
        "-n",
        "team-nlp",
        "--image=busybox",
        "--restart=Never",
        "--overrides",
        '{"metadata": {"annotations": {"gpu-fraction": "0.5"}}, '
        '"spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "bad-frac", '
        '"image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}',
    )
    assert bad.returncode != 0 and "gpu-fraction" in bad.stderr


def _calls(env: Env, webhook: str) -> float:
    """Calls the webhook answered so far, every verdict together (its metrics)."""
    text = env.app.metrics.registry.exposition()
    pattern = rf'^kai_webhook_requests_total\{{[^}}]*webhook="{re.escape(webhook)}"[^}}]*\}} (\S+)$'
    return sum(float(m) for m in re.findall(pattern, text, re.M))


def test_pods_with_nothing_to_change_or_refuse_are_not_sent(examples: Env) -> None:
    """The match conditions: the API server calls the pod webhooks only where they can act."""
    env = examples

    def dry_run(manifest: dict) -> dict:
        return env.kube.request(
            "POST", PODS.path("team-nlp"), params={"dryRun": "All"}, body=manifest
        )

    # labelled, no GPU sharing: nothing to mutate (validated: the queue must exist)
    mutate, validate = _calls(env, "pods.mutate"), _calls(env, "pods.validate")
    labelled = _pod("labelled", "team-nlp", labels={"kai.scheduler/queue": "nlp"})
    got = dry_run(labelled)
    assert got["metadata"]["labels"] == {"kai.scheduler/queue": "nlp"}
    assert "annotations" not in got["metadata"]
    assert _calls(env, "pods.mutate") == mutate
    assert _calls(env, "pods.validate") == validate + 1
    # labelled and fractional: mutated (GPU sharing), validated
    got = dry_run(
        _pod(
            "frac-labelled",
            "team-nlp",
            labels={"kai.scheduler/queue": "nlp"},
            annotations={"gpu-fraction": "0.5"},
        )
    )
    assert [e["name"] for e in got["spec"]["containers"][0]["env"]] == [
        "NVIDIA_VISIBLE_DEVICES",
        "RUNAI_NUM_OF_GPUS",
        "GPU_PORTION",
    ]
    assert _calls(env, "pods.mutate") == mutate + 1
    assert _calls(env, "pods.validate") == validate + 2
    # no label, no GPU: mutated (the namespace binding gives the queue label), and then
    # validated (the validating webhooks see the mutated pod: its queue must exist)
    got = dry_run(_pod("unlabelled", "team-nlp"))
    assert got["metadata"]["labels"]["kai.scheduler/queue"] == "nlp"
    assert _calls(env, "pods.mutate") == mutate + 2
    assert _calls(env, "pods.validate") == validate + 3
    # the same where no namespace binding applies: sent to the mutation (the binding lives in
    # the cluster), which leaves it unchanged; nothing to validate
    got = env.kube.request(
        "POST", PODS.path("elsewhere"), params={"dryRun": "All"}, body=_pod("plain", "elsewhere")
    )
    assert not (got["metadata"].get("labels") or {})
    assert _calls(env, "pods.mutate") == mutate + 3
    assert _calls(env, "pods.validate") == validate + 3
    # a refusal is still sent: a queue that does not exist
    refused = env.run(
        "run",
        "no-queue",
        "-n",
        "team-nlp",
        "--image=busybox",
        "--restart=Never",
        "--labels=kai.scheduler/queue=no-such-queue",
        "--overrides",
        '{"spec": {"schedulerName": "kai-scheduler"}}',
    )
    assert refused.returncode != 0 and "no-such-queue" in refused.stderr, refused.stderr
    assert _calls(env, "pods.validate") == validate + 4


def test_pods_for_other_schedulers_pass_even_with_the_webhook_down(examples: Env) -> None:
    env = examples
    dead = free_port()  # nothing listens here
    objects = registration.configurations(
        {"url": f"https://127.0.0.1:{dead}"}, env.app.ca_bundle(), namespace="kai-scheduler"
    )
    registration.apply(env.kube, objects)
    try:

        def kai_pods_fail() -> bool:
            try:
                env.kube.request(
                    "POST",
                    PODS.path("team-nlp"),
                    params={"dryRun": "All"},
                    body=_pod(f"k-{uuid.uuid4().hex[:5]}", "team-nlp"),
                )
            except ApiError as exc:
                return "failed calling webhook" in exc.message
            return False

        eventually(kai_pods_fail, timeout=30, interval=0.5)
        for i in range(5):
            env.kube.create(PODS, _pod(f"default-{i}", "team-nlp", scheduler="default-scheduler"))
        kube_system = _pod("in-kube-system", "kube-system")  # excluded namespace, kai scheduler
        env.kube.create(PODS, kube_system)
    finally:
        env.app.register()
    env.kube.delete(PODS, "in-kube-system", "kube-system", grace_period_seconds=0)


def test_certificates_rotate_under_admissions_without_a_failure(examples: Env) -> None:
    env = examples
    app = env.app
    failures: list[str] = []
    answered = [0]
    stop = threading.Event()
    start_rotations = app.certs.rotations
    start_ca = app.certs.trusted

    def admit() -> None:
        while not stop.is_set():
            body = _pod(
                f"r-{uuid.uuid4().hex[:8]}", "team-nlp", annotations={"gpu-fraction": "0.5"}
            )
            try:
                got = env.kube.request(
                    "POST", PODS.path("team-nlp"), params={"dryRun": "All"}, body=body
                )
                assert got["spec"]["containers"][0]["env"]
                answered[0] += 1
            except Exception as exc:  # any failed admission fails the test
                failures.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.02)

    threads = [threading.Thread(target=admit) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 70
    while time.monotonic() < deadline:
        if app.certs.rotations - start_rotations >= 3 and app.certs.trusted != start_ca:
            break
        time.sleep(0.5)
    time.sleep(2)
    stop.set()
    for t in threads:
        t.join()
    assert not failures, failures[:5]
    assert app.certs.rotations - start_rotations >= 3, "the serving certificate did not rotate"
    assert app.certs.trusted != start_ca, "the CA did not rotate"
    assert answered[0] > 100
    text = app.metrics.registry.exposition()
    assert 'kai_webhook_requests_total{verdict="mutated",webhook="pods.mutate"}' in text
    # the API server speaks HTTP/2 to the webhook (every call a stream of one connection), and
    # after each rotation's GOAWAY it opens a new connection, with the new certificate
    h2 = re.search(r'^kai_webhook_connections_total\{protocol="h2"\} (\S+)$', text, re.M)
    assert h2 is not None and float(h2[1]) >= 3, text
    assert 'protocol="http/1.1"' not in text

"""The Helm chart and the kustomize base, without a cluster: `helm lint` (Helm 3 and 4), the
values schema, the same objects from `helm template` and `kubectl kustomize .`, every rendered
object valid (kubernetes-validate for built-in kinds, our CRD schemas for ours), least-privilege
RBAC, hardened Deployments, and Deployment arguments the kai commands accept."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from . import manifests_from_chart as mfc

ROOT = mfc.ROOT
CHART = mfc.CHART
Key = tuple[str, str, str, str]


def _objects(text: str) -> dict[Key, dict[str, Any]]:
    objects: dict[Key, dict[str, Any]] = {}
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        md = doc["metadata"]
        key = (doc["apiVersion"], doc["kind"], md.get("namespace", ""), md["name"])
        assert key not in objects, f"{key} rendered twice"
        objects[key] = doc
    return objects


def _without_helm_labels(obj: dict[str, Any]) -> dict[str, Any]:
    labels = obj["metadata"].get("labels") or {}
    for key in mfc.HELM_LABELS:
        labels.pop(key, None)
    return obj


def _template(
    helm: str, *values: str, release: str = "kai-scheduler", ns: str = "kai-scheduler"
) -> dict[Key, dict[str, Any]]:
    args = [helm, "template", release, str(CHART), "--namespace", ns, "--include-crds"]
    for value in values:
        args += ["--set", value]
    out = subprocess.run(args, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return _objects(out.stdout)


def _kustomize(kubectl: str, directory: Path) -> dict[Key, dict[str, Any]]:
    out = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return _objects(out.stdout)


@pytest.mark.parametrize("which", ["helm3", "helm"])
def test_helm_lint_is_clean(which: str, request: pytest.FixtureRequest) -> None:
    helm = request.getfixturevalue(which)
    for values in (
        [],
        ["--set", "webhook.enabled=true"],
        [
            "--set",
            "webhook.enabled=true",
            "--set",
            "webhook.certificates.mode=cert-manager",
            "--set",
            "metrics.serviceMonitor.enabled=true",
        ],
    ):
        out = subprocess.run(
            [helm, "lint", "--strict", str(CHART), *values], capture_output=True, text=True
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert "[WARNING]" not in out.stdout and "[ERROR]" not in out.stdout, out.stdout


def _without_hooks(objects: dict[Key, dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    """The chart's objects as the kustomize base has them: Helm's labels removed, the hook
    annotations of the default queues (plain objects in the base) removed, `helm test` gone."""
    kept = {}
    for key, obj in objects.items():
        obj = _without_helm_labels(obj)
        annotations = obj["metadata"].get("annotations") or {}
        if annotations.get("helm.sh/hook") == "test":
            continue
        for name in [a for a in annotations if a.startswith("helm.sh/hook")]:
            del annotations[name]
        if "annotations" in obj["metadata"] and not annotations:
            del obj["metadata"]["annotations"]
        kept[key] = obj
    return kept


def test_chart_and_kustomize_render_the_same_objects(
    helm3: str, kubectl: str, tmp_path: Path
) -> None:
    """`helm template --include-crds` (defaults: the webhook on) and the two kustomize steps
    (`manifests/crds`, then the root `.`): the same objects, field for field, once Helm's own
    labels and hook annotations are removed; the kustomize base adds only the kai-scheduler
    Namespace (Helm installs into the release namespace: --create-namespace). The root has no
    CRD (removing it never removes them). With webhook.enabled=false, the chart equals the base
    without manifests/webhooks."""
    chart = _without_hooks(_template(helm3))
    root = _kustomize(kubectl, ROOT)
    assert not [k for k in root if k[1] == "CustomResourceDefinition"], "CRDs in the root"
    crds = _kustomize(kubectl, ROOT / "manifests" / "crds")
    assert {k[1] for k in crds} == {"CustomResourceDefinition"}
    base = {**crds, **root}
    namespace = ("v1", "Namespace", "", "kai-scheduler")
    assert namespace in base
    del base[namespace]
    assert sorted(chart) == sorted(base)
    for key in chart:
        assert chart[key] == base[key], key
    assert any(k[1] == "ValidatingWebhookConfiguration" for k in root), "the webhook is on"

    overlay = tmp_path / "without-webhooks"
    overlay.mkdir()
    rel = os.path.relpath(ROOT, overlay)  # kustomize takes relative paths only
    dirs = [d for d in mfc.DEFAULT_DIRS if d != "webhooks"]
    (overlay / "kustomization.yaml").write_text(
        "resources:\n" + "".join(f"- {rel}/manifests/{d}\n" for d in ("crds", *dirs))
    )
    without = _kustomize(kubectl, overlay)
    del without[namespace]
    chart = _without_hooks(_template(helm3, "webhook.enabled=false"))
    assert sorted(chart) == sorted(without)
    assert all(chart[k] == without[k] for k in chart)


def test_manifests_are_rendered_from_the_current_chart(helm3: str) -> None:
    problems = mfc.stale(mfc.render(helm3))
    assert not problems, "run python tests/install/manifests_from_chart.py --write:\n" + "\n".join(
        problems
    )


def test_chart_crds_are_the_generated_ones() -> None:
    generated = {
        p.name: p.read_text()
        for p in (ROOT / "manifests" / "crds").glob("*.yaml")
        if p.name != "kustomization.yaml"
    }
    in_chart = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    assert in_chart == generated, "python tests/install/manifests_from_chart.py --write"


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["webhook.enabled=false"],
        [
            "webhook.certificates.mode=cert-manager",
            "metrics.serviceMonitor.enabled=true",
            "scheduler.replicas=2",
            "binder.replicas=3",
        ],
        [
            "scheduler.shards[0].name=default",
            "scheduler.shards[1].name=pool-a",
            "scheduler.shards[1].partitionLabelValue=pool-a",
            "scheduler.shards[1].spec.placementStrategy.gpu=spread",
        ],
        ["scheduler.inProcess={binder,podgrouper}"],
    ],
    ids=["defaults", "no-webhook", "cert-manager", "shards", "in-process"],
)
def test_every_rendered_object_is_valid(helm3: str, values: list[str]) -> None:
    """Built-in kinds against Kubernetes' own schemas (1.36, strict: no unknown field); ours
    (Queues) against the CRDs' openAPIV3Schema; kinds of other projects (ServiceMonitor,
    cert-manager) must at least be of an expected group."""
    objects = _template(helm3, *values)
    crds = {
        (f"{o['spec']['group']}/{v['name']}", o["spec"]["names"]["kind"]): v["schema"][
            "openAPIV3Schema"
        ]
        for o in objects.values()
        if o["kind"] == "CustomResourceDefinition"
        for v in o["spec"]["versions"]
    }
    for (api_version, kind, _, name), obj in objects.items():
        if (api_version, kind) in crds:
            # a CRD schema is OpenAPI v3.0: draft 4's boolean exclusiveMinimum, not 2020-12's
            jsonschema.Draft4Validator(crds[(api_version, kind)]).validate(obj)
        elif api_version.split("/")[0] in ("monitoring.coreos.com", "cert-manager.io"):
            assert kind in ("ServiceMonitor", "Certificate", "Issuer"), (kind, name)
        else:
            kubernetes_validate.validate(obj, "1.36.0", strict=True)


def test_values_schema_names_the_bad_field(helm3: str) -> None:
    cases = {  # Helm 3 names a field scheduler.replicas, Helm 4 /scheduler/replicas
        "scheduler.replicas=-1": "scheduler.replicas",
        "webhook.certificates.mode=manual": "webhook.certificates.mode",
        "webhook.kaiQueueRules=off": "webhook.kaiQueueRules",
        "logLevel=LOUD": "logLevel",
        "schedulerName=Not_A_Name": "schedulerName",
        "metrics.port=80": "metrics.port",
        "schedulerNmae=x": "schedulerNmae",
    }
    for value, field in cases.items():
        out = subprocess.run(
            [helm3, "template", "x", str(CHART), "--set", value], capture_output=True, text=True
        )
        assert out.returncode != 0, value
        assert field in out.stderr or "/" + field.replace(".", "/") in out.stderr, out.stderr
    out = subprocess.run(
        [
            helm3,
            "template",
            "x",
            str(CHART),
            "--set",
            "leaderElection=false",
            "--set",
            "scheduler.replicas=2",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0 and "scheduler.replicas is 2" in out.stderr, out.stderr


def _everything(helm3: str) -> dict[Key, dict[str, Any]]:
    return _template(helm3, "webhook.enabled=true")


def test_rbac_is_least_privilege(helm3: str) -> None:
    """No wildcard, no built-in or aggregated role, one ServiceAccount per component, each
    bound only to its own roles; namespaced Roles for what lives in kai's namespace."""
    objects = _everything(helm3)
    roles = {k: o for k, o in objects.items() if o["kind"] in ("ClusterRole", "Role")}
    bindings = [o for o in objects.values() if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    accounts = {o["metadata"]["name"] for o in objects.values() if o["kind"] == "ServiceAccount"}
    assert accounts == {
        "kai-scheduler",
        "kai-binder",
        "kai-podgrouper",
        "kai-controller",
        "kai-webhook",
    }
    for key, role in roles.items():
        assert "aggregationRule" not in role, key
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], (key, rule)
            assert "nonResourceURLs" not in rule, key
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), (key, rule)
            if rule["resources"] == ["secrets"]:
                assert role["kind"] == "Role", "secrets only in kai's namespace"
    for binding in bindings:
        assert binding["roleRef"]["name"] not in ("cluster-admin", "admin", "edit", "view")
        (subject,) = binding["subjects"]
        assert subject["kind"] == "ServiceAccount" and subject["name"] in accounts
        component = subject["name"].removeprefix("kai-")
        assert binding["roleRef"]["name"] in (f"kai-{component}", f"kai-scheduler:{component}")
        ref = binding["roleRef"]
        ns = binding["metadata"].get("namespace", "")
        assert roles.get(
            (
                "rbac.authorization.k8s.io/v1",
                ref["kind"],
                ns if ref["kind"] == "Role" else "",
                ref["name"],
            )
        ), binding
    # leases and the scheduler's ConfigMap: namespaced only
    for role in roles.values():
        for rule in role["rules"]:
            if "leases" in rule["resources"]:
                assert role["kind"] == "Role" and role["metadata"]["namespace"] == "kai-scheduler"


def test_deployments_are_hardened(helm3: str) -> None:
    objects = _everything(helm3)
    deployments = [o for o in objects.values() if o["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == {
        "kai-scheduler",
        "kai-binder",
        "kai-podgrouper",
        "kai-controller",
        "kai-webhook",
    }
    services = {o["metadata"]["name"] for o in objects.values() if o["kind"] == "Service"}
    budgets = {
        o["metadata"]["name"] for o in objects.values() if o["kind"] == "PodDisruptionBudget"
    }
    for d in deployments:
        name = d["metadata"]["name"]
        pod = d["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (c,) = pod["containers"]
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert c["resources"]["requests"] and c["resources"]["limits"]
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert c["image"] == "kai:0.1.0"
        assert f"{name}-metrics" in services and name in budgets


def _parser(command: str) -> argparse.ArgumentParser | None:
    import importlib

    try:
        module = importlib.import_module(f"kai.commands.{command}")
    except ModuleNotFoundError:
        return None
    parser = argparse.ArgumentParser(prog=f"kai {command}", exit_on_error=False)
    module.add_arguments(parser)
    return parser


def test_the_commands_accept_the_deployment_arguments(helm3: str) -> None:
    """What the image runs (ENTRYPOINT kai + the Deployment's args) parses with kai's own
    command-line parsers: a renamed flag fails here, not in a crash-looping pod. Components
    whose command is not in this tree yet (controller, webhook) are reported as skipped."""
    objects = _template(helm3, "webhook.enabled=true", "leaderElection=true")
    missing = []
    for d in (o for o in objects.values() if o["kind"] == "Deployment"):
        command, *args = d["spec"]["template"]["spec"]["containers"][0]["args"]
        parser = _parser(command)
        if parser is None:
            missing.append(command)
            continue
        parsed = parser.parse_args(args)
        assert parsed.metrics_port == 8080
        if hasattr(parsed, "namespace"):
            assert parsed.namespace == "kai-scheduler"
    assert set(missing) <= {"controller", "webhook"}, missing
    if missing:
        names = " / ".join(f"kai {m}" for m in sorted(missing))
        pytest.skip(f"{names}: not in this tree; their arguments are unchecked")


def test_cluster_scoped_names_follow_the_namespace(helm3: str) -> None:
    """A second install (other release, other namespace) shares no cluster-scoped name with the
    first except KAI's shared objects, which the chart renders only when absent or its own."""
    first = _everything(helm3)
    second = _template(helm3, "webhook.enabled=true", release="other", ns="other-ns")

    def cluster_scoped(objs: dict[Key, Any]) -> set[Key]:
        return {k for k in objs if k[2] == "" and k[1] != "CustomResourceDefinition"}

    shared = cluster_scoped(first) & cluster_scoped(second)
    assert {(k[1], k[3]) for k in shared} == {
        ("PriorityClass", "train"),
        ("PriorityClass", "build-preemptible"),
        ("PriorityClass", "build"),
        ("PriorityClass", "inference"),
        ("Queue", "default-parent-queue"),
        ("Queue", "default-queue"),
        ("Namespace", "kai-resource-reservation"),
        # the name under which kai webhook publishes its caBundle: one webhook per cluster
        ("ValidatingWebhookConfiguration", "kai-webhook"),
        ("MutatingWebhookConfiguration", "kai-webhook"),
    }
    # namespaced objects in a shared namespace (the binder's reservation Role) are distinct too
    assert {k for k in first if k[2] == "kai-resource-reservation"}.isdisjoint(
        {k for k in second if k[2] == "kai-resource-reservation"}
    )


def test_webhook_configurations_are_the_ones_kai_webhook_registers(helm3: str) -> None:
    """The chart's webhook configurations equal what `kai webhook --self-register` would write
    for the Service kai-webhook (names, paths, rules, failure policies, timeouts, selectors)."""
    registration = pytest.importorskip("kai.webhooks.registration")
    client = {"service": {"namespace": "kai-scheduler", "name": "kai-webhook", "port": 443}}
    for runtime_class in ("", "nvidia"):  # it widens the mutating webhook's match condition
        theirs = registration.configurations(
            client,
            b"",
            namespace="kai-scheduler",
            scheduler_name="kai-scheduler",
            gpu_runtime_class=runtime_class,
        )
        objects = _template(
            helm3, "webhook.enabled=true", f"webhook.gpuRuntimeClassName={runtime_class}"
        )
        for expected in theirs:
            key = (
                "admissionregistration.k8s.io/v1",
                expected["kind"],
                "",
                expected["metadata"]["name"],
            )
            assert key in objects, key
            assert objects[key]["webhooks"] == expected["webhooks"], (key, runtime_class)


@pytest.mark.parametrize(("value", "flag"), [(None, None), ("enforce", None), ("warn", "warn")])
def test_webhook_kai_queue_rules_value_becomes_the_flag(
    helm3: str, value: str | None, flag: str | None
) -> None:
    values = ["webhook.enabled=true"] + ([f"webhook.kaiQueueRules={value}"] if value else [])
    objects = _template(helm3, *values)
    (deploy,) = [o for k, o in objects.items() if k[1] == "Deployment" and k[3] == "kai-webhook"]
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    given = [a.split("=", 1)[1] for a in args if a.startswith("--kai-queue-rules=")]
    assert given == ([flag] if flag else [])  # the default (enforce) is the flag's own default


def test_one_scheduler_deployment_per_shard(helm3: str) -> None:
    """Each shard: a SchedulingShard, a Deployment running `kai scheduler --shard NAME` (under
    the scheduler's ServiceAccount) and its Lease name in the scheduler's Role."""
    objects = _template(
        helm3,
        "scheduler.shards[0].name=default",
        "scheduler.shards[1].name=pool-a",
        "scheduler.shards[1].partitionLabelValue=pool-a",
    )
    shards = {k[3]: o for k, o in objects.items() if k[1] == "SchedulingShard"}
    assert {n: o["spec"]["partitionLabelValue"] for n, o in shards.items()} == {
        "default": "",
        "pool-a": "pool-a",
    }
    deployments = {k[3]: o for k, o in objects.items() if k[1] == "Deployment"}
    assert "kai-scheduler" not in deployments
    parser = _parser("scheduler")
    assert parser is not None
    for shard in shards:
        pod = deployments[f"kai-scheduler-{shard}"]["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "kai-scheduler"
        assert parser.parse_args(pod["containers"][0]["args"][1:]).shard == shard
    role = objects[("rbac.authorization.k8s.io/v1", "Role", "kai-scheduler", "kai-scheduler")]
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named[0]["resourceNames"] == ["kai-scheduler", "kai-scheduler-pool-a"]


@pytest.mark.parametrize("source", ["accounting", "prometheus"])
def test_time_based_fairshare_usage_source(helm3: str, source: str) -> None:
    """scheduler.usage.source reaches `kai scheduler --usage-source`; the accounting source may
    create and update its history ConfigMap (only that one), the others get no such right."""
    values = [f"scheduler.usage.source={source}"]
    if source == "prometheus":
        values.append("scheduler.usage.prometheusUrl=http://prometheus.monitoring:9090")
    objects = _template(helm3, *values)
    pod = objects[("apps/v1", "Deployment", "kai-scheduler", "kai-scheduler")]["spec"]
    parser = _parser("scheduler")
    assert parser is not None
    args = parser.parse_args(pod["template"]["spec"]["containers"][0]["args"][1:])
    assert args.usage_source == source
    if source == "prometheus":
        assert args.prometheus_url == "http://prometheus.monitoring:9090"
    role = objects[("rbac.authorization.k8s.io/v1", "Role", "kai-scheduler", "kai-scheduler")]
    usage_rules = [r for r in role["rules"] if r.get("resourceNames") == ["kai-queue-usage"]]
    creates = [
        r for r in role["rules"] if "configmaps" in r["resources"] and "create" in r["verbs"]
    ]
    if source == "accounting":
        assert usage_rules == [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": ["kai-queue-usage"],
                "verbs": ["update"],
            }
        ]
        assert creates
    else:
        assert not usage_rules and not creates
    default = _template(helm3)[("apps/v1", "Deployment", "kai-scheduler", "kai-scheduler")]
    assert (
        parser.parse_args(
            default["spec"]["template"]["spec"]["containers"][0]["args"][1:]
        ).usage_source
        == "none"
    )


def test_prometheus_usage_source_needs_a_url(helm3: str) -> None:
    out = subprocess.run(
        [helm3, "template", "k", str(CHART), "--set", "scheduler.usage.source=prometheus"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode != 0 and "prometheusUrl is required" in out.stderr


def test_binder_and_podgrouper_in_the_schedulers_process(helm3: str) -> None:
    """scheduler.inProcess: one Deployment runs `kai scheduler --also binder,podgrouper` (with
    the queue label key); the two Deployments are gone; their roles (cluster, Lease, the
    reservation namespace) are bound to the scheduler's ServiceAccount as well."""
    objects = _template(helm3, "scheduler.inProcess={binder,podgrouper}", "queueLabelKey=acme/q")
    deployments = {k[3] for k, o in objects.items() if k[1] == "Deployment"}
    assert "kai-binder" not in deployments and "kai-podgrouper" not in deployments
    pod = objects[("apps/v1", "Deployment", "kai-scheduler", "kai-scheduler")]["spec"]
    parser = _parser("scheduler")
    assert parser is not None
    args = parser.parse_args(pod["template"]["spec"]["containers"][0]["args"][1:])
    assert args.also == "binder,podgrouper" and args.queue_label_key == "acme/q"
    scheduler_sa = {"kind": "ServiceAccount", "name": "kai-scheduler", "namespace": "kai-scheduler"}
    for component in ("binder", "podgrouper"):
        bindings = [
            o
            for o in objects.values()
            if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
            and o["roleRef"]["name"].endswith(component)
        ]
        assert bindings, component
        for binding in bindings:
            assert scheduler_sa in binding["subjects"], binding["metadata"]
    default = _template(helm3)
    assert {"kai-binder", "kai-podgrouper"} <= {k[3] for k in default if k[1] == "Deployment"}
    values = ["--set", "scheduler.inProcess={binder}", "--set", "scheduler.shards[0].name=a"]
    refused = subprocess.run(
        [helm3, "template", "kai", str(CHART), *values],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode != 0 and "not with scheduler.shards" in refused.stderr


def test_default_queues_are_created_before_the_webhook_and_never_deleted(helm3: str) -> None:
    """The default queues are Helm pre-install/pre-upgrade hooks (the parent first): created
    before the release's webhook configurations exist, so a fresh install never waits for the
    webhook, and never deleted by Helm (a hook's object outlives the release). Every other
    object is a plain release object, deleted on uninstall."""
    objects = _template(helm3)
    queues = {k[3]: o for k, o in objects.items() if o["kind"] == "Queue"}
    assert set(queues) == {"default-parent-queue", "default-queue"}
    weights = {}
    for name, queue in queues.items():
        annotations = queue["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade", name
        weights[name] = int(annotations["helm.sh/hook-weight"])
    assert weights["default-parent-queue"] < weights["default-queue"]
    hooks = [
        k
        for k, o in objects.items()
        if o["kind"] != "Queue" and "helm.sh/hook" in (o["metadata"].get("annotations") or {})
    ]
    assert all(objects[k]["metadata"]["annotations"]["helm.sh/hook"] == "test" for k in hooks)
    assert (
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        "",
        "kai-webhook",
    ) in objects

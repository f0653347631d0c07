"""Real kubectl against the API: get, apply -f, apply -k, patch, describe, delete."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

CRD_DIR = Path(__file__).resolve().parents[2] / "manifests" / "crds"


def run(kubectl, cluster, *args, check=True, stdin=None):
    proc = subprocess.run(
        [kubectl, "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


MANIFEST = textwrap.dedent("""\
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: settings
    data:
      mode: fast
    ---
    apiVersion: v1
    kind: Pod
    metadata:
      name: web
      labels: {app: web}
    spec:
      containers:
      - name: main
        image: nginx:1.27
        resources:
          requests: {cpu: 100m, memory: 64Mi}
""")


def test_get_namespaces(kubectl, cluster):
    out = run(kubectl, cluster, "get", "namespaces").stdout
    assert "default" in out and "kube-system" in out and "STATUS" in out


def test_apply_get_patch_describe_delete(kubectl, cluster, ns, tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    out = run(kubectl, cluster, "-n", ns, "apply", "-f", str(path)).stdout
    assert "configmap/settings created" in out and "pod/web created" in out
    again = run(kubectl, cluster, "-n", ns, "apply", "-f", str(path)).stdout
    assert "unchanged" in again
    path.write_text(MANIFEST.replace("mode: fast", "mode: slow"))
    assert "configured" in run(kubectl, cluster, "-n", ns, "apply", "-f", str(path)).stdout
    cm = json.loads(run(kubectl, cluster, "-n", ns, "get", "cm", "settings", "-o", "json").stdout)
    assert cm["data"] == {"mode": "slow"}
    table = run(kubectl, cluster, "-n", ns, "get", "pods", "-o", "wide").stdout
    assert "web" in table and "Pending" in table and "NODE" in table
    run(kubectl, cluster, "-n", ns, "patch", "cm", "settings", "-p", '{"data":{"x":"1"}}')
    run(
        kubectl,
        cluster,
        "-n",
        ns,
        "patch",
        "cm",
        "settings",
        "--type=json",
        "-p",
        '[{"op":"remove","path":"/data/mode"}]',
    )
    run(kubectl, cluster, "-n", ns, "label", "pod", "web", "tier=front")
    got = run(kubectl, cluster, "-n", ns, "get", "cm", "settings", "-o", "yaml").stdout
    assert 'x: "1"' in got and "mode" not in got.split("data:")[1].split("kind:")[0]
    assert (
        "tier=front"
        in run(
            kubectl, cluster, "-n", ns, "get", "pods", "-l", "tier=front", "--show-labels"
        ).stdout
    )
    described = run(kubectl, cluster, "-n", ns, "describe", "pod", "web").stdout
    assert "nginx:1.27" in described and "Pending" in described
    out = run(kubectl, cluster, "-n", ns, "delete", "-f", str(path)).stdout
    assert "deleted" in out
    gone = run(kubectl, cluster, "-n", ns, "get", "pods", check=False)
    assert "web" not in gone.stdout


def test_server_side_apply(kubectl, cluster, ns, tmp_path):
    path = tmp_path / "cm.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  a: '1'\n")
    out = run(kubectl, cluster, "-n", ns, "apply", "--server-side", "-f", str(path)).stdout
    assert "serverside-applied" in out


def test_errors_are_reported(kubectl, cluster, ns):
    proc = run(kubectl, cluster, "-n", ns, "get", "pod", "nothing-here", check=False)
    assert proc.returncode != 0 and "NotFound" in proc.stderr


def test_apply_kustomize_crds_and_custom_resource(kubectl, cluster, ns, tmp_path):
    if not list(CRD_DIR.glob("*.yaml")):
        pytest.skip("manifests/crds/ holds no CRDs yet")
    run(kubectl, cluster, "apply", "-k", str(CRD_DIR))
    run(
        kubectl,
        cluster,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/queues.scheduling.run.ai",
        "crd/podgroups.scheduling.run.ai",
    )
    pg = tmp_path / "pg.yaml"
    pg.write_text(
        "apiVersion: scheduling.run.ai/v2alpha2\nkind: PodGroup\nmetadata:\n"
        "  name: pg\nspec:\n  minMember: 1\n  queue: default\n"
    )
    run(kubectl, cluster, "-n", ns, "apply", "-f", str(pg))
    assert "pg" in run(kubectl, cluster, "-n", ns, "get", "podgroups").stdout
    pg.write_text(pg.read_text() + "  notAField: true\n")
    bad = run(kubectl, cluster, "-n", ns, "apply", "-f", str(pg), check=False)
    assert bad.returncode != 0 and 'unknown field "spec.notAField"' in bad.stderr


def test_typed_create_commands(kubectl, cluster, ns):
    """kubectl's typed `create` subcommands send protobuf for these kinds."""
    name = f"{ns}-made"
    run(kubectl, cluster, "create", "namespace", name)
    try:
        run(kubectl, cluster, "-n", name, "create", "configmap", "c", "--from-literal=a=1")
        run(kubectl, cluster, "-n", name, "create", "secret", "generic", "s", "--from-literal=k=v")
        run(kubectl, cluster, "-n", name, "create", "serviceaccount", "robot")
        run(
            kubectl,
            cluster,
            "-n",
            name,
            "create",
            "job",
            "once",
            "--image=busybox:1.36",
            "--",
            "sleep",
            "5",
        )
        run(
            kubectl,
            cluster,
            "-n",
            name,
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=0",
            "--port=8080",
        )
        job = json.loads(
            run(kubectl, cluster, "-n", name, "get", "job", "once", "-o", "json").stdout
        )
        container = job["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == "busybox:1.36" and container["command"] == ["sleep", "5"]
        deployment = json.loads(
            run(kubectl, cluster, "-n", name, "get", "deployment", "web", "-o", "json").stdout
        )
        assert deployment["spec"]["replicas"] == 0
        assert deployment["spec"]["selector"] == {"matchLabels": {"app": "web"}}
        cm = json.loads(run(kubectl, cluster, "-n", name, "get", "cm", "c", "-o", "json").stdout)
        assert cm["data"] == {"a": "1"}
        secret = json.loads(
            run(kubectl, cluster, "-n", name, "get", "secret", "s", "-o", "json").stdout
        )
        assert secret["data"] == {"k": "dg=="}
    finally:
        run(kubectl, cluster, "delete", "namespace", name, "--wait=false")


def test_drain_evicts_and_cordons(kubectl, cluster, ns, tmp_path):
    node = f"{ns}-node"
    path = tmp_path / "objs.yaml"
    path.write_text(
        f"apiVersion: v1\nkind: Node\nmetadata:\n  name: {node}\n---\n"
        f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: victim\n  namespace: {ns}\n"
        f"spec:\n  nodeName: {node}\n  containers:\n  - name: c\n    image: busybox:1.36\n"
    )
    run(kubectl, cluster, "apply", "-f", str(path))
    try:
        run(kubectl, cluster, "drain", node, "--force", "--grace-period=0", "--timeout=60s")
        got = json.loads(run(kubectl, cluster, "get", "node", node, "-o", "json").stdout)
        assert got["spec"].get("unschedulable") is True
        left = run(kubectl, cluster, "-n", ns, "get", "pods", "-o", "name").stdout
        assert "victim" not in left
    finally:
        run(kubectl, cluster, "delete", "node", node, "--wait=false", check=False)


def test_auth_can_i_and_whoami(kubectl, cluster):
    assert run(kubectl, cluster, "auth", "can-i", "create", "pods").stdout.strip() == "yes"
    assert "Username" in run(kubectl, cluster, "auth", "whoami").stdout

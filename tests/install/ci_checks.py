"""The install checks of .ci/run, with the real tools, before the test suite: `helm lint
--strict` and `helm template` of the chart (Helm 3), `kubectl kustomize .` and
`kubectl kustomize argocd`, and manifests/ up to date with the chart. tests/install/ repeats
these and adds object validation and the installs on a real API server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.tools import find_helm3, find_kubectl

    helm, kubectl = find_helm3(), find_kubectl()
    if helm is None or kubectl is None:
        print(
            f"install checks: missing tools (helm 3: {helm}, kubectl: {kubectl})", file=sys.stderr
        )
        return 1
    chart = str(ROOT / "charts" / "kai-scheduler")
    steps = [
        [helm, "lint", "--strict", chart],
        [helm, "template", "kai-scheduler", chart, "-n", "kai-scheduler", "--include-crds"],
        [
            helm,
            "template",
            "kai-scheduler",
            chart,
            "-n",
            "kai-scheduler",
            "--set",
            "webhook.enabled=true",
            "--set",
            "webhook.certificates.mode=cert-manager",
        ],
        [kubectl, "kustomize", str(ROOT / "manifests" / "crds")],
        [kubectl, "kustomize", str(ROOT)],
        [kubectl, "kustomize", str(ROOT / "argocd")],
        [sys.executable, str(ROOT / "tests" / "install" / "manifests_from_chart.py")],
    ]
    for step in steps:
        out = subprocess.run(step, capture_output=True, text=True, cwd=ROOT)
        name = " ".join(Path(step[0]).name if i == 0 else a for i, a in enumerate(step[:3]))
        if out.returncode != 0:
            print(f"install checks: {name}: failed\n{out.stdout}{out.stderr}", file=sys.stderr)
            return 1
        print(f"install checks: {name}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

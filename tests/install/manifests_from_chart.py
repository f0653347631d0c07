"""The kustomize base in ``manifests/`` is rendered from the Helm chart, so that the two install
paths cannot drift: ``helm template`` with every component on, Helm's own labels removed, one
file per chart template (``templates/<dir>/<file>`` -> ``manifests/<dir>/<file>``), a
``kustomization.yaml`` per directory. ``manifests/crds/`` stays what ``kai generate`` writes;
the chart's ``crds/`` is a copy of it, written here too.

    python tests/install/manifests_from_chart.py           # check: exit 1 when stale
    python tests/install/manifests_from_chart.py --write   # regenerate
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kai-scheduler"
MANIFESTS = ROOT / "manifests"
RELEASE = NAMESPACE = "kai-scheduler"
DIRS = ("rbac", "deploy", "webhooks", "priorityclasses", "queues")
#: what `kubectl apply -k .` installs: everything but the CRDs, which are a step of their own
#: (`kubectl apply -k manifests/crds`), so that `kubectl delete -k .` never deletes them
DEFAULT_DIRS = ("rbac", "deploy", "webhooks", "priorityclasses", "queues")
#: the labels Helm (not kai) puts on every object
HELM_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
)
HEADER = (
    "# Rendered from charts/kai-scheduler/templates/{source} by\n"
    "# tests/install/manifests_from_chart.py --write. Do not edit: change the chart.\n"
)
HELM_LABEL_LINE = re.compile(
    r"^\s+(" + "|".join(re.escape(k) for k in HELM_LABELS) + r"):.*\n", re.M
)
#: an annotations block holding only Helm's hook keys (the default queues are Helm hooks; in
#: the kustomize base they are plain objects)
HELM_HOOK_ANNOTATIONS = re.compile(r"^\s+annotations:\n(?:\s+helm\.sh/hook[-\w]*:.*\n)+", re.M)

NAMESPACE_YAML = f"""\
# kai's own namespace (Helm installs into the release namespace: helm install -n NAMESPACE
# --create-namespace).
apiVersion: v1
kind: Namespace
metadata:
  name: {NAMESPACE}
  labels:
    app.kubernetes.io/name: kai
    app.kubernetes.io/part-of: kai-scheduler
"""


def helm_template(helm: str, *values: str) -> str:
    args = [helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for value in values:
        args += ["--set", value]
    out = subprocess.run(args, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"helm template failed: {out.stderr}")
    return out.stdout


def strip_helm_labels(text: str) -> str:
    return HELM_HOOK_ANNOTATIONS.sub("", HELM_LABEL_LINE.sub("", text))


def render(helm: str) -> dict[Path, str]:
    """Every file of manifests/ except crds/, as the chart renders it."""
    rendered = helm_template(helm)
    by_source: dict[str, list[str]] = {}
    for doc in re.split(r"^---\s*$", rendered, flags=re.M):
        match = re.search(r"^# Source: kai-scheduler/templates/(\S+)$", doc, flags=re.M)
        if match is None or not doc.strip():
            continue
        source = match.group(1)
        if source.split("/")[0] not in DIRS:
            continue  # helm test hooks
        body = doc[match.end() :].strip("\n")
        by_source.setdefault(source, []).append(strip_helm_labels(body + "\n"))
    files: dict[Path, str] = {}
    for source, docs in sorted(by_source.items()):
        directory, name = source.split("/", 1)
        files[MANIFESTS / directory / name] = HEADER.format(source=source) + "---\n".join(docs)
    files[MANIFESTS / "deploy" / "namespace.yaml"] = NAMESPACE_YAML
    for crd in sorted((MANIFESTS / "crds").glob("*.yaml")):  # kai generate's, copied
        if crd.name != "kustomization.yaml":
            files[CHART / "crds" / crd.name] = crd.read_text()
    for directory in DIRS:
        names = sorted(p.name for p in files if p.parent.name == directory)
        files[MANIFESTS / directory / "kustomization.yaml"] = (
            "# Rendered by tests/install/manifests_from_chart.py --write. Do not edit.\n"
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
            + "".join(f"- {n}\n" for n in names)
        )
    files[ROOT / "kustomization.yaml"] = (
        "# kai without its CRDs, the admission webhooks included (self-managed certificates):\n"
        "#   kubectl apply --server-side -k manifests/crds   # first, a step of its own\n"
        "#   kubectl apply --server-side -k .\n"
        "# (the objects of `helm install kai-scheduler charts/kai-scheduler -n kai-scheduler`,\n"
        "# docs/install.md). The CRDs are not here, so that removing kai never removes them and\n"
        "# with them every Queue, PodGroup and policy document. Rendered by\n"
        "# tests/install/manifests_from_chart.py --write.\n"
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
        + "".join(f"- manifests/{d}\n" for d in DEFAULT_DIRS)
    )
    return files


def stale(files: dict[Path, str]) -> list[str]:
    problems = []
    for path, text in files.items():
        if not path.exists() or path.read_text() != text:
            problems.append(f"{path.relative_to(ROOT)}: differs from the chart's rendering")
    for path in _owned():
        if path not in files:
            problems.append(f"{path.relative_to(ROOT)}: not rendered by the chart")
    return problems


def _owned() -> list[Path]:
    """The files --write manages: manifests/<DIRS>/* and the chart's crds/."""
    paths = [p for d in DIRS for p in (MANIFESTS / d).glob("*")]
    return paths + list((CHART / "crds").glob("*"))


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.tools import find_helm

    helm = find_helm()
    if helm is None:
        print("no helm binary", file=sys.stderr)
        return 2
    files = render(helm)
    if "--write" in argv:
        for path in _owned():
            if path not in files:
                path.unlink()
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return 0
    problems = stale(files)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

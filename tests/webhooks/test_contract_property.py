"""One contract: file by file, ``kai validate``'s verdict equals the API server's.

Hypothesis writes small YAML files of QueueTrees and raw KAI Queues, valid and broken in the
ways users break them (a limit below the quota, children's quotas over the parent's, a child's
quota over the parent's limit, cycles, duplicate names, bad names, bad quantity strings,
quantities as floats and exponents, explicit nulls, -1). Each file is checked by ``kai validate``
and applied with kubectl to an API server that serves the project's CRDs and calls ``kai
webhook`` (registered with the server): the file is "ok" when every document is admitted. The
two verdicts must be equal, on the real kube-apiserver and on the embedded one.

The example repositories are compared too: examples/gitops as a whole, and each file of
examples/gitops-broken put in place of its namesake (kai validate on that repository, kubectl
apply of the file over the applied examples).

Every generated file uses its own queue names (a per-file prefix), so files do not meet each
other in the cluster. A reference to a queue that is not in the file would be an error for
``kai validate`` (run on the file alone) but only a warning at admission (the parent may be
applied later, see docs/webhooks.md); such references are never generated, nor the same object
twice in one file (to the API server, an update of the first). Files also carry a label, so
they are removed when the test ends.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kai.cli import main as kai_main
from kai.kube.client import Kube
from kai.webhooks.app import Options, WebhookApp, free_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES_DIR = ROOT / "examples" / "gitops"
BROKEN_DIR = ROOT / "examples" / "gitops-broken"
BROKEN_FILES = sorted(
    str(p.relative_to(BROKEN_DIR))
    for p in BROKEN_DIR.rglob("*.yaml")
    if p.name != "kustomization.yaml"
)
LABEL = "contract-test.kai.scheduler/case"
pytestmark = [pytest.mark.integration, pytest.mark.slow]


class Raw(str):
    """A YAML scalar written as is (``1e3``, ``0.75``, ``null``), not as a JSON string."""


def to_yaml(value: Any) -> str:
    """Flow-style YAML (JSON with raw scalars): what both YAML readers parse the same way."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {to_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(to_yaml(v) for v in value) + "]"
    return json.dumps(value)


# quantities as users write them; the bad ones are refused by kai validate
GOOD_QUANTITIES = ["4", "2", "0", "-1", "1.5", "0.75", "1e3", "2.5e1", "1e-3", '"500m"', '"64Gi"']
GOOD_QUANTITIES += ['"1e3"', '"8"', "null"]
BAD_QUANTITIES = ['"2 cores"', '"1.5.5"', "true", '"Gi"', '"--1"']
GOOD_NUMBERS = ["4", "8", "0", "-1", "1.5", "0.5", "1e1", "2.5e0", "null"]
BAD_NUMBERS = ['"4"', "true"]
NAMES = ["a", "b", "c", "d", "e"]
BAD_NAMES = ["Bad_Name", "-lead", "x" * 64, "trail-"]


@dataclass
class Case:
    """One file: documents written with names n0..n4, prefixed when rendered."""

    docs: list[dict[str, Any]] = field(default_factory=list)

    def render(self, prefix: str) -> str:
        def rename(value: Any) -> Any:
            if isinstance(value, Raw):
                return value
            if isinstance(value, str) and value.startswith("@"):
                return f"{prefix}-{value[1:]}"
            if isinstance(value, dict):
                return {k: rename(v) for k, v in value.items()}
            if isinstance(value, list):
                return [rename(v) for v in value]
            return value

        out = []
        for doc in self.docs:
            doc = rename(doc)
            doc["metadata"]["labels"] = {LABEL: prefix}
            out.append(to_yaml(doc))
        return "\n---\n".join(out) + "\n"


def _amounts(draw: st.DrawFn, bad: bool, keys: tuple[str, ...]) -> dict[str, Any]:
    pool = GOOD_QUANTITIES + (BAD_QUANTITIES if bad else [])
    chosen = draw(st.lists(st.sampled_from(keys), unique=True, min_size=1, max_size=len(keys)))
    out: dict[str, Any] = {}
    for key in chosen:
        if key == "gpu":
            numbers = GOOD_NUMBERS + (BAD_NUMBERS if bad else [])
            out[key] = Raw(draw(st.sampled_from(numbers)))
        else:
            out[key] = Raw(draw(st.sampled_from(pool)))
    return out


def _name(draw: st.DrawFn, bad: bool) -> str:
    if bad and draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(BAD_NAMES))
    return "@" + draw(st.sampled_from(NAMES))


@st.composite
def tree_node(draw: st.DrawFn, depth: int, bad: bool) -> dict[str, Any]:
    node: dict[str, Any] = {"name": _name(draw, bad)}
    if draw(st.booleans()):
        node["quota"] = _amounts(draw, bad, ("gpu", "cpu", "memory"))
    if draw(st.integers(0, 2)) == 0:
        node["limit"] = _amounts(draw, bad, ("gpu", "cpu", "memory"))
    if draw(st.integers(0, 3)) == 0:
        node["displayName"] = Raw("null")
    if depth < 2 and draw(st.integers(0, 2)) == 0:
        node["children"] = draw(st.lists(tree_node(depth + 1, bad), min_size=1, max_size=3))
    return node


@st.composite
def queue_tree(draw: st.DrawFn, bad: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if draw(st.integers(0, 3)) == 0:
        spec["parent"] = Raw("null")
    if draw(st.integers(0, 3)) == 0:
        spec["defaults"] = {"limit": _amounts(draw, bad, ("gpu", "cpu", "memory"))}
    spec["queues"] = draw(st.lists(tree_node(0, bad), min_size=1, max_size=3))
    return {
        "apiVersion": "gitops.kai.scheduler/v1alpha1",
        "kind": "QueueTree",
        "metadata": {"name": "@tree" + str(draw(st.integers(0, 1)))},
        "spec": spec,
    }


@st.composite
def raw_queue(draw: st.DrawFn, bad: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    parent = draw(st.sampled_from([None, None, *NAMES]))
    if parent is not None:
        spec["parentQueue"] = "@" + parent
    resources: dict[str, Any] = {}
    for resource in draw(
        st.lists(st.sampled_from(["gpu", "cpu", "memory"]), unique=True, min_size=1)
    ):
        numbers = GOOD_NUMBERS[:-1] + (BAD_NUMBERS if bad else [])
        resources[resource] = {
            key: Raw(draw(st.sampled_from(numbers)))
            for key in draw(
                st.lists(
                    st.sampled_from(["quota", "limit", "overQuotaWeight"]), unique=True, min_size=1
                )
            )
        }
    spec["resources"] = resources
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": _name(draw, bad)},
        "spec": spec,
    }


def _defined(case_docs: list[dict[str, Any]]) -> set[str]:
    names: set[str] = set()

    def walk(nodes: Any) -> None:
        for node in nodes or []:
            names.add(node["name"])
            walk(node.get("children"))

    for doc in case_docs:
        if doc["kind"] == "Queue":
            names.add(doc["metadata"]["name"])
        else:
            walk(doc["spec"]["queues"])
    return names


@st.composite
def cases(draw: st.DrawFn) -> Case:
    bad = draw(st.booleans())
    docs = draw(st.lists(st.one_of(queue_tree(bad), raw_queue(bad)), min_size=1, max_size=3))
    # one document per kind and name: a second one is, to the API server, an update of the first
    # (which kai validate reports as a duplicate document; no admission check can see that)
    unique: dict[tuple[str, str], dict[str, Any]] = {}
    for doc in docs:
        unique.setdefault((doc["kind"], doc["metadata"]["name"]), doc)
    docs = list(unique.values())
    # every parent named is in the file (a missing one is order-dependent: see the docstring)
    defined = _defined(docs)
    for doc in docs:
        parent = doc["spec"].get("parentQueue")
        if parent is not None and parent not in defined:
            del doc["spec"]["parentQueue"]
    return Case(docs)


def _queue(name: str, parent: str | None = None, **gpu: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resources": {"gpu": {"overQuotaWeight": Raw("1"), **{k: Raw(v) for k, v in gpu.items()}}}
    }
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def _tree(*queues: dict[str, Any], parent: str = "null") -> dict[str, Any]:
    return {
        "apiVersion": "gitops.kai.scheduler/v1alpha1",
        "kind": "QueueTree",
        "metadata": {"name": "@tree0"},
        "spec": {"parent": Raw(parent), "queues": list(queues)},
    }


# the contract's own examples: the five documents and one of each hierarchy rule
EXAMPLES = {
    "fraction": Case([_tree({"name": "@a", "quota": {"cpu": Raw("1.5")}})]),
    "fraction-below-one": Case([_tree({"name": "@a", "quota": {"cpu": Raw("0.75")}})]),
    "exponent-memory": Case([_tree({"name": "@a", "quota": {"memory": Raw("1e3")}})]),
    "exponent-cpu": Case([_tree({"name": "@a", "quota": {"cpu": Raw("1e3")}})]),
    "null-parent": Case([_tree({"name": "@a", "displayName": Raw("null")})]),
    "bad-quantity": Case([_tree({"name": "@a", "quota": {"cpu": Raw('"2 cores"')}})]),
    "limit-below-quota": Case([_queue("@a", quota="8", limit="4")]),
    "children-quota-sum": Case(
        [
            _queue("@a", quota="4", limit="-1"),
            _queue("@b", "@a", quota="3", limit="-1"),
            _queue("@c", "@a", quota="2", limit="-1"),
        ]
    ),
    "child-quota-over-parent-limit": Case(
        [_queue("@a", quota="2", limit="2"), _queue("@b", "@a", quota="3", limit="-1")]
    ),
    "cycle": Case(
        [_queue("@a", "@b", quota="1", limit="-1"), _queue("@b", "@a", quota="1", limit="-1")]
    ),
    "tree-children-over-parent": Case(
        [
            _tree(
                {
                    "name": "@a",
                    "quota": {"gpu": Raw("4")},
                    "children": [
                        {"name": "@b", "quota": {"gpu": Raw("3")}},
                        {"name": "@c", "quota": {"gpu": Raw("2")}},
                    ],
                }
            )
        ]
    ),
}


@dataclass
class Server:
    name: str
    kubeconfig: Path
    kubectl: str
    workdir: Path
    counter: itertools.count = field(default_factory=itertools.count)
    prefixes: list[str] = field(default_factory=list)
    compared: list[tuple[str, bool, bool]] = field(default_factory=list)
    examples_applied: bool = False
    broken_applied: list[Path] = field(default_factory=list)

    def apply_examples(self) -> None:
        self.examples_applied = True
        applied = self.run("apply", "-k", str(EXAMPLES_DIR))
        assert applied.returncode == 0, applied.stderr

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.kubectl, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


def _validate_ok(path: Path) -> tuple[bool, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = kai_main(["validate", "--color", "never", str(path)])
    assert code in (0, 1), out.getvalue()
    return code == 0, out.getvalue()


def _start_server(name: str, request: pytest.FixtureRequest, tmp: Path) -> tuple[Path, Any]:
    if name == "real":
        external = os.environ.get("KAI_TEST_KUBECONFIG")  # as tests/integration/conftest.py
        if external:
            return Path(external), None
        return request.getfixturevalue("real_cluster").kubeconfig, None
    from kube_emulator import ApiServer

    server = ApiServer(tls=True).start()  # kubectl sends its token over HTTPS only
    return server.write_kubeconfig(tmp / "kubeconfig"), server


@pytest.fixture(scope="module", params=["embedded", "real"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, kubectl: str
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp(f"contract-{request.param}")
    kubeconfig, embedded = _start_server(request.param, request, tmp)
    env = Server(request.param, kubeconfig, kubectl, tmp)
    kube = Kube.from_kubeconfig(str(kubeconfig))
    app = None
    try:
        for crd in sorted((ROOT / "manifests" / "crds").glob("*_*.yaml")):
            out = env.run("apply", "-f", str(crd))
            assert out.returncode == 0, out.stderr
        deadline = time.monotonic() + 60
        while env.run("get", "queuetrees,queues.scheduling.run.ai").returncode != 0:
            assert time.monotonic() < deadline, "the CRDs are not served"
            time.sleep(0.2)
        env.run("create", "namespace", "kai-scheduler")  # the certificate's Secret; may exist
        port = free_port()
        app = WebhookApp(
            kube,
            Options(
                port=port,
                host="127.0.0.1",
                self_register=f"https://127.0.0.1:{port}",
                cert_secret=f"kai-webhook-certs-{uuid.uuid4().hex[:6]}",
                publish_delay=1.0,
            ),
        ).start()
        # ready when the webhook answers: a tree whose children's quotas are over the parent's
        probe = EXAMPLES["tree-children-over-parent"].render("probe")
        while (
            "denied the request"
            not in env.run("apply", "--dry-run=server", "-f", "-", stdin=probe).stderr
        ):
            assert time.monotonic() < deadline + 60, "the webhook never answered"
            time.sleep(0.5)
        yield env
    finally:
        if app is not None:
            app.stop()
        # the webhook is gone: remove what the cases stored
        for kind in ("queuetrees", "queues.scheduling.run.ai"):
            env.run("delete", kind, "-l", LABEL, "--wait=false")
        for path in env.broken_applied:  # what a broken file left (its valid documents)
            env.run("delete", "-f", str(path), "--ignore-not-found", "--wait=false")
        if env.examples_applied:
            env.run("delete", "-k", str(EXAMPLES_DIR), "--wait=false")
        kube.close()
        if embedded is not None:
            embedded.stop()


def _check(env: Server, case: Case, server_side: bool) -> None:
    prefix = f"k{next(env.counter)}"
    text = case.render(prefix)
    path = env.workdir / f"{prefix}.yaml"
    path.write_text(text)
    expected, report = _validate_ok(path)
    # kubectl's client-side apply (a create), or server-side apply as Argo CD and Flux use
    applied = env.run("apply", *(["--server-side"] if server_side else []), "-f", str(path))
    got = applied.returncode == 0
    env.compared.append((prefix, expected, got))
    assert got == expected, (
        f"{env.name}: kai validate says {'ok' if expected else 'error'}, the API server "
        f"{'admitted every document' if got else 'refused'}\n--- file\n{text}--- kai validate\n"
        f"{report}--- kubectl\n{applied.stdout}{applied.stderr}"
    )


@pytest.mark.parametrize("apply", ["client-side", "server-side"])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_contracts_own_examples(server: Server, name: str, apply: str) -> None:
    _check(server, EXAMPLES[name], apply == "server-side")


@settings(
    max_examples=45,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: each example costs API calls
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=cases(), server_side=st.booleans())
def test_validate_and_the_api_server_agree_file_by_file(
    server: Server, case: Case, server_side: bool
) -> None:
    _check(server, case, server_side)


def test_the_example_repository_is_valid_for_both(server: Server) -> None:
    """examples/gitops as a whole: kai validate and the API server (kubectl apply -k) agree."""
    ok, report = _validate_ok(EXAMPLES_DIR)
    assert ok, report
    server.examples_applied = True
    applied = server.run("apply", "-k", str(EXAMPLES_DIR))
    assert applied.returncode == 0, applied.stderr
    assert "Warning" not in applied.stderr  # every parent is in the repository


@pytest.mark.parametrize("rel", BROKEN_FILES)
def test_each_broken_file_over_the_examples(
    server: Server, rel: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A file of examples/gitops-broken put into examples/gitops (replacing its namesake):
    kai validate on that repository, and kubectl apply of the file over the applied examples,
    give the same verdict (all of them are refused)."""
    repo = tmp_path_factory.mktemp("repo") / "gitops"
    shutil.copytree(EXAMPLES_DIR, repo)
    target = repo / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(BROKEN_DIR / rel, target)
    expected, report = _validate_ok(repo)
    server.apply_examples()
    server.broken_applied.append(BROKEN_DIR / rel)
    applied = server.run("apply", "-f", str(BROKEN_DIR / rel))
    got = applied.returncode == 0
    server.apply_examples()  # put back what the file changed
    assert got == expected, (rel, report, applied.stdout, applied.stderr)
    assert not expected, report


def test_generated_files_cover_both_verdicts(server: Server) -> None:
    """The property above must have met valid and invalid files, or it proved nothing."""
    verdicts = [expected for _, expected, _ in server.compared]
    assert verdicts.count(True) >= 10 and verdicts.count(False) >= 10, server.compared

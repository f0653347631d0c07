"""The commands the docs tell a user to type run here, so a command that stops working fails.

Every shell block (a fenced block of ``sh``, ``bash``, ``shell`` or ``console``, or one without a
language whose first line is a ``$ `` command) of the pages in :data:`PAGES` is a reviewed case:
the line before it is a marker ``<!-- doc-test: NAME -->`` and
:data:`CASES` says what happens to ``NAME``: it runs locally, it runs against a real API server
(a fresh one for this module: installs do not leak into other tests; skipped where this machine
has none), or it is skipped with the reason. A block without a marker, a marker the table does
not know and a table entry without a block all fail: nobody adds an untested command silently.

How a block runs:

- ``console`` blocks: each ``$ command`` runs in bash from the repository root; the lines after
  it are its expected output (standard output, then standard error; a line ``...`` stands for
  any number of lines), and ``$ echo $?`` checks the exit status of the command before it. A
  command without ``echo $?`` must exit 0 unless the case allows otherwise.
- ``sh``/``bash`` blocks: each command (``\\`` continues a line; ``#`` comments are bash's) runs
  in bash and must exit 0 (or the whole block as one ``set -e`` script, for a heredoc); a case
  may replace placeholders such as ``KUBECONFIG`` first, and check what the block did after.

``kai`` is this checkout's (the virtual environment's ``bin`` first on ``PATH``); ``kubectl`` and
``helm`` are the test tools (``helpers.tools``), ``KUBECONFIG`` points at the cluster.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers.real_cluster import RealCluster, real_k8s_dir, start_with_retry
from helpers.tools import find_helm, find_kubectl

ROOT = Path(__file__).resolve().parents[2]
PAGES = (
    "README.md",
    "docs/install.md",
    "docs/gitops.md",
    "docs/webhooks.md",
    "docs/testing.md",
    "docs/cli.md",
)
SHELL = {"sh", "bash", "shell", "console"}
MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*([\w.-]+)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
TIMEOUT = 120  # seconds per command


@dataclass
class Block:
    page: str
    line: int  # of the opening fence
    lang: str
    text: str
    name: str | None


@dataclass
class Case:
    """What the test does with one block."""

    where: str  # "local", "cluster" or "skip"
    reason: str = ""  # why it is skipped
    replace: dict[str, str] = field(default_factory=dict)  # placeholder -> value ({kubeconfig})
    nonzero_ok: bool = False  # console: a command without `echo $?` may exit non-zero
    setup: Callable[[dict[str, str]], None] | None = None  # before the block (env given)
    cwd: str = "root"  # "root" (the repository) or "tmp" (a scratch directory)
    script: bool = False  # sh: the block is one bash script (`set -e`; a heredoc spans lines)
    after: Callable[[dict[str, str]], None] | None = None  # checks what the block did
    # cluster: the block installs the admission webhook's configurations; the blocks after it
    # run with `kai webhook` served here in their place (no kubelet runs its Deployment)
    serves_webhook: bool = False


DELETION_TEST = (
    "run, and their output compared, by tests/e2e/test_deletion_protection.py: they need a "
    "running controller and a workload that holds the queues"
)
NO_DOCKER = "builds and pushes an image: no container runtime or registry in the test machine"


def _explain_setup(env: dict[str, str]) -> None:
    """What README's `kai explain team-nlp/my-pod` explains: the example repository's Queues and
    a pending pod of team-nlp."""
    kai = [sys.executable, "-m", "kai.cli"]
    rendered = _run([*kai, "render", "examples/gitops"], env, ROOT)
    assert rendered.returncode == 0, rendered.stderr
    for argv, stdin in (
        (["apply", "-f", "-"], rendered.stdout),
        (["create", "namespace", "team-nlp", "--dry-run=client", "-o", "yaml"], None),
    ):
        run = _run([env["KUBECTL"], *argv], env, ROOT, stdin=stdin)
        assert run.returncode == 0, run.stderr
        if stdin is None:
            applied = _run([env["KUBECTL"], "apply", "-f", "-"], env, ROOT, stdin=run.stdout)
            assert applied.returncode == 0, applied.stderr
    pod = (  # and its PodGroup, as kai's pod-grouper would write it
        "apiVersion: scheduling.run.ai/v2alpha2\nkind: PodGroup\nmetadata: {name: pg-my-pod, "
        "namespace: team-nlp}\nspec: {minMember: 1, queue: nlp}\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: my-pod, namespace: team-nlp, labels: "
        "{kai.scheduler/queue: nlp}, annotations: {pod-group-name: pg-my-pod}}\nspec:\n"
        "  schedulerName: kai-scheduler\n  containers:\n"
        "  - {name: c, image: busybox, resources: {limits: {nvidia.com/gpu: '1'}}}\n"
    )
    run = _run([env["KUBECTL"], "apply", "-f", "-"], env, ROOT, stdin=pod)
    assert run.returncode == 0, run.stderr


def _data_kept(env: dict[str, str]) -> None:
    """After the documented uninstall: the CRDs, the default queues, the Queues the earlier
    blocks applied and the PodGroup are all still there."""
    kubectl = env["KUBECTL"]
    for argv in (
        ["get", "crd", "queues.scheduling.run.ai", "podgroups.scheduling.run.ai"],
        ["get", "queue", "default-queue", "default-parent-queue", "nlp"],
        ["get", "podgroup", "pg-my-pod", "-n", "team-nlp"],
    ):
        run = _run([kubectl, *argv], env, ROOT)
        assert run.returncode == 0, f"after the uninstall: kubectl {' '.join(argv)}: {run.stderr}"
    gone = _run([kubectl, "get", "deployment", "-n", "kai-scheduler", "-o", "name"], env, ROOT)
    assert gone.returncode == 0 and not gone.stdout.strip(), gone.stdout


def _node_is_ready(env: dict[str, str]) -> None:
    """docs/testing.md's simulated node: Ready, not tainted, with its GPUs."""
    import json

    run = _run([env["KUBECTL"], "get", "node", "gpu-node-0", "-o", "json"], env, ROOT)
    assert run.returncode == 0, run.stderr
    node = json.loads(run.stdout)
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True", node["status"]
    assert not node["spec"].get("taints"), node["spec"]
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"


# Every shell block of PAGES, by its marker. The cluster blocks run in this table's order on one
# cluster: a later block may rely on an earlier install.
CASES: dict[str, Case] = {
    # README.md
    "readme-quickstart": Case(
        "skip",
        reason="creates a virtual environment and runs `kai up` until Ctrl-C, then the whole "
        "test suite: what CI itself does (.ci/run)",
    ),
    "readme-kai-up": Case(
        "skip",
        reason="`kai up` runs until Ctrl-C and its log carries times and a random port; "
        "tests/e2e/test_commands.py runs it",
    ),
    "readme-kai-up-kubectl": Case(
        "skip",
        reason="runs against a `kai up` of another terminal; its pod names are random. "
        "tests/e2e/test_commands.py runs kubectl against `kai up`",
    ),
    "readme-validate": Case("local", nonzero_ok=True),
    "readme-simulate": Case("local"),
    "readme-install": Case(
        "skip",
        reason="three alternative installs of one cluster; the Helm and kustomize installs run "
        "as the blocks of docs/install.md (install-second-instance, install-kustomize), the Argo "
        "CD one needs Argo CD's CRDs and controller",
    ),
    # docs/install.md
    "install-image": Case("skip", reason=NO_DOCKER),
    "install-helm": Case(
        "skip",
        reason="`helm test` runs a pod, which needs a kubelet; and the install of the same "
        "namespace is the kustomize block's here (the chart itself is installed by "
        "install-second-instance, and by tests/install/test_real_install.py)",
    ),
    "install-tools": Case("local", script=True, replace={".venv/bin/python": "{python}"}),
    "install-kustomize": Case("cluster", serves_webhook=True),
    "install-second-instance": Case("cluster"),
    # README.md's cluster commands, on the install above
    "readme-insight": Case(
        "cluster",
        replace={"KUBECONFIG": "{kubeconfig}", "[--watch]": ""},
        setup=_explain_setup,
        cwd="tmp",
    ),
    # docs/gitops.md
    "gitops-validate": Case("local"),
    "gitops-validate-broken": Case("local"),
    "gitops-validate-json": Case("local", nonzero_ok=True),
    "gitops-render": Case("local"),
    "gitops-in-use": Case("skip", reason=DELETION_TEST),
    "gitops-release-finalizer": Case("skip", reason=DELETION_TEST),
    # docs/testing.md
    "testing-tools": Case("local", script=True, replace={".venv/bin/python": "{python}"}),
    "testing-ready-node": Case("cluster", script=True, after=_node_is_ready),
    # docs/cli.md
    "cli-plan-template": Case("local"),
    # last on the cluster: the uninstall, which must keep every object and the CRDs
    "install-kustomize-uninstall": Case("cluster", after=_data_kept),
}


def blocks(page: str) -> list[Block]:
    """The shell blocks of ``page`` with the marker before each (None when there is none)."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, lang = opening.group(2), opening.group(3).lower()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        body_lines = [line for line in lines[i + 1 : end] if line.strip()]
        if not lang and body_lines and body_lines[0].lstrip().startswith("$ "):
            lang = "console"  # a block without a language that shows a shell session
        if lang in SHELL:
            before = [line for line in lines[:i] if line.strip()]
            marker = MARKER.match(before[-1]) if before else None
            indent = len(opening.group(1))
            body = "\n".join(line[indent:] for line in lines[i + 1 : end])
            out.append(Block(page, i + 1, lang, body, marker.group(1) if marker else None))
        i = end + 1
    return out


ALL = [b for page in PAGES for b in blocks(page)]


def test_every_shell_block_is_a_known_case() -> None:
    problems = [
        f"{b.page}:{b.line}: a ```{b.lang} block without a `<!-- doc-test: NAME -->` line "
        "before it: add one and say in tests/docs/test_doc_commands.py how it is tested"
        for b in ALL
        if b.name is None
    ]
    names = [b.name for b in ALL if b.name]
    problems += [f"doc-test marker {n} is used twice" for n in set(names) if names.count(n) > 1]
    problems += [
        f"{b.page}:{b.line}: doc-test marker {b.name} is not in CASES"
        for b in ALL
        if b.name and b.name not in CASES
    ]
    problems += [f"CASES[{n!r}] has no block in {PAGES}" for n in CASES if n not in names]
    problems += [
        f"CASES[{n!r}]: a skipped block needs its reason"
        for n, c in CASES.items()
        if c.where == "skip" and not c.reason
    ]
    assert not problems, "\n".join(problems)


def test_the_parser_finds_a_block_without_a_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard itself can fail: a new block with no marker is found, one with a marker named."""
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n<!-- doc-test: known -->\n```sh\nkai --help\n```\n\n```console\n$ kai x\n```\n"
        "\n```yaml\nnot: shell\n```\n\n```\n$ kai y\nout\n```\n\n```\nplain text\n```\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = blocks("page.md")
    assert [(b.name, b.lang, b.line, b.text) for b in found] == [
        ("known", "sh", 4, "kai --help"),
        (None, "console", 8, "$ kai x"),
        (None, "console", 16, "$ kai y\nout"),
    ]


# running


def _run(
    argv: list[str], env: dict[str, str], cwd: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=cwd, input=stdin, timeout=TIMEOUT
    )


def _bash(command: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    run = _run(["bash", "-c", command], env, cwd)
    print(f"{time.monotonic() - started:6.1f} s  {command.splitlines()[-1][:90]}")
    return run


def _env(kubeconfig: str | None) -> dict[str, str]:
    tools = [str(Path(sys.executable).parent)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "NO_COLOR"))}
    env["NO_COLOR"] = "1"
    kubectl, helm = find_kubectl(), find_helm()
    for tool in (kubectl, helm):
        if tool:
            tools.append(str(Path(tool).parent))
    env["PATH"] = os.pathsep.join([*tools, env.get("PATH", "")])
    env["KUBECTL"] = kubectl or "kubectl"
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    return env


def _commands(text: str) -> list[str]:
    """The commands of an sh block: ``\\``-continued lines joined; blank lines dropped."""
    out, current = [], ""
    for line in text.splitlines():
        current += line
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        if current.strip():
            out.append(current.strip())
        current = ""
    if current.strip():
        out.append(current.strip())
    return out


def _session(text: str) -> list[tuple[str, list[str]]]:
    """The ``$ command`` lines of a console block, each with the output lines after it."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            out.append((line[2:].strip(), []))
        elif out:
            out[-1][1].append(line)
        elif line.strip():
            raise AssertionError(f"output before the first `$ ` command: {line!r}")
    return out


def _matches(want: list[str], have: list[str]) -> bool:
    """``have`` equals ``want`` line for line, where a ``...`` line stands for any lines (the
    wildcard match of a glob, over lines)."""
    i = j = 0
    star, mark = -1, 0
    while j < len(have):
        if i < len(want) and want[i].strip() == "...":
            star, mark = i, j
            i += 1
        elif i < len(want) and have[j].rstrip() == want[i].rstrip():
            i += 1
            j += 1
        elif star >= 0:
            mark += 1
            i, j = star + 1, mark
        else:
            return False
    while i < len(want) and want[i].strip() == "...":
        i += 1
    return i == len(want)


def test_the_output_match() -> None:
    assert _matches(["a", "...", "c"], ["a", "b", "b", "c"])
    assert _matches(["...", "b", "..."], ["a", "b", "c"])
    assert _matches(["a", "..."], ["a"])
    assert not _matches(["a", "c"], ["a", "b", "c"])
    assert not _matches(["a", "...", "c"], ["a", "b"])
    assert not _matches(["a"], ["a", "b"])


def _replace(command: str, case: Case, kubeconfig: str | None) -> str:
    for old, new in case.replace.items():
        command = command.replace(old, new.format(kubeconfig=kubeconfig, python=sys.executable))
    return command


def _check_console(block: Block, case: Case, env: dict[str, str], cwd: Path) -> None:
    status: int | None = None
    last = ""
    for command, want in _session(block.text):
        where = f"{block.page}:{block.line} `{command}`"
        if command == "echo $?":
            assert [str(status)] == [w for w in want if w.strip()], (
                f"{where}: `{last}` exited {status}, the doc says {want}"
            )
            status = None
            continue
        if status not in (None, 0) and not case.nonzero_ok:
            raise AssertionError(f"{block.page}:{block.line} `{last}` exited {status}")
        run = _bash(_replace(command, case, env.get("KUBECONFIG")), env, cwd)
        have = (run.stdout + run.stderr).splitlines()
        while want and not want[-1].strip():
            want = want[:-1]
        while have and not have[-1].strip():
            have = have[:-1]
        assert _matches(want, have), (
            f"{where}: the output differs from the doc\n--- doc\n"
            + "\n".join(want)
            + "\n--- actual\n"
            + "\n".join(have)
        )
        status, last = run.returncode, command
    if status not in (None, 0) and not case.nonzero_ok:
        raise AssertionError(f"{block.page}:{block.line} `{last}` exited {status}")


def _check_sh(block: Block, case: Case, env: dict[str, str], cwd: Path) -> None:
    script = "set -euo pipefail\n" + block.text
    for command in [script] if case.script else _commands(block.text):
        run = _bash(_replace(command, case, env.get("KUBECONFIG")), env, cwd)
        assert run.returncode == 0, (
            f"{block.page}:{block.line} `{command}` exited {run.returncode}\n"
            f"{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
        )


def _check(block: Block, env: dict[str, str], tmp: Path) -> None:
    case = CASES[block.name or ""]
    cwd = ROOT if case.cwd == "root" else tmp
    if case.setup is not None:
        case.setup(env)
    if block.lang == "console":
        _check_console(block, case, env, cwd)
    else:
        _check_sh(block, case, env, cwd)
    if case.after is not None:
        case.after(env)


def _ids(where: str) -> list[Block]:
    return [b for b in ALL if b.name in CASES and CASES[b.name].where == where]


@pytest.mark.parametrize("block", _ids("local"), ids=lambda b: b.name)
def test_local_block_runs_as_documented(block: Block, tmp_path: Path) -> None:
    _check(block, _env(None), tmp_path)


@pytest.fixture(scope="module")
def doc_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """A fresh real API server for the blocks that install kai (so nothing they install reaches
    the other tests' cluster)."""
    scripts = real_k8s_dir()
    if scripts is None:
        pytest.skip("no real Kubernetes control plane here (docs/testing.md says how to run one)")
    if find_kubectl() is None:
        pytest.skip("no kubectl binary")
    cluster = start_with_retry(lambda: RealCluster(tmp_path_factory.mktemp("doc-k8s"), scripts))
    try:
        yield cluster
    finally:
        cluster.stop(wipe=True)


@pytest.mark.integration
def test_cluster_blocks_run_as_documented(doc_cluster: RealCluster, tmp_path: Path) -> None:
    """The cluster blocks in the docs' order, on one cluster (an install, then what uses it)."""
    from install.cluster_ops import local_webhook

    env = _env(str(doc_cluster.kubeconfig))
    order = {name: i for i, name in enumerate(CASES)}
    with contextlib.ExitStack() as stack:
        for block in sorted(_ids("cluster"), key=lambda b: order[b.name or ""]):
            _check(block, env, tmp_path)
            if CASES[block.name or ""].serves_webhook:
                stack.enter_context(
                    local_webhook(doc_cluster.kubeconfig, env["KUBECTL"], "kai-scheduler", tmp_path)
                )


@pytest.mark.parametrize("block", _ids("skip"), ids=lambda b: b.name)
def test_skipped_block(block: Block) -> None:
    """Listed in the test report with the reason it cannot run here."""
    pytest.skip(f"{block.page}:{block.line}: {CASES[block.name or ''].reason}")

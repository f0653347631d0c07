"""`kai validate` / `render` / `simulate` on hostile pull requests (issue 10, section 2).

Every input is made by the test. The commands run in a child process whose address space is
capped (RLIMIT_AS) and which is killed after a timeout, so a regression shows as a failed test,
never as a hung or out-of-memory test run.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kai.gitops.loader import load_paths, load_text

MEMORY_CAP = 1536 * 2**20
TIMEOUT_S = 180  # generous: the machine running the suite may be shared
SECRET = "s3cr3t-token-do-not-print"

QUEUE_TREE = """\
apiVersion: gitops.kai.scheduler/v1alpha1
kind: QueueTree
metadata:
  name: teams
spec:
  queues:
  - name: research
    quota: {gpu: 8}
"""

# 388 bytes: nine levels of nine aliases each, 9^9 (387 million) strings when expanded.
BOMB = "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
    f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def kai(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``kai ARGV`` in a capped child process."""
    code = "import sys; from kai.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        preexec_fn=_cap,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )


def io_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stdout.splitlines() if "[io]" in line]


def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "teams.yaml").write_text(QUEUE_TREE)
    return root


# --------------------------------------------------------------------------------------------
# Regular files only


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    root = repo(tmp_path)
    os.mkfifo(root / "x.yaml")
    result = kai("validate", str(root))
    assert result.returncode == 1
    [line] = io_lines(result)
    assert f"{root / 'x.yaml'}:1:1: error: [io]" in line and "FIFO" in line


def test_a_fifo_given_by_name_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "x.yaml")
    result = kai("validate", str(tmp_path / "x.yaml"))
    assert result.returncode == 1 and "FIFO" in io_lines(result)[0]


def test_a_link_to_a_device_is_refused(tmp_path: Path) -> None:
    root = repo(tmp_path)
    os.symlink("/dev/zero", root / "zero.yaml")
    result = kai("validate", str(root))
    assert result.returncode == 1
    [line] = io_lines(result)
    assert str(root / "zero.yaml") in line
    # /dev is outside the root: refused as a link out of it, never opened.
    assert "outside" in line


def test_a_device_inside_the_root_is_refused(tmp_path: Path) -> None:
    from kai.api.untrusted_files import UntrustedFileError, read_untrusted

    with pytest.raises(UntrustedFileError, match="character device"):
        read_untrusted("/dev/zero", "/dev", 1024)


# --------------------------------------------------------------------------------------------
# Links stay inside the root


def test_a_link_to_a_secret_outside_the_root_is_named_never_printed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_text(f"token: {SECRET}\n  broken: [yaml\n")
    root = repo(tmp_path)
    os.symlink(secret, root / "leak.yaml")
    os.symlink(tmp_path, root / "up")  # a folder link out of the root
    for argv in (["validate", str(root)], ["validate", str(root / "leak.yaml")]):
        result = kai(*argv)
        assert result.returncode == 1, result
        assert SECRET not in result.stdout + result.stderr
        assert str(secret) not in result.stdout + result.stderr
        assert any(str(root / "leak.yaml") in line for line in io_lines(result))
    result = kai("validate", str(root), "-o", "json")
    assert SECRET not in result.stdout
    assert any(str(root / "up") in line for line in io_lines(kai("validate", str(root))))


def test_links_inside_the_root_are_followed(tmp_path: Path) -> None:
    root = repo(tmp_path)
    (root / "real").mkdir()
    (root / "real" / "t.yaml").write_text(
        QUEUE_TREE.replace("teams", "more").replace("research", "cv")
    )
    os.symlink(root / "real" / "t.yaml", root / "alias.yml")
    result = load_paths([str(root)])
    assert [p for p in result.problems if p.rule == "io"] == []


# --------------------------------------------------------------------------------------------
# Unreadable folders


def test_an_unreadable_folder_is_an_io_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = repo(tmp_path)
    locked = root / "locked"
    locked.mkdir()
    (locked / "q.yaml").write_text(QUEUE_TREE)
    real_scandir = os.scandir

    def scandir(path: str = ".") -> object:
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(locked))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    result = load_paths([str(root)])
    [problem] = [p for p in result.problems if p.rule == "io"]
    assert problem.file == str(locked) and "Permission denied" in problem.message


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder whatever its mode")
def test_an_unreadable_folder_fails_the_command(tmp_path: Path) -> None:
    root = repo(tmp_path)
    (root / "locked").mkdir()
    (root / "locked" / "q.yaml").write_text(QUEUE_TREE)
    os.chmod(root / "locked", 0)
    try:
        result = kai("validate", str(root))
    finally:
        os.chmod(root / "locked", 0o755)
    assert result.returncode == 1 and io_lines(result)


# --------------------------------------------------------------------------------------------
# Size limits


def test_a_file_above_the_default_size_limit_is_refused_unread(tmp_path: Path) -> None:
    root = repo(tmp_path)
    with open(root / "huge.yaml", "wb") as handle:
        handle.truncate(17 * 2**20)  # sparse: 17 MiB of NUL bytes, above the 16Mi default
    result = kai("validate", str(root))
    assert result.returncode == 1
    [line] = io_lines(result)
    assert str(root / "huge.yaml") in line and "--max-file-size" in line


def test_size_flags(tmp_path: Path) -> None:
    root = repo(tmp_path)
    for n in range(3):
        (root / f"z{n}.yaml").write_text(
            QUEUE_TREE.replace("teams", f"t{n}").replace("research", f"q{n}")
        )
    assert kai("validate", str(root)).returncode == 0
    small = kai("validate", str(root), "--max-file-size", "100")
    assert small.returncode == 1 and len(io_lines(small)) == 4
    total = kai("render", str(root), "--max-total-size", f"{2 * len(QUEUE_TREE) + 10}")
    assert total.returncode == 1
    refused = [line for line in total.stderr.splitlines() if "[io]" in line]
    assert len(refused) == 1 and "--max-total-size" in refused[0]
    assert kai("validate", str(root), "--max-total-size", "lots").returncode == 2


def test_standard_input_is_limited_too() -> None:
    result = kai("validate", "-", "--max-file-size", "1Ki", stdin=b"a: 1\n" * 1000)
    assert result.returncode == 1 and "<stdin>" in io_lines(result)[0]


# --------------------------------------------------------------------------------------------
# YAML aliases


def test_the_alias_bomb_stops_early(tmp_path: Path) -> None:
    assert len(BOMB) < 512
    (tmp_path / "bomb.yaml").write_text(BOMB)
    start = time.monotonic()
    result = kai("validate", str(tmp_path / "bomb.yaml"))
    assert result.returncode == 1, result.stderr
    assert "[yaml]" in result.stdout and "--max-yaml-aliases" in result.stdout
    assert time.monotonic() - start < TIMEOUT_S


def test_aliases_within_the_limit_are_fine() -> None:
    text = "a: &q {gpu: 1, cpu: '2'}\nb: *q\nc: *q\n"
    assert load_text(text).documents[0].data["c"] == {"gpu": 1, "cpu": "2"}
    from kai.api.untrusted_files import FileLimits

    [problem] = load_text(text, limits=FileLimits(max_alias_nodes=3)).problems
    assert problem.rule == "yaml" and problem.line == 1


# --------------------------------------------------------------------------------------------
# Linear time


def _long_scalar(size: int) -> bytes:
    return QUEUE_TREE.replace("spec:", f"  annotations:\n    x: {'x' * size}\nspec:").encode()


def test_a_long_scalar_loads_in_linear_time() -> None:
    timings = {}
    for size in (2**20, 16 * 10**6):
        text = _long_scalar(size)
        start = time.process_time()
        [document] = load_text(text).documents
        timings[size] = time.process_time() - start
        assert len(document.data["metadata"]["annotations"]["x"]) == size
    # 15x more text: quadratic loading would take ~230x longer; allow a noisy 40x.
    assert timings[16 * 10**6] < 40 * timings[2**20] + 1.0, timings


# --------------------------------------------------------------------------------------------
# Names, and the files render writes


@pytest.mark.parametrize(
    "document",
    [
        "apiVersion: gitops.kai.scheduler/v1alpha1\nkind: TopologyPolicy\nmetadata:\n"
        "  name: NAME\nspec:\n  levels:\n  - nodeLabel: kubernetes.io/hostname\n",
        "apiVersion: gitops.kai.scheduler/v1alpha1\nkind: SchedulerPolicy\nmetadata:\n"
        "  name: NAME\nspec:\n  nodePool: ''\n",
        QUEUE_TREE.replace("name: teams", "name: NAME"),
    ],
    ids=["TopologyPolicy", "SchedulerPolicy", "QueueTree"],
)
@pytest.mark.parametrize("name", ["x/../../../escaped", "'..'", "Upper", "a" * 254, "-a", "a..b"])
def test_names_follow_the_kubernetes_rules(tmp_path: Path, document: str, name: str) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "d.yaml").write_text(document.replace("NAME", name))
    result = kai("validate", str(root), "-o", "json")
    assert result.returncode == 1
    import json

    problems = json.loads(result.stdout)["problems"]
    assert any(
        p["rule"] in ("name", "schema") and p["path"] == "metadata.name" and p["line"] == 4
        for p in problems
    )
    out = tmp_path / "a" / "out"
    rendered = kai("render", str(root), "--out", str(out))
    assert rendered.returncode == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["d.yaml", "repo"]


def test_dotted_names_are_fine(check) -> None:  # type: ignore[no-untyped-def]
    problems = check(QUEUE_TREE.replace("name: teams", "name: team.a-1"))
    assert [p for p in problems if p.rule == "name"] == []


def test_render_writes_only_inside_out() -> None:
    from kai.commands.render import _confined

    assert _confined("queue-a.yaml")
    for name in ("../x.yaml", "a/b.yaml", "..", ".", "", "/etc/passwd", "a\x00b"):
        assert not _confined(name)


# --------------------------------------------------------------------------------------------
# Numbers


NUMBERS = """\
apiVersion: gitops.kai.scheduler/v1alpha1
kind: QueueTree
metadata:
  name: nums
spec:
  queues:
  - name: a
    priority: 100000000000000000000000000000000000000
    quota: {gpu: 1, cpu: "1e400", memory: 100000000Ei}
  - name: b
    priority: 2147483648
    quota: {gpu: 1, cpu: "9300000000000000", memory: 1Ei}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: c
spec:
  priority: 10
  resources:
    gpu: {quota: 1e300, overQuotaWeight: 1, limit: -1}
    cpu: {quota: 0, overQuotaWeight: 1, limit: 9223372036854775808}
    memory: {quota: 0, overQuotaWeight: 1, limit: -1}
"""


def test_numbers_are_range_checked_with_file_line_and_field(tmp_path: Path) -> None:
    (tmp_path / "n.yaml").write_text(NUMBERS)
    for command in ("validate", "render"):
        result = kai(command, str(tmp_path / "n.yaml"))
        assert result.returncode == 1, result.stderr  # a validation error, never a crash (3)
        lines = (result.stdout if command == "validate" else result.stderr).splitlines()
        found = {
            (line.split(":")[1], line.split("] ")[1].split(": ")[0])
            for line in lines
            if "[values]" in line
        }
        assert found == {
            ("8", "QueueTree/nums queues[0].priority"),
            ("9", "QueueTree/nums queues[0].quota.cpu"),
            ("9", "QueueTree/nums queues[0].quota.memory"),
            ("11", "QueueTree/nums queues[1].priority"),
            ("12", "QueueTree/nums queues[1].quota.cpu"),
            ("21", "Queue/c resources.gpu.quota"),
            ("22", "Queue/c resources.cpu.limit"),
        }, lines


def test_numbers_at_the_limits_pass(check) -> None:  # type: ignore[no-untyped-def]
    text = NUMBERS.split("---")[0]
    text = text.replace("100000000000000000000000000000000000000", "2147483647")
    text = text.replace('"1e400"', '"9223372036854775m"').replace("100000000Ei", "7Ei")
    text = text.replace("2147483648", "-2147483648").replace("9300000000000000", "1e15")
    assert [p for p in check(text) if p.rule == "values"] == []


# --------------------------------------------------------------------------------------------
# kai simulate reads its scenario file the same way


def test_simulate_refuses_what_validate_refuses(tmp_path: Path) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_text(f"token: {SECRET}\n")
    folder = tmp_path / "scenarios"
    folder.mkdir()
    os.symlink(secret, folder / "leak.yaml")
    os.mkfifo(folder / "fifo.yaml")
    (folder / "bomb.yaml").write_text(BOMB)
    with open(folder / "huge.yaml", "wb") as handle:
        handle.truncate(17 * 2**20)
    expected = {
        "leak.yaml": "outside",
        "fifo.yaml": "FIFO",
        "bomb.yaml": "--max-yaml-aliases",
        "huge.yaml": "--max-file-size",
    }
    for name, words in expected.items():
        result = kai("simulate", str(folder / name))
        assert result.returncode == 2, (name, result.stderr)
        assert result.stderr.startswith(f"{folder / name}:"), result.stderr
        assert words in result.stderr and SECRET not in result.stderr + result.stdout
    assert kai("simulate", str(folder / "huge.yaml"), "--max-file-size", "1Gi").returncode == 2

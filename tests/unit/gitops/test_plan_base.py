"""``kai plan --base REF`` on pull requests that try to lie about the base.

REF is only ever a git revision (a folder named like it changes nothing, a ref that looks like
an option is refused and creates nothing) and the base's files are read from git under the
working tree's limits, streamed: a huge file in the base is a clear error, quickly, in little
memory. The commands run in a child process with capped memory and a timeout."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.capped import Capped, run_kai

MEMORY_CAP = 1024 * 2**20
TIMEOUT_S = 60

TREE = """\
apiVersion: gitops.kai.scheduler/v1alpha1
kind: QueueTree
metadata:
  name: teams
spec:
  queues:
  - name: research
    quota: {gpu: 8}
  - name: product
    quota: {gpu: 4}
"""


def kai(*argv: str, cwd: Path) -> Capped:
    """``kai ARGV`` in a capped child (:mod:`helpers.capped`)."""
    return run_kai(*argv, memory_cap=MEMORY_CAP, timeout=TIMEOUT_S, cwd=cwd, text=True)


def git(repo: Path, *argv: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *argv],
        check=True,
        capture_output=True,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose ``main`` has two queues in ``gitops/teams.yaml``."""
    root = tmp_path / "repo"
    (root / "gitops").mkdir(parents=True)
    (root / "gitops" / "teams.yaml").write_text(TREE)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "base")
    return root


def _plan(repo: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return kai("plan", "gitops", "-o", "json", *argv, cwd=repo).done


def _actions(out: str) -> dict[str, str]:
    return {q["name"]: q["action"] for q in json.loads(out)["queues"]}


def test_a_folder_named_like_the_ref_does_not_change_the_plan(repo: Path) -> None:
    # The pull request deletes "product" and adds a folder "main" holding the new file.
    (repo / "gitops" / "teams.yaml").write_text(TREE.split("  - name: product")[0])
    (repo / "main").mkdir()
    shutil.copy(repo / "gitops" / "teams.yaml", repo / "main" / "teams.yaml")
    done = _plan(repo, "--base", "main")
    assert done.returncode == 0, done.stderr
    assert _actions(done.stdout)["product"] == "removed"


@pytest.mark.parametrize("ref", ["--output=/tmp/kai-plan-x", "-o/tmp/kai-plan-x", "--all"])
def test_a_ref_that_looks_like_an_option_is_refused_and_creates_nothing(
    repo: Path, tmp_path: Path, ref: str
) -> None:
    target = tmp_path / "created"
    done = _plan(repo, f"--base={ref.replace('/tmp/kai-plan-x', str(target))}")
    assert done.returncode == 2
    assert "is not a commit of the repository" in done.stderr
    assert not target.exists()
    assert not Path("/tmp/kai-plan-x").exists()


def test_a_path_is_not_a_ref(repo: Path) -> None:
    done = _plan(repo, "--base", "gitops")
    assert done.returncode == 2
    assert "--base gitops: is not a commit" in done.stderr


def test_the_base_is_read_from_the_ref_and_unchanged_is_unchanged(repo: Path) -> None:
    done = _plan(repo, "--base", "main")
    assert done.returncode == 0, done.stderr
    assert set(_actions(done.stdout).values()) == {"unchanged"}
    git(repo, "tag", "v1")
    (repo / "gitops" / "teams.yaml").write_text(TREE.replace("gpu: 4", "gpu: 2"))
    done = _plan(repo, "--base", "v1~0")
    assert _actions(done.stdout)["product"] == "changed"


def test_a_new_path_has_an_empty_base(repo: Path) -> None:
    (repo / "more").mkdir()
    (repo / "more" / "teams.yaml").write_text(TREE)
    done = kai("plan", "more", "-o", "json", "--base", "main", cwd=repo).done
    assert done.returncode == 0, done.stderr
    assert set(_actions(done.stdout).values()) == {"added"}


def test_a_huge_file_in_the_base_is_a_limit_error_quickly_and_in_little_memory(
    repo: Path,
) -> None:
    big = repo / "gitops" / "big.yaml"
    with big.open("wb") as out:
        out.write(b"a: ")
        chunk = b"x" * 2**20
        for _ in range(100):  # 100 MiB: read whole, it alone would pass the RSS bound below
            out.write(chunk)
        out.write(b"\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "big")
    big.unlink()
    run = kai("plan", "gitops", "-o", "json", "--base", "main", cwd=repo)
    done = run.done
    assert done.returncode == 1, done.stderr
    assert "main:gitops/big.yaml" in done.stdout
    assert "more than the 16777216 allowed per file (--max-file-size)" in done.stdout
    assert run.seconds < 10
    # kai itself never holds the file (read whole, it alone would pass this bound); the git
    # processes it runs are held to the bound
    peaks = (run.own_peak, run.children_peak)
    assert run.own_peak < 150 * 2**20, peaks
    assert run.peak < 500 * 10**6, peaks


def test_the_base_is_held_to_the_total_size(repo: Path) -> None:
    for number in range(3):
        (repo / "gitops" / f"more{number}.yaml").write_text(
            TREE.replace("name: teams", f"name: teams{number}").replace("research", f"r{number}")
        )
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "more")
    done = _plan(repo, "--base", "main", "--max-total-size", "500")
    assert done.returncode == 1
    assert "(--max-total-size)" in done.stdout


def test_hidden_folders_and_other_suffixes_of_the_base_are_skipped(repo: Path) -> None:
    (repo / "gitops" / ".hidden").mkdir()
    (repo / "gitops" / ".hidden" / "x.yaml").write_text("not: [valid")
    (repo / "gitops" / "notes.txt").write_text("not: [valid")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "more")
    done = _plan(repo, "--base", "main")
    assert done.returncode == 0, done.stdout + done.stderr


def test_base_dir_compares_with_a_folder(repo: Path) -> None:
    (repo / "old").mkdir()
    (repo / "old" / "teams.yaml").write_text(TREE.replace("gpu: 4", "gpu: 1"))
    done = _plan(repo, "--base-dir", "old")
    assert done.returncode == 0, done.stderr
    assert _actions(done.stdout)["product"] == "changed"


def test_a_link_in_the_base_is_refused_never_followed(repo: Path) -> None:
    (repo / "gitops" / "secret.yaml").symlink_to("/etc/passwd")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "link")
    (repo / "gitops" / "secret.yaml").unlink()
    done = _plan(repo, "--base", "main")
    assert done.returncode == 1
    assert "main:gitops/secret.yaml:1:1: error: [io]" in done.stdout
    assert "symbolic link" in done.stdout and "root:" not in done.stdout

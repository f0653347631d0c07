"""Reading the files of a git revision that come from someone else (``kai plan --base REF``).

A pull request controls its working tree, so nothing of the revision it is compared with may
be looked up there: REF is only ever a git revision, checked with
``git rev-parse --verify --end-of-options REF^{commit}`` (a folder named like the ref, or a ref
that looks like an option, changes nothing). The tree is listed with ``git ls-tree --long``,
which gives every file's size before any content is read, so the limits of the working tree
(``--max-file-size`` per file, ``--max-total-size`` in all) are applied before reading; the
files that pass are then streamed one at a time through ``git cat-file --batch``. No git
filter, attribute or hook runs, and no file is written to disk.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from kai.api.untrusted_files import FileLimits

__all__ = ["GitBlob", "GitRefError", "GitRefused", "GitTree", "read_git_tree", "resolve_commit"]

_GIT_TIMEOUT_S = 60
_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY")


class GitRefError(Exception):
    """The repository or the revision cannot be used; the message says which and why."""


@dataclass(frozen=True)
class GitBlob:
    """One file of the revision: its path relative to the repository root and its content."""

    path: str
    data: bytes


@dataclass(frozen=True)
class GitRefused:
    """One file of the revision that was not read, and why (an ``io`` problem)."""

    path: str
    reason: str


@dataclass(frozen=True)
class GitTree:
    root: str  # the repository's top-level folder
    commit: str  # the full object name REF resolved to
    rel: str  # the path asked for, relative to ``root`` ("." for all)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _ENV_DROP}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_OPTIONAL_LOCKS"] = "0"
    return env


def _git(cwd: str, *argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "--literal-pathspecs", "-C", cwd, *argv],
        capture_output=True,
        check=False,
        timeout=_GIT_TIMEOUT_S,
        env=_env(),
        stdin=subprocess.DEVNULL,
    )


def resolve_commit(path: str, ref: str) -> GitTree:
    """The repository holding ``path`` and the commit ``ref`` names there.

    Raises :class:`GitRefError` when ``path`` is in no repository or ``ref`` is no commit."""
    where = path if os.path.isdir(path) else os.path.dirname(path) or "."
    top = _git(where, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise GitRefError(f"{path} is not in a git repository, so no git revision can be read")
    root = os.fsdecode(top.stdout.rstrip(b"\n"))
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    if rel == ".." or rel.startswith(".." + os.sep):
        raise GitRefError(f"{path} is outside the git repository at {root}")
    if not ref or "\x00" in ref:
        raise GitRefError("an empty git revision")
    verified = _git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", ref + "^{commit}")
    commit = verified.stdout.decode("ascii", "replace").strip()
    if verified.returncode != 0 or not commit:
        raise GitRefError(
            "is not a commit of the repository at "
            f"{root} (a branch, tag or commit name is expected, such as origin/main)"
        )
    return GitTree(root, commit, rel)


def _hidden(rel_parts: list[str]) -> bool:
    return any(part.startswith(".") for part in rel_parts)


def read_git_tree(
    tree: GitTree, limits: FileLimits, suffixes: tuple[str, ...], *, single_file: bool
) -> Iterator[GitBlob | GitRefused]:
    """The files under ``tree.rel`` at ``tree.commit``, within ``limits``, in path order.

    As in a folder of the working tree, only names ending in ``suffixes`` are read and names
    starting with ``.`` are skipped below ``tree.rel`` (``single_file``: the one file asked for
    is read whatever its name). A file over ``--max-file-size`` or a link is refused; once the
    files together pass ``--max-total-size`` that file and the rest are refused in one item."""
    wanted: list[tuple[str, str, int]] = []
    refused: list[GitRefused] = []
    prefix = "" if tree.rel == "." else tree.rel.rstrip(os.sep) + "/"
    for entry in _ls_tree(tree):
        head, _, raw_path = entry.partition(b"\t")
        path = os.fsdecode(raw_path)
        mode, kind, oid, size_text = head.decode("ascii", "replace").split()
        below = path[len(prefix) :] if path.startswith(prefix) else path
        if not single_file and (_hidden(below.split("/")) or not path.endswith(suffixes)):
            continue
        if kind != "blob":
            continue  # a submodule: not part of this repository's files
        if mode == "120000":
            refused.append(GitRefused(path, "is a symbolic link in the git revision; not read"))
            continue
        wanted.append((path, oid, int(size_text)))
    yield from refused
    left = limits.max_total_bytes
    accepted: list[tuple[str, str, int]] = []
    for number, (path, oid, size) in enumerate(wanted):
        if size > limits.max_file_bytes:
            yield GitRefused(
                path,
                f"{path} is {size} bytes, more than the {limits.max_file_bytes} allowed per "
                "file (--max-file-size); it was not read",
            )
            continue
        if size > left:
            rest = len(wanted) - number - 1
            yield GitRefused(
                path,
                f"the files read so far and {path} hold more than the {limits.max_total_bytes} "
                f"bytes allowed in all (--max-total-size); it and the {rest} file(s) after it "
                "were not read",
            )
            break
        left -= size
        accepted.append((path, oid, size))
    if accepted:
        yield from _cat(tree.root, accepted)


def _ls_tree(tree: GitTree) -> Iterator[bytes]:
    """The entries of ``git ls-tree -r --long`` under ``tree.rel``, read as they come (a tree
    of a million files is never held as one output)."""
    pathspec = [] if tree.rel == "." else ["--", tree.rel]
    argv = ["git", "--literal-pathspecs", "-C", tree.root, "ls-tree", "-r", "-z", "--long"]
    process = subprocess.Popen(
        [*argv, "--full-tree", tree.commit, *pathspec],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=_env(),
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        rest = b""
        while chunk := process.stdout.read(1 << 16):
            *entries, rest = (rest + chunk).split(b"\x00")
            yield from (entry for entry in entries if entry)
        if rest:
            yield rest
        error = process.stderr.read(4096)
    finally:
        process.stdout.close()
        try:
            code = process.wait(timeout=_GIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        process.stderr.close()
    if code != 0:
        message = error.decode(errors="replace").strip().splitlines()
        raise GitRefError(message[-1] if message else "git ls-tree failed")


def _cat(root: str, files: list[tuple[str, str, int]]) -> Iterator[GitBlob]:
    """The contents of ``files`` (already within the limits), one at a time."""
    process = subprocess.Popen(
        ["git", "-C", root, "cat-file", "--batch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_env(),
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        for path, oid, size in files:
            process.stdin.write(oid.encode("ascii") + b"\n")
            process.stdin.flush()
            header = process.stdout.readline(200).split()
            if len(header) != 3 or header[1] != b"blob" or int(header[2]) != size:
                raise GitRefError(f"git cat-file gave an unexpected answer for {path}")
            data = process.stdout.read(size)
            process.stdout.read(1)  # the newline after each object
            if len(data) != size:
                raise GitRefError(f"git cat-file ended while reading {path}")
            yield GitBlob(path, data)
    finally:
        process.stdin.close()
        process.stdout.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

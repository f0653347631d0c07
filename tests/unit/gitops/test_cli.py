"""``kai validate`` and ``kai render`` end to end: output formats, exit codes, examples."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest

from kai.cli import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "gitops"
BROKEN = ROOT / "examples" / "gitops-broken"
KAI_REFERENCE = ROOT.parent / "shared" / "kai-reference"

TREE = """\
apiVersion: gitops.kai.scheduler/v1alpha1
kind: QueueTree
metadata:
  name: research
spec:
  queues:
  - name: research
    quota: {gpu: 64}
    children:
    - name: cv
      quota: {gpu: 8}
    - name: nlp
      quota: {gpu: 16}
      limit: {gpu: 8}
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


def test_text_output_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "queues/research.yaml", TREE)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "validate")
    assert code == 1
    assert out == (
        "queues/research.yaml:14:20: error: [limit-below-quota] QueueTree/research "
        "queues[0].children[1] (nlp) limit.gpu: limit 8 is below quota 16\n"
    )
    assert "1 error" in err


def test_json_output_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "r.yaml", TREE)
    code, out, err = run(capsys, "validate", path, "--output", "json")
    assert code == 1 and err == ""
    body = json.loads(out)
    assert body == {
        "ok": False,
        "documents": 1,
        "problems": [
            {
                "file": path,
                "line": 14,
                "column": 20,
                "severity": "error",
                "rule": "limit-below-quota",
                "object": "QueueTree/research",
                "path": "queues[0].children[1] (nlp) limit.gpu",
                "message": "limit 8 is below quota 16",
            }
        ],
    }


def test_file_level_problem_in_json_has_null_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "e.yaml", "")
    code, out, _ = run(capsys, "validate", path, "-o", "json")
    assert code == 1
    [problem] = json.loads(out)["problems"]
    assert (problem["rule"], problem["object"], problem["path"], problem["line"]) == (
        "yaml",
        None,
        None,
        1,
    )


def test_clean_input_exit_0_and_no_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "r.yaml", TREE.replace("limit: {gpu: 8}", "limit: {gpu: 16}"))
    code, out, err = run(capsys, "validate", path)
    assert (code, out) == (0, "")
    assert "0 errors" in err


def test_warnings_and_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = TREE.replace("quota: {gpu: 64}", "quota: {gpu: 64}\n    limit: {gpu: 64}").replace(
        "limit: {gpu: 8}", "limit: {gpu: 99}"
    )
    path = write(tmp_path, "r.yaml", text)
    code, out, _ = run(capsys, "validate", path)
    assert code == 0 and ": warning: [child-limit-over-parent-limit]" in out
    code, out, _ = run(capsys, "validate", path, "--strict")
    assert code == 1 and ": error: [child-limit-over-parent-limit]" in out


def test_capacity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "r.yaml", TREE.replace("limit: {gpu: 8}", "limit: {gpu: 16}"))
    cap = write(tmp_path, "cap.yaml", "{gpu: 32, cpu: '4096', memory: 32Ti}\n")
    code, out, _ = run(capsys, "validate", path, "--capacity", cap)
    assert code == 0 and "[over-capacity]" in out and "more than the cluster's capacity 32" in out
    bad = write(tmp_path, "bad-cap.yaml", "gpu: lots\n")
    code, out, err = run(capsys, "validate", path, "--capacity", bad)
    assert code == 2 and out == "" and "bad-cap.yaml:1:6" in err
    code, _, err = run(capsys, "validate", path, "--capacity", str(tmp_path / "missing.yaml"))
    assert code == 2


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "validate", str(tmp_path / "nope"))
    assert code == 2 and out == "" and "no such file" in err
    (tmp_path / "empty").mkdir()
    code, _, err = run(capsys, "validate", str(tmp_path / "empty"))
    assert code == 2 and "no YAML files" in err
    code, _, _ = run(capsys, "validate", "--output", "xml")
    assert code == 2


def test_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(TREE.encode())))
    code, out, _ = run(capsys, "validate", "-")
    assert code == 1 and out.startswith("<stdin>:14:20: error: [limit-below-quota]")


def test_internal_error_is_exit_3_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import kai.gitops.validate as engine

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(engine, "validate_paths", broken)
    code, out, err = run(capsys, "validate", write(tmp_path, "r.yaml", TREE))
    assert code == 3 and out == "" and "internal error" in err and "Traceback" not in err


def test_bad_inputs_never_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = {
        "tabs.yaml": "a:\n\tb: 1\n",
        "binary.yaml": b"\x00\x01\x02",
        "latin1.yaml": b"name: caf\xe9\n",
        "empty.yaml": "",
        "list.yaml": "- 1\n",
        "scalar.yaml": "42\n",
        "deep.yaml": "a: " + "[" * 300 + "]" * 300 + "\n",
        "alias.yaml": "a: &x [1]\nb: *x\n",
        "weird.yaml": (
            "apiVersion: gitops.kai.scheduler/v1alpha1\nkind: QueueTree\n"
            "metadata: {name: 5}\nspec: 7\n"
        ),
        "keys.yaml": "? [a, b]\n: 1\n",
    }
    for name, text in inputs.items():
        write(tmp_path, name, text)
    code, out, err = run(capsys, "validate", str(tmp_path))
    assert code == 1 and "Traceback" not in out + err
    reported = {Path(line.split(":")[0]).name for line in out.splitlines()}
    assert reported >= {
        "tabs.yaml",
        "binary.yaml",
        "latin1.yaml",
        "empty.yaml",
        "list.yaml",
        "scalar.yaml",
        "weird.yaml",
    }


# the example repositories ------------------------------------------------------------------


def test_example_repository_is_clean(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", str(EXAMPLES))
    assert (code, out) == (0, "")
    code, out, _ = run(
        capsys,
        "validate",
        str(EXAMPLES),
        "--strict",
        "--capacity",
        str(EXAMPLES / ".kai" / "capacity.yaml"),
    )
    assert (code, out) == (0, "")


def _expectations(root: Path) -> set[tuple[str, int, str]]:
    expected = set()
    for path in sorted(root.rglob("*.y*ml")):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            match = re.search(r"# expect: ([a-z-]+(?:, *[a-z-]+)*)", line)
            if match:
                for rule in match[1].split(","):
                    expected.add((os.path.normpath(str(path)), number, rule.strip()))
    return expected


def test_broken_repository_reports_exactly_the_planted_problems(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "validate", str(BROKEN), "-o", "json")
    assert code == 1
    reported = {(p["file"], p["line"], p["rule"]) for p in json.loads(out)["problems"]}
    expected = _expectations(BROKEN)
    assert reported == expected
    rules = {rule for _, _, rule in expected}
    # The broken repository covers every rule except the ones that need a flag or a broken disk.
    from kai.gitops.problems import RULE_IDS

    assert rules == set(RULE_IDS) - {"over-capacity", "io"}


@pytest.mark.skipif(not KAI_REFERENCE.is_dir(), reason="../shared/kai-reference is not present")
def test_kai_queue_files_are_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    files = [
        path
        for path in sorted(KAI_REFERENCE.rglob("*.yaml"))
        if re.search(r"^kind: Queue$", path.read_text(errors="replace"), re.M)
    ]
    names = {str(p.relative_to(KAI_REFERENCE)) for p in files}
    assert {
        "docs/quickstart/default-queues.yaml",
        "docs/priority/example/limited-queue.yaml",
    } <= names
    for path in files:
        code, out, _ = run(capsys, "validate", "--strict", str(path))
        assert (code, out) == (0, ""), path
        code, out, _ = run(capsys, "render", str(path))
        assert code == 0 and "kind: Queue" in out


# render ------------------------------------------------------------------------------------


def test_render_refuses_on_errors_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, "render", str(BROKEN), "--out", str(out_dir))
    assert code == 1 and out == "" and not out_dir.exists()
    assert "nothing rendered" in err


def test_render_is_deterministic_and_matches_out_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, first, _ = run(capsys, "render", str(EXAMPLES))
    assert code == 0
    monkeypatch.chdir(EXAMPLES)
    code, second, _ = run(capsys, "render")
    assert code == 0 and first == second
    code, _, _ = run(capsys, "render", str(EXAMPLES), "--out", str(tmp_path / "out"))
    assert code == 0
    files = sorted(os.listdir(tmp_path / "out"))
    assert "queue-nlp.yaml" in files and "topology-datacenter.yaml" in files
    assert "configmap-kai-scheduler-config.yaml" in files
    joined = "".join("---\n" + (tmp_path / "out" / name).read_text() for name in files)
    assert sorted(joined.split("---\n")) == sorted(first.split("---\n"))
    # 13 team queues + 3 departments + 2 inner + the raw default-queue, a Topology, the ConfigMap
    assert first.count("\nkind: Queue\n") == 17


def test_render_out_new_directory_is_renamed_into_place_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new --out is written as a staging directory and renamed into place: the result has
    the permissions os.makedirs gives, no staging directory is left, and when a write fails
    half-way --out does not exist at all (never half-written). An existing --out is updated
    file by file."""
    from kai.commands import render

    out = tmp_path / "new" / "out"
    code, _, _ = run(capsys, "render", str(EXAMPLES), "--out", str(out))
    assert code == 0
    assert os.listdir(tmp_path / "new") == ["out"]
    umask = os.umask(0)
    os.umask(umask)
    assert (out.stat().st_mode & 0o777) == 0o777 & ~umask
    written = sorted(os.listdir(out))
    assert "queue-nlp.yaml" in written
    # an existing --out: files replaced in place, the directory kept
    (out / "queue-nlp.yaml").write_text("stale\n")
    inode = out.stat().st_ino
    code, _, _ = run(capsys, "render", str(EXAMPLES), "--out", str(out))
    assert code == 0 and out.stat().st_ino == inode
    assert (out / "queue-nlp.yaml").read_text() != "stale\n"
    assert sorted(os.listdir(out)) == written
    # a failure half-way through a new --out leaves nothing behind
    real_write = render._write_one
    calls = []

    def failing(dir_fd: int, name: str, data: bytes, replace: bool) -> None:
        calls.append(name)  # in the writer process (forked after the patch)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        real_write(dir_fd, name, data, replace)

    monkeypatch.setattr(render, "_write_one", failing)
    other = tmp_path / "other"
    code, _, err = run(capsys, "render", str(EXAMPLES), "--out", str(other))
    assert code == 2 and "No space left on device" in err
    assert not other.exists() and os.listdir(tmp_path) == ["new"]


@pytest.mark.parametrize("mode", ["one-record-batches", "no-fork"])
def test_render_out_same_files_however_written(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    """The files are the same (names, bytes, permissions) whether the writer process gets each
    record in its own write to the pipe or this process writes them itself (no os.fork)."""
    from kai.commands import render

    def files(directory: Path) -> dict[str, tuple[bytes, int]]:
        return {p.name: (p.read_bytes(), p.stat().st_mode) for p in directory.iterdir()}

    code, _, _ = run(capsys, "render", str(EXAMPLES), "--out", str(tmp_path / "usual"))
    assert code == 0
    if mode == "no-fork":
        monkeypatch.delattr(os, "fork")
    else:
        monkeypatch.setattr(render, "_BATCH_BYTES", 1)
    code, _, err = run(capsys, "render", str(EXAMPLES), "--out", str(tmp_path / "other"))
    assert code == 0, err
    assert files(tmp_path / "other") == files(tmp_path / "usual")
    assert len(files(tmp_path / "usual")) > 10
    # and into an existing directory (through NAME.tmp renamed over NAME): no .tmp left
    code, _, err = run(capsys, "render", str(EXAMPLES), "--out", str(tmp_path / "other"))
    assert code == 0, err
    assert files(tmp_path / "other") == files(tmp_path / "usual")


def test_render_out_writer_process_killed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer process dying without a word is an error (exit 2), never a partial --out."""
    from kai.commands import render

    def dying(dir_fd: int, name: str, data: bytes, replace: bool) -> None:
        os.kill(os.getpid(), signal.SIGKILL)  # in the writer process

    monkeypatch.setattr(render, "_write_one", dying)
    monkeypatch.setattr(render, "_BATCH_BYTES", 1)
    code, _, err = run(capsys, "render", str(EXAMPLES), "--out", str(tmp_path / "out"))
    assert code == 2 and "writer process ended unexpectedly" in err
    assert os.listdir(tmp_path) == []

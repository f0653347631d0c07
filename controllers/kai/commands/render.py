"""``kai render``: compile GitOps documents into KAI objects (Queues, Topologies, ConfigMap)."""

from __future__ import annotations

import argparse
import contextlib
import errno
import gc
import os
import shutil
import signal
import struct
import sys
from collections.abc import Iterable
from typing import Any, NoReturn

from kai.commands._limits import add_limit_options, limits_from
from kai.commands._output import add_output_option, to_json

HELP = "compile GitOps documents into KAI objects (Queues, Topologies, ConfigMap)"

EPILOG = """\
Validates first (the same checks as `kai validate`) and refuses to render when there is an
error; problems go to standard error. Output: a multi-document YAML stream on standard output
(-o yaml), a Kubernetes List (-o json), a table of the objects (-o text), or one file per object
(<kind>-<name>.yaml or .json) under --out DIR. Exit status: 0 rendered, 1 validation errors
(nothing written), 2 bad usage or unreadable path, 3 internal error."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="files or directories; '-' reads standard input (default: the current directory)",
    )
    add_output_option(
        parser,
        default="yaml",
        help="yaml: the objects as a YAML stream; json: a v1 List of them; text: a table of "
        "their kinds and names",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="write one file per object into DIR (default: write to standard output)",
    )
    add_limit_options(parser)


def run(args: argparse.Namespace) -> int:
    from kai.commands._console import style_for
    from kai.gitops.compile import compile_documents, iter_compiled
    from kai.gitops.loader import UsageError
    from kai.gitops.problems import printable
    from kai.gitops.validate import validate_paths

    if args.out is not None and args.output == "text":
        print("kai render: error: --out writes yaml or json files, not text", file=sys.stderr)
        return 2
    try:
        report = validate_paths(args.paths or ["."], limits=limits_from(args))
    except UsageError as exc:
        print(f"kai render: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    style = style_for(sys.stderr, args.color)
    for problem in report.problems:
        print(style.problem(problem), file=sys.stderr)
    if not report.ok:
        print(
            f"kai render: {len(report.errors)} validation error(s); nothing rendered",
            file=sys.stderr,
        )
        return 1
    if args.out is None:
        sys.stdout.write(_stream(compile_documents(report.documents), args.output, args.color))
        return 0
    # One object at a time: 100,000 Queues never sit in memory together.
    return _write_files(iter_compiled(report.documents), args.out, args.output)


def _stream(objects: list[dict[str, Any]], output: str, colour: str) -> str:
    from kai.gitops.compile import dump_objects

    if output == "yaml":
        return dump_objects(objects)
    if output == "json":
        return to_json({"apiVersion": "v1", "kind": "List", "items": objects})
    from kai.commands._console import style_for, table

    rows = [
        [str(o["kind"]), str(o["metadata"].get("namespace") or "-"), str(o["metadata"]["name"])]
        for o in objects
    ]
    lines = table(["KIND", "NAMESPACE", "NAME"], rows, style_for(sys.stdout, colour))
    return "".join(line + "\n" for line in lines)


def _write_files(objects: Iterable[dict[str, Any]], out: str, output: str) -> int:
    """Write each object to its own file in ``out``. A new ``out`` is built as a staging
    directory beside it and renamed into place at the end (files created directly: a crash
    leaves ``out`` absent, never half-written); an existing one gets each file through a
    temporary name renamed over the old file. The files are created by a second process
    (:class:`_FileWriter`) while this one compiles and formats the next objects."""
    import tempfile

    from kai.gitops.compile import dump_object, object_file_name

    if os.path.exists(out) and not os.path.isdir(out):
        print(f"kai render: error: {out} exists and is not a directory", file=sys.stderr)
        return 2
    staging: str | None = None
    try:
        if not os.path.lexists(out):
            parent = os.path.dirname(os.path.abspath(out))
            os.makedirs(parent, exist_ok=True)
            staging = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.rendering-", dir=parent)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(staging, 0o777 & ~umask)  # as os.makedirs would have made it
            directory = staging
        else:
            directory = os.path.realpath(out)
        with _FileWriter(directory, replace=staging is None) as writer:
            for obj in objects:
                if output == "json":
                    name = object_file_name(obj).removesuffix(".yaml") + ".json"
                    text = to_json(obj)
                else:
                    name, text = object_file_name(obj), dump_object(obj)
                if not _confined(name):
                    print(
                        f"kai render: error: refusing to write {name!r}: the path leaves {out}",
                        file=sys.stderr,
                    )
                    writer.abandon()
                    _discard(staging)
                    return 3
                writer.add(name, text.encode("utf-8"))
            written = writer.finish()
        if staging is not None:
            os.rename(staging, out)  # fails if another process made a non-empty out meanwhile
            staging = None
    except OSError as exc:
        _discard(staging)
        print(f"kai render: error: cannot write to {out}: {exc.strerror}", file=sys.stderr)
        return 2
    except BaseException:  # Ctrl-C, an internal error: no half-written staging left behind
        _discard(staging)
        raise
    print(f"kai render: wrote {written} files to {out}", file=sys.stderr)
    return 0


_BATCH_BYTES = 1 << 18  # what is sent to the writer process in one write to the pipe
_RECORD = struct.Struct("<II")  # the lengths of a file's name and of its content


class _FileWriter:
    """Creates the rendered files in ``directory``, in a forked process where ``os.fork``
    exists (creating 100,000 files is mostly kernel time, which then runs on another core
    while this process formats the next objects), else in this process.

    The files are sent as (name, content) records over a pipe in batches of about 256 KB;
    the writer opens each name relative to a descriptor of ``directory`` (no path resolution
    per file) with ``O_NOFOLLOW`` (a link planted at the name is refused, never written
    through): in a new staging directory with ``O_EXCL`` and written in place; in an
    existing ``--out`` through ``NAME.tmp`` renamed over ``NAME``. No file is fsynced: the
    output is as durable as any other file written without fsync (a crash may lose what the
    page cache held; rerun ``kai render``). The writer stops at its first error and
    reports it (errno and file name) when :meth:`finish` is called."""

    def __init__(self, directory: str, *, replace: bool) -> None:
        self.replace = replace
        self.dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.batch: list[bytes] = []
        self.batch_bytes = 0
        self.count = 0
        self.pid = 0
        self.pipe = self.results = -1
        if hasattr(os, "fork"):
            records_r, records_w = os.pipe()
            results_r, results_w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the writer process
                _writer_process(records_r, results_w, records_w, results_r, self)
            os.close(records_r)
            os.close(results_w)
            self.pid, self.pipe, self.results = pid, records_w, results_r

    def __enter__(self) -> _FileWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abandon()

    def add(self, name: str, data: bytes) -> None:
        self.count += 1
        if not self.pid:
            _write_one(self.dir_fd, name, data, replace=self.replace)
            return
        encoded = name.encode("utf-8")
        self.batch += (_RECORD.pack(len(encoded), len(data)), encoded, data)
        self.batch_bytes += len(encoded) + len(data)
        if self.batch_bytes >= _BATCH_BYTES:
            self._send()

    def _send(self) -> None:
        view = memoryview(b"".join(self.batch))
        self.batch.clear()
        self.batch_bytes = 0
        try:
            while view:
                view = view[os.write(self.pipe, view) :]
        except BrokenPipeError:
            self._result()  # the writer stopped: its error, else this one
            raise

    def finish(self) -> int:
        """Waits for every file to be written; the number of files, or the writer's
        OSError."""
        if self.pid:
            if self.batch:
                self._send()
            os.close(self.pipe)
            self.pipe = -1
            self._result()
        return self.count

    def _result(self) -> None:
        chunks = []
        while chunk := os.read(self.results, 65536):
            chunks.append(chunk)
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        report = b"".join(chunks).decode("utf-8", "replace")
        if report.startswith("error "):
            number, _, name = report[len("error ") :].partition(" ")
            raise OSError(int(number), os.strerror(int(number)), name)
        if report != "ok" or os.waitstatus_to_exitcode(status) != 0:
            raise OSError(errno.EIO, "the file writer process ended unexpectedly")

    def abandon(self) -> None:
        """Stops the writer (if still running) and releases the descriptors."""
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = 0
        for fd in (self.pipe, self.results, self.dir_fd):
            if fd >= 0:
                os.close(fd)
        self.pipe = self.results = self.dir_fd = -1


def _writer_process(
    records: int, results: int, other_w: int, other_r: int, writer: _FileWriter
) -> NoReturn:
    """The forked writer: reads records until end of file, writes each file; reports "ok" or
    "error ERRNO NAME" on ``results``. Never returns (``os._exit``)."""
    status = 1
    try:
        gc.disable()  # the parent's heap stays shared, untouched by collections
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.close(other_w)
        os.close(other_r)
        failure: OSError | None = None
        failed_name = ""
        pending = bytearray()
        dir_fd, replace, header = writer.dir_fd, writer.replace, _RECORD.size
        while chunk := os.read(records, 1 << 20):
            if failure is not None:
                continue  # drain: the parent learns of the error when it finishes
            pending += chunk
            at = 0
            size = len(pending)
            while size - at >= header:
                name_length, data_length = _RECORD.unpack_from(pending, at)
                end = at + header + name_length + data_length
                if end > size:
                    break
                name = pending[at + header : at + header + name_length].decode("utf-8")
                try:
                    _write_one(dir_fd, name, pending[at + header + name_length : end], replace)
                except OSError as exc:
                    failure, failed_name = exc, name
                    break
                at = end
            del pending[:at]
        if failure is not None:
            report = f"error {failure.errno or errno.EIO} {failed_name}"
        else:
            report = "ok"
        os.write(results, report.encode("utf-8"))
        status = 0
    finally:
        os._exit(status)


def _write_one(dir_fd: int, name: str, data: bytes | bytearray, replace: bool) -> None:
    """``data`` into ``name`` in the directory ``dir_fd``: created with ``O_EXCL`` in a private
    staging directory, else through ``name.tmp`` renamed over it."""
    if replace:
        handle = os.open(f"{name}.tmp", _REPLACE_FLAGS, 0o666, dir_fd=dir_fd)
    else:
        handle = os.open(name, _CREATE_FLAGS, 0o666, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(handle, view) :]
    finally:
        os.close(handle)
    if replace:
        os.replace(f"{name}.tmp", name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
_REPLACE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW


def _discard(staging: str | None) -> None:
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)


def _confined(name: str) -> bool:
    """Whether ``name`` is one plain file name, which cannot lead out of the directory it is
    opened in (relative to that directory's descriptor, without following a link at it).

    Names are checked by validation already (DNS-1123); this guards the write itself."""
    return bool(name) and "/" not in name and name not in (".", "..") and "\x00" not in name

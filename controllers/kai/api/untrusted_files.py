"""Reading files that come from someone else (a pull request), safely.

``kai validate``, ``kai render`` and ``kai simulate`` run in CI on contributors' files. A file
there may be a FIFO (reading it blocks forever), a device or a symlink to ``/dev/zero`` (reading
it never ends), a symlink to a secret outside the repository (its content would end up in an
error message in a public log), or simply huge. :func:`read_untrusted` reads one file only when
it is a regular file whose real location is inside the given root, and never more than a given
number of bytes; anything else is an :class:`UntrustedFileError` whose message names the path
(and, for a link, only that it points outside the root: never where, never what it holds).

Size arguments accept plain byte counts or binary suffixes (``16Mi``); see :func:`parse_size`.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

__all__ = [
    "DEFAULT_LIMITS",
    "FileLimits",
    "UntrustedFileError",
    "inside",
    "parse_size",
    "read_stream",
    "read_untrusted",
]


@dataclass(frozen=True)
class FileLimits:
    """The limits on untrusted input (the commands' ``--max-*`` flags)."""

    #: bytes one file (or standard input) may hold
    max_file_bytes: int = 16 * 1024 * 1024
    #: bytes all files read by one command may hold together
    max_total_bytes: int = 64 * 1024 * 1024
    #: values one YAML file may add by repeating anchors through aliases (``*name``)
    max_alias_nodes: int = 10_000
    #: bytes of text (scalars and keys) one YAML file may add through aliases
    max_alias_bytes: int = 4 * 1024 * 1024
    #: YAML documents (empty ones included) one file may hold
    max_documents: int = 10_000


DEFAULT_LIMITS = FileLimits()

_SUFFIXES = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "ki": 1024, "mi": 1024**2}
_SUFFIXES |= {"gi": 1024**3, "b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3}


def parse_size(text: str) -> int:
    """``"16Mi"`` -> 16777216, ``"500k"`` -> 500000, ``"1024"`` -> 1024. Raises ValueError."""
    stripped = text.strip()
    digits = stripped.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    suffix = stripped[len(digits) :].lower()
    if not digits.isdigit() or suffix not in _SUFFIXES:
        raise ValueError(f"{text!r} is not a size: use a byte count such as 1048576 or 1Mi, 64Mi")
    return int(digits) * _SUFFIXES[suffix]


class UntrustedFileError(Exception):
    """A file that must not be read; the message names the path and why, nothing more."""


def inside(path: str, root: str) -> bool:
    """Whether ``path`` (already resolved) is ``root`` (already resolved) or below it."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _kind(mode: int) -> str:
    for test, words in _KINDS:
        if test(mode):
            return words
    return "not a regular file"


def read_untrusted(path: str, root: str, max_bytes: int) -> bytes:
    """The content of ``path`` if it is a regular file really inside ``root``, at most
    ``max_bytes`` long. Raises :class:`UntrustedFileError` (not a regular file, a link out of
    ``root``, too large) or :class:`OSError` (cannot be opened or read)."""
    real = os.path.realpath(path)
    if not inside(real, os.path.realpath(root)):
        raise UntrustedFileError(
            f"{path} is a symbolic link to a place outside {root}; links are followed only "
            "within the directory given, so it was not read"
        )
    # O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: ``real`` has no link
    # left, so a link swapped in after the check is refused rather than followed.
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    descriptor = os.open(real, flags)
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFileError(
                f"{path} is {_kind(info.st_mode)}, not a regular file; it was not read"
            )
        if info.st_size > max_bytes:
            raise UntrustedFileError(_too_large(path, info.st_size, max_bytes))
        os.set_blocking(descriptor, True)
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            data = handle.read(max_bytes + 1)
    finally:
        os.close(descriptor)
    if len(data) > max_bytes:  # it grew while we read it
        raise UntrustedFileError(_too_large(path, len(data), max_bytes))
    return data


def read_stream(stream: object, name: str, max_bytes: int) -> bytes:
    """At most ``max_bytes`` from a binary stream (standard input); more is an error."""
    data: bytes = stream.read(max_bytes + 1)  # type: ignore[attr-defined]
    if len(data) > max_bytes:
        raise UntrustedFileError(f"{name} holds more than {max_bytes} bytes; it was not read")
    return data


def _too_large(path: str, size: int, max_bytes: int) -> str:
    return (
        f"{path} is {size} bytes, more than the {max_bytes} allowed per file "
        "(--max-file-size); it was not read"
    )

"""Regular expressions as kube-apiserver runs them: Go's ``regexp`` package, whose syntax and
semantics are RE2's. CRD ``pattern`` values and CEL ``matches()`` use this.

RE2 (the ``google-re2`` package) matches in time linear in the input, whatever the pattern, so
a pattern like ``^(a+)+$`` cannot freeze the server (Python's ``re`` backtracks: 49 s on a long
string). It also refuses what Go refuses -- lookaround, backreferences, ``\\Z``, repeat counts
beyond 1000 -- so a CRD that a real server rejects is rejected here too, with Go's message.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # errors are answered to the client, not printed on stderr

# RE2's error codes -> Go regexp's words for the same errors (regexp/syntax.ErrorCode)
_GO_CODES = {
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "no argument for repetition operator": "missing argument to repetition operator",
    "missing )": "missing closing )",
    "missing ]": "missing closing ]",
    "trailing \\": "trailing backslash at end of expression",
    "invalid character class range": "invalid character class range",
    "invalid named capture group": "invalid named capture",
}


class RegexError(ValueError):
    """A pattern Go's regexp package does not compile; the message is Go's."""


@lru_cache(maxsize=512)
def compile_go(pattern: str) -> Any:
    """The compiled pattern; raises :class:`RegexError` with Go's ``error parsing regexp:``
    message for one that Go refuses."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        raw = exc.args[0] if exc.args else b""
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        code, sep, expr = text.partition(": ")
        if code == "invalid perl operator" and expr.startswith("(?<"):
            # Go reads "(?<" as the start of a named capture: up to its ">", or to the end
            rest = pattern[pattern.find("(?<") :]
            close = rest.find(">")
            code, expr = "invalid named capture", rest if close < 0 else rest[: close + 1]
        else:
            code = _GO_CODES.get(code, code)
        detail = f"{code}: `{expr}`" if sep else code
        raise RegexError(f"error parsing regexp: {detail}") from None


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (Go's ``MatchString``)."""
    return compile_go(pattern).search(text) is not None

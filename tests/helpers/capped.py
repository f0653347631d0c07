"""``kai`` in a child process with its address space capped and a timeout, reporting its time
and peak memory: hostile-input tests fail on a regression instead of hanging or exhausting the
machine."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The child reports its own high-water mark (VmHWM: ru_maxrss would keep the size of the pytest
# worker it was forked from, hundreds of MB in a full suite) and that of the processes it ran
# (git), then exits with kai's status.
_CODE = (
    "import resource, sys\n"
    "from kai.cli import main\n"
    "try:\n"
    "    code = main(sys.argv[1:])\n"
    "finally:\n"
    "    sys.stdout.flush()\n"
    "    status = open('/proc/self/status').read().split('VmHWM:')[1]\n"
    "    own = int(status.split()[0])\n"
    "    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "    sys.stderr.write(f'\\nPEAK-RSS-KB {own} {children}\\n')\n"
    "sys.exit(code)\n"
)
_MARK = "PEAK-RSS-KB "


@dataclass
class Capped:
    done: subprocess.CompletedProcess[Any]
    seconds: float
    own_peak: int  # bytes: kai's process
    children_peak: int  # bytes: the largest process kai ran (git)

    @property
    def peak(self) -> int:
        return max(self.own_peak, self.children_peak)


def run_kai(
    *argv: str, memory_cap: int, timeout: float, cwd: Path | None = None, text: bool = False
) -> Capped:
    """``kai ARGV`` under an RLIMIT_AS of ``memory_cap`` bytes, killed after ``timeout`` s."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_cap, memory_cap))

    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _CODE, *argv],
        capture_output=True,
        text=text,
        timeout=timeout,
        preexec_fn=cap,
        check=False,
        cwd=cwd,
        env={**os.environ, "NO_COLOR": "1"},
    )
    seconds = time.monotonic() - started
    stderr = done.stderr if text else done.stderr.decode(errors="replace")
    own, children = (int(kb) * 1024 for kb in stderr.rsplit(_MARK, 1)[1].split()[:2])
    return Capped(done, seconds, own, children)

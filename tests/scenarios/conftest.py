"""Reports how many scenario files were skipped because the core does not implement an action."""

from __future__ import annotations

import pytest

#: prefix of the skip reason of a scenario that lists an action the core does not implement
UNSUPPORTED_PREFIX = "scheduler core does not implement action "


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    actions: dict[str, int] = {}
    for report in skipped:
        longrepr = getattr(report, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""
        if UNSUPPORTED_PREFIX in str(reason):
            action = str(reason).split(UNSUPPORTED_PREFIX, 1)[1].split()[0]
            actions[action] = actions.get(action, 0) + 1
    if actions:
        total = sum(actions.values())
        detail = ", ".join(f"{name}: {count}" for name, count in sorted(actions.items()))
        terminalreporter.write_line(
            f"scenario files skipped because the core lacks an action: {total} ({detail})"
        )

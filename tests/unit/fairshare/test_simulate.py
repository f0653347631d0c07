"""``kai fairshare simulate``: the issue's acceptance (two equal queues, 100 cycles)."""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import pytest

from kai.cli import main
from kai.commands.fairshare import InputError, load_input

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "fairshare" / "two-queues.yaml"


def _run(tmp_path: Path, k_value: float) -> dict[str, list[dict[str, float]]]:
    text = EXAMPLE.read_text()
    lines = [
        f"KValue: {k_value}" if line.startswith("KValue:") else line for line in text.splitlines()
    ]
    src = tmp_path / f"k{k_value}.yaml"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / f"out{k_value}"
    assert main(["fairshare", "simulate", str(src), "-o", str(out)]) == 0
    assert (out / "fairshare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows: dict[str, list[dict[str, float]]] = {}
    with (out / "fairshare.csv").open() as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["Queue"], []).append(
                {k: float(v) for k, v in row.items() if k != "Queue"}
            )
    return rows


def _turns(values: list[float]) -> int:
    """How often the series changes direction."""
    steps = [b - a for a, b in itertools.pairwise(values) if b != a]
    return sum(1 for a, b in itertools.pairwise(steps) if (a > 0) != (b > 0))


def test_equal_queues_alternate_with_k_and_settle_without(tmp_path: Path) -> None:
    with_k = _run(tmp_path, 5.0)
    plain = _run(tmp_path, 0.0)
    for rows in (with_k, plain):
        assert len(rows["queue-a"]) == len(rows["queue-b"]) == 100
        for a, b in zip(rows["queue-a"], rows["queue-b"], strict=True):
            assert a["Allocation"] + b["Allocation"] <= 16
    late_a = [r["Allocation"] for r in with_k["queue-a"][50:]]
    assert _turns(late_a) >= 6, late_a  # keeps swinging to the end
    assert max(late_a) > 8 > min(late_a)
    # the direction of the formula: the queue that used more gets the smaller share
    for a, b in zip(with_k["queue-a"][10:], with_k["queue-b"][10:], strict=True):
        if a["Usage"] > b["Usage"] + 1e-9:
            assert a["FairShare"] <= b["FairShare"]
        elif b["Usage"] > a["Usage"] + 1e-9:
            assert b["FairShare"] <= a["FairShare"]
    # kValue 0: plain fair share, 8 GPUs each once queue-b has reclaimed its half
    assert all(r["Allocation"] == 8 for r in plain["queue-a"][10:])
    assert all(r["Allocation"] == 8 for r in plain["queue-b"][10:])
    assert all(r["FairShare"] == 8 for r in plain["queue-a"][2:])


def test_bad_input_names_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("Cycles: 10\nNodes: [{GPUs: 8}]\nQueues: [{Name: a}]\nJobs: {b: {GPUs: 1}}\n")
    with pytest.raises(InputError, match=r"bad.yaml: Jobs.b: no queue named 'b'"):
        load_input(str(bad))
    bad.write_text("Cycles: x\nNodes: [{GPUs: 8}]\nQueues: [{Name: a}]\n")
    with pytest.raises(InputError, match=r"bad.yaml: Cycles: expected a number"):
        load_input(str(bad))
    assert main(["fairshare", "simulate", str(tmp_path / "missing.yaml")]) == 2

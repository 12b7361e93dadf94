"""What a health run leaves running and what its parent process holds (issue 10, item 4).

* The pool's workers are gone when a run returns, and nothing the command started outlives it.
* The parent keeps no per-row state: rows wait in the workers and on local disk, and the parent
  merges sorted runs holding a bounded batch of each (``tracemalloc`` sees only this process).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from gymflow.health import HealthOptions, _ranges, run_health
from tests.health.builders import Outcome, call, record, trajectory, write_lines
from tests.processes import pool_workers


def _rows(count: int) -> list[dict[str, Any]]:
    """``count`` rows over ten tasks: the per-task state of the summary does not grow."""
    return [
        record(i % 10, i // 10, traj=trajectory(calls=[call(status=500 if i % 3 == 0 else 200)]))
        for i in range(count)
    ]


def test_workers_are_gone_when_a_run_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_lines(tmp_path / "rollouts.jsonl", _rows(400))
    monkeypatch.setattr(_ranges, "RANGE_BYTES", 8192)
    run_health(HealthOptions((str(path),), workers=2, use_cache=False))
    assert len(Outcome(tmp_path).rows) == 400
    assert pool_workers() == []


def test_nothing_the_command_started_outlives_it(tmp_path: Path) -> None:
    write_lines(tmp_path / "rollouts.jsonl", _rows(400))
    mark = uuid.uuid4().hex
    code = (
        "import sys; from gymflow.health import _ranges; _ranges.RANGE_BYTES = 8192; "
        "from gymflow.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    args = [sys.executable, "-c", code, "eval", "health-check", str(tmp_path), "--direct", "--workers", "2"]
    done = subprocess.run(
        args, env={**os.environ, "GYMFLOW_TEST_MARK": mark}, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr

    def marked() -> list[int]:
        found = []
        for process in psutil.process_iter():
            try:
                if process.environ().get("GYMFLOW_TEST_MARK") == mark:
                    found.append(process.pid)
            except psutil.Error:
                continue
        return found

    deadline = time.monotonic() + 5.0  # workers notice their parent's exit within 0.2 s
    while (left := marked()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == []


def _parent_peak(tmp_path: Path, count: int, monkeypatch: pytest.MonkeyPatch) -> int:
    path = write_lines(tmp_path / f"rollouts-{count}.jsonl", _rows(count))
    monkeypatch.setattr(_ranges, "RANGE_BYTES", math.ceil(path.stat().st_size / 2))  # two runs to merge
    plan = _ranges.plan([str(path)], workers=2)
    assert len(plan.ranges) == 2
    tracemalloc.start()
    try:
        report = run_health(HealthOptions((str(path),), str(tmp_path), workers=2, use_cache=False))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.summary["run"]["artifacts"]["records"] == count
    return peak


def test_the_parent_holds_no_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small_peak = _parent_peak(tmp_path, 1_500, monkeypatch)
    large_peak = _parent_peak(tmp_path, 6_000, monkeypatch)
    # Held in the parent, the 4,500 more rows would take about 1 KB each.
    assert large_peak < small_peak + 1_000_000, (small_peak, large_peak)
    assert large_peak < 4_000_000, large_peak  # the whole command: plan, ranges, reports, record

"""Ctrl-C (issue 11, attack 6): one line, exit 130, within 5 s, no orphans, in direct and Prefect mode.

The signal goes to the command's whole process group, as a terminal's Ctrl-C does.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil

from tests.processes import pool_workers
from tests.reliability.helpers import (
    health_rows,
    same_session_descendants,
    start,
    temp_files,
    wait_for,
    wait_gone,
    write_rows,
)

DEADLINE_S = 5.0
SERVER_START = "Starting the local Prefect server for PREFECT_HOME "
"""The line of a first orchestrated command, which starts the server (not part of the interrupt)."""


def _interrupt(args: list[str], expect_workers: int, timeout: float) -> tuple[str, float]:
    """Ctrl-C once the command's workers run; its stderr and how long it took to exit."""
    process = start(args)
    handle = psutil.Process(process.pid)

    def workers() -> bool:
        try:
            return len(pool_workers(handle)) >= expect_workers
        except psutil.Error:
            return False

    try:
        assert wait_for(lambda: process.poll() is None and workers(), timeout), process.communicate()
        descendants = same_session_descendants(process.pid)
        sent = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=DEADLINE_S + 5)
        elapsed = time.monotonic() - sent
        assert process.returncode == 130, (process.returncode, err)
        assert not wait_gone(descendants, 2.0), "orphans after Ctrl-C"
        return err.decode(), elapsed
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()


def test_ctrl_c_in_direct_mode(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_rows(run_dir / "rollouts.jsonl", health_rows(1300, padding=26000))
    err, elapsed = _interrupt(["eval", "health-check", str(run_dir), "--direct", "--workers", "2"], 2, 60)
    assert elapsed < DEADLINE_S
    assert err.strip().splitlines() == [
        "Interrupted; nothing was written. Run the same command again to start over."
    ], err
    assert temp_files(run_dir) == [] and not list(run_dir.glob(".*.lock"))
    assert not (run_dir / "quality_summary.json").exists()


def test_ctrl_c_in_prefect_mode(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_rows(run_dir / "rollouts.jsonl", health_rows(1300, padding=26000))
    # The first orchestrated command may have to start the local Prefect server: bounded wait.
    err, elapsed = _interrupt(["eval", "health-check", str(run_dir), "--workers", "2"], 2, 90)
    assert elapsed < DEADLINE_S
    lines = [line for line in err.strip().splitlines() if not line.startswith(SERVER_START)]
    assert len(lines) == 1 and lines[0].startswith("Interrupted; "), err
    assert "Traceback" not in err
    assert not list(run_dir.glob(".*.lock"))

"""kill -9 of real gymflow processes (issue 11, attack 6): no orphans, no stale temp files after
the next run, byte-identical reports after the rerun.

Each command runs as a process of its own with worker processes; it is killed with SIGKILL at a
point observed from outside (its workers running, a temp file being written). Everything it
started must be gone within 5 s; the next run of the same command must leave no temp or lock
file and write the same report bytes as an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from gymflow.cli import main
from tests.processes import pool_workers
from tests.reliability.helpers import (
    health_rows,
    kill_all,
    run,
    start,
    temp_files,
    wait_for,
    wait_gone,
    write_rows,
)

ORPHAN_DEADLINE_S = 5.0


def _big_run(directory: Path, rows: int, padding: int) -> Path:
    return write_rows(directory / "rollouts.jsonl", health_rows(rows, padding=padding))


def _kill_when(args: list[str], ready: Callable[[psutil.Process], bool], timeout: float = 60) -> int:
    """Start the CLI, SIGKILL it once ``ready`` holds, and check that nothing it started survives;
    returns the killed process's pid."""
    process = start(args)
    handle = psutil.Process(process.pid)
    try:
        reached = wait_for(lambda: process.poll() is None and ready(handle), timeout)
        assert reached, f"the kill point was not reached (exit {process.poll()}): {process.communicate()}"
        descendants = handle.children(recursive=True)
        os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=10)
        left = wait_gone(descendants, ORPHAN_DEADLINE_S)
        assert not left, f"orphans after {ORPHAN_DEADLINE_S} s: {[p.cmdline() for p in left]}"
    finally:
        kill_all(handle.children(recursive=True) if process.poll() is None else [])
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.pid


def _workers(count: int) -> Callable[[psutil.Process], bool]:
    def ready(handle: psutil.Process) -> bool:
        try:
            return len(pool_workers(handle)) >= count
        except psutil.Error:
            return False

    return ready


def _temp_in(directory: Path) -> Callable[[psutil.Process], bool]:
    return lambda _: directory.is_dir() and any(name.endswith(".tmp") for name in os.listdir(directory))


def _reports(directory: Path, names: list[str]) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in names}


def _rerun_matches(args: list[str], directory: Path, names: list[str], reference: dict[str, bytes]) -> None:
    code, _, err = run(args)
    assert code == 0 and "Traceback" not in err, err
    assert temp_files(directory) == [], temp_files(directory)
    assert not list(directory.glob(".*.lock"))
    assert _reports(directory, names) == reference


HEALTH_REPORTS = ["quality_summary.json", "rollout_verdicts.jsonl"]


@pytest.mark.parametrize("point", ["workers", "reports-written"])
def test_health_check_killed(tmp_path: Path, point: str) -> None:
    run_dir = tmp_path / "run"
    _big_run(run_dir, 1300, 26000)  # ~34 MB: two byte ranges, so two workers
    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    shutil.copy(run_dir / "rollouts.jsonl", reference_dir / "rollouts.jsonl")
    assert main(["eval", "health-check", str(reference_dir), "--direct", "--workers", "1"]) == 0
    reference = _reports(reference_dir, HEALTH_REPORTS)
    args = ["eval", "health-check", str(run_dir), "--direct", "--workers", "2"]
    if point == "workers":
        killed = _kill_when(args, _workers(2))
    else:
        # Reports without their record: the kill lands between the reports and the record.
        killed = _kill_when(args, lambda _: (run_dir / "rollout_verdicts.jsonl").exists())
    _rerun_matches(args, run_dir, HEALTH_REPORTS, reference)
    # The killed run's spilled rows outside the outputs are gone too, swept by the rerun.
    assert not list(Path(tempfile.gettempdir()).glob(f"gymflow-*-{killed}-*"))
    record = json.loads((run_dir / "quality_summary.provenance.json").read_text())
    assert [entry["uri"].rsplit("/", 1)[1] for entry in record["outputs"]] == HEALTH_REPORTS


def test_aggregate_killed_while_writing_the_merged_file(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    for index in range(2):
        rows = health_rows(400, padding=40000)
        for row in rows:
            row["_ng_task_index"] += 1000 * index
        write_rows(shards / f"s{index}.jsonl", rows)
    out = tmp_path / "out"
    reference_out = tmp_path / "reference"
    names = ["merged.jsonl", "merged_aggregate_metrics.json"]
    base = ["eval", "aggregate", "-i", f"{shards}/*.jsonl", "--direct", "--no-health-check", "--no-cache"]
    assert main([*base, "-o", str(reference_out / "merged.jsonl")]) == 0
    reference = _reports(reference_out, names)
    args = [*base, "-o", str(out / "merged.jsonl"), "--workers", "2"]
    _kill_when(args, _temp_in(out))
    assert temp_files(out), "the kill left the merged file's temp file behind"
    _rerun_matches(args, out, names, reference)


def test_join_killed_while_writing_its_output(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _big_run(run_dir, 600, 40000)
    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    shutil.copy(run_dir / "rollouts.jsonl", reference_dir / "rollouts.jsonl")
    assert main(["eval", "join", str(reference_dir), "--direct", "--no-capture"]) == 0
    reference = _reports(reference_dir, ["rollouts_joined.jsonl"])
    args = ["eval", "join", str(run_dir), "--direct", "--no-capture", "--workers", "2"]
    _kill_when(args, _temp_in(run_dir))
    assert temp_files(run_dir), "the kill left the output's temp file behind"
    _rerun_matches([*args, "--no-cache"], run_dir, ["rollouts_joined.jsonl"], reference)

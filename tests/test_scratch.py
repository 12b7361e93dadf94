"""Scratch space outside the outputs: named by the owning process, swept once that process is gone."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gymflow import scratch


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_entries_of_a_dead_process_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    dead, alive = _dead_pid(), os.getpid()
    (tmp_path / f"gymflow-health-{dead}-abc").mkdir()
    (tmp_path / f"gymflow-health-{dead}-abc" / "range-0-0").write_bytes(b"rows")
    (tmp_path / f"gymflow-verdicts-{dead}-xyz.jsonl").write_bytes(b"{}\n")
    (tmp_path / f"gymflow-health-{alive}-def").mkdir()
    (tmp_path / "gymflow-health-notapid").mkdir()
    (tmp_path / "other-123-file").write_bytes(b"")
    removed = scratch.sweep(str(tmp_path))
    assert sorted(Path(p).name for p in removed) == [
        f"gymflow-health-{dead}-abc",
        f"gymflow-verdicts-{dead}-xyz.jsonl",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"gymflow-health-{alive}-def", "gymflow-health-notapid", "other-123-file"]
    )


def test_new_scratch_is_named_by_this_process_and_sweeps_first() -> None:
    leftover = Path(tempfile.gettempdir()) / f"gymflow-aggregate-{_dead_pid()}-left"
    leftover.mkdir()
    with scratch.temporary_dir("health") as path:
        assert Path(path).name.startswith(f"gymflow-health-{os.getpid()}-") and Path(path).is_dir()
        assert not leftover.exists()
    assert not Path(path).exists()
    fd, name = scratch.scratch_file("verdicts", ".jsonl")
    os.close(fd)
    assert Path(name).name.startswith(f"gymflow-verdicts-{os.getpid()}-") and name.endswith(".jsonl")
    os.unlink(name)


def test_a_name_the_sweep_could_not_read_back_is_refused() -> None:
    with pytest.raises(ValueError, match="lowercase letters only"):
        scratch.scratch_dir("health-runs")  # "gymflow-health-runs-<pid>-" has no pid where the sweep looks

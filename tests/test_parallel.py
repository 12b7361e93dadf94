"""``gymflow.parallel``: one pool for several rounds, and no work left running after a failure."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import psutil
import pytest

from gymflow import parallel


def _square(value: int) -> int:
    return value * value


def _fail_first(value: int, directory: str) -> int:
    if value == 0:
        raise ValueError("the first item fails")
    time.sleep(0.3)
    Path(directory, str(value)).touch()
    return value


def _workers() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if any("spawn_main" in part for part in child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def test_rounds_share_one_pool_and_it_is_gone_after_the_block() -> None:
    with parallel.Workers(2, what="squaring") as workers:
        first = workers.map(_square, [1, 2, 3])
        pids = {process.pid for process in _workers()}
        second = workers.map(_square, [4, 5, 6])
        assert {process.pid for process in _workers()} == pids  # the same processes
    assert (first, second) == ([1, 4, 9], [16, 25, 36])
    assert len(pids) == 2 and _workers() == []


def test_a_failing_item_cancels_the_work_not_yet_started(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="the first item fails"):
        parallel.map_ordered(
            partial(_fail_first, directory=str(tmp_path)), list(range(20)), 2, what="failing"
        )
    # Only the items already handed to the workers (running or queued for them) still run.
    assert len(list(tmp_path.iterdir())) <= 8
    assert _workers() == []

"""``gymflow.parallel``: one pool for several rounds, and no work left running after a failure."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from gymflow import parallel
from tests.processes import pool_workers


def _square(value: int) -> int:
    return value * value


def _fail_first(value: int, directory: str) -> int:
    if value == 0:
        raise ValueError("the first item fails")
    time.sleep(0.3)
    Path(directory, str(value)).touch()
    return value


class _Node:
    def __init__(self) -> None:
        self.me = self


_LEFT: list[weakref.ref[_Node]] = []
"""In a worker: the cycles its earlier items left."""


def _leave_a_cycle(_: int) -> int:
    gc.disable()  # as a parse loop does (gymflow.collector.paused_gc)
    alive = sum(ref() is not None for ref in _LEFT)
    _LEFT.append(weakref.ref(_Node()))
    return alive


def test_a_worker_frees_what_an_item_left_before_the_next() -> None:
    with parallel.Workers(2, what="leaving cycles") as workers:
        results = workers.map(_leave_a_cycle, list(range(8)))
    assert results == [0] * 8


def test_rounds_share_one_pool_and_it_is_gone_after_the_block() -> None:
    with parallel.Workers(2, what="squaring") as workers:
        first = workers.map(_square, [1, 2, 3])
        pids = {process.pid for process in pool_workers()}
        second = workers.map(_square, [4, 5, 6])
        assert {process.pid for process in pool_workers()} == pids  # the same processes
    assert (first, second) == ([1, 4, 9], [16, 25, 36])
    assert len(pids) == 2 and pool_workers() == []


def test_a_failing_item_cancels_the_work_not_yet_started(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="the first item fails"):
        parallel.map_ordered(
            partial(_fail_first, directory=str(tmp_path)), list(range(20)), 2, what="failing"
        )
    # Only the items already handed to the workers (running or queued for them) still run.
    assert len(list(tmp_path.iterdir())) <= 8
    assert pool_workers() == []


def _exit_in_a_worker(value: int, parent: int) -> int:
    if os.getpid() != parent:
        os._exit(3)  # the worker dies: the pool breaks
    return value + 1


def test_calls_from_many_threads_share_one_pool() -> None:
    with parallel.Workers(2, what="squaring") as workers, ThreadPoolExecutor(4) as threads:
        results = list(threads.map(lambda value: workers.call(_square, value), range(8)))
        assert len(pool_workers()) == 2
    assert results == [value * value for value in range(8)]
    assert pool_workers() == []


def test_a_call_whose_pool_breaks_runs_here_with_one_warning() -> None:
    with parallel.Workers(2, what="adding") as workers:
        with pytest.warns(RuntimeWarning, match="Process pool failed .*; adding serially"):
            assert workers.call(_exit_in_a_worker, 1, os.getpid()) == 2
        assert workers.call(_exit_in_a_worker, 5, os.getpid()) == 6  # serial from now on
        assert pool_workers() == []


_STARTS = """
import gc, os, signal, sys, threading, time
from gymflow import parallel
from tests.processes import pool_workers

if sys.argv[1] == "thread":
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
signal.signal(signal.SIGTERM, lambda *_: None)  # as the CLI does; a worker must not keep it
with parallel.Workers(2, what="squaring") as workers:
    before = len(pool_workers())
    squares = workers.map(abs, [-1, -2, -3])
    forked = [p.cmdline() == pool_workers()[0].parent().cmdline() for p in pool_workers()]
    handler = workers.call(signal.getsignal, signal.SIGTERM)
    # A worker collects, but never what it inherited (frozen first); its parent still collects.
    collecting = workers.call(gc.isenabled) and workers.call(gc.get_freeze_count) > 0 and gc.isenabled()
print(before, squares, forked, handler == signal.SIG_DFL, collecting, len(pool_workers()))
"""


@pytest.mark.parametrize(
    ("threads", "expected"),
    [
        # One thread: both workers are forked as the block starts (no ~0.4 s import each).
        ("none", "2 [1, 2, 3] [True, True] True True 0"),
        # Another thread runs: a fork could leave its locks held in a child; spawned at first use.
        ("thread", "0 [1, 2, 3] [False, False] True True 0"),
    ],
)
def test_workers_are_forked_at_once_only_from_a_single_thread(threads: str, expected: str) -> None:
    """In a fresh process (the test runner has threads of its own); either way the workers take
    the default SIGTERM action, not the handler their parent installed, collect what they allocate
    but not what they inherited, and are gone after."""
    repo = Path(__file__).resolve().parents[1]
    command = [sys.executable, "-c", _STARTS, threads]
    result = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


_ORCHESTRATED = """
import sys, types
from gymflow.cli import orchestrated
from gymflow.config import GymflowConfig
from gymflow.run_context import RunContext
from tests.processes import pool_workers

def run_flow(flow, ctx, workers, pool=None, **parameters):  # what the flow's steps are given
    started = pool_workers()
    forked = [p.cmdline() == started[0].parent().cmdline() for p in started]
    return (len(started), forked, pool.map(abs, [-1, -2, -3])), "http://127.0.0.1/flow-run"

runtime = types.ModuleType("gymflow.flows._runtime")
runtime.run_flow = run_flow
probe = types.ModuleType("gymflow.flows.probe")
probe.flow = None
sys.modules.update({"gymflow.flows._runtime": runtime, "gymflow.flows.probe": probe})
orchestrated.prepare_prefect = lambda settings, verbose: None
settings, hashes = GymflowConfig(), [sys.argv[1]]
done = orchestrated.run(settings, False, "probe:flow", RunContext(), 2, link=False, hashes=hashes)
print(*done, len(pool_workers()))
"""


def test_an_orchestrated_command_forks_its_workers_before_hashing_and_prefect(tmp_path: Path) -> None:
    """The flow of an orchestrated command gets worker processes forked as the command starts,
    before the thread that hashes its inputs (then Prefect's threads) would make them spawned
    ones, each importing the core again; they are gone when the command ends."""
    repo = Path(__file__).resolve().parents[1]
    data = tmp_path / "rollouts.jsonl"
    data.write_bytes(b"{}\n" * 1000)
    command = [sys.executable, "-c", _ORCHESTRATED, str(data)]
    result = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2 [True, True] [1, 2, 3] 0"


@pytest.mark.parametrize(
    ("items", "workers", "most", "expected"),
    [
        (5, 2, 256, 6),  # three waves of two, not a last item alone
        (4, 2, 256, 4),
        (21, 2, 256, 22),
        (9, 8, 256, 16),
        (7, 1, 256, 7),  # one worker: every count is full waves
        (255, 2, 256, 256),
        (256, 3, 256, 256),  # never beyond ``most``, even short of a multiple
        (3, 8, 5, 5),
    ],
)
def test_full_waves_rounds_up_to_a_multiple_of_the_workers(
    items: int, workers: int, most: int, expected: int
) -> None:
    assert parallel.full_waves(items, workers, most) == expected


def test_ranges_of_join_and_health_come_in_full_waves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of five ranges' bytes is cut into six for two workers (and into five for one)."""
    from gymflow.health import _ranges
    from gymflow.join import _file_join
    from gymflow.join._settings import JoinSettings

    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b"".join(b'{"n":%d}\n' % i for i in range(500)))  # 4,890 bytes: five ranges of 1,000
    monkeypatch.setattr(_file_join, "BYTES_PER_RANGE", 1000)
    monkeypatch.setattr(_ranges, "RANGE_BYTES", 1000)
    settings = JoinSettings(rollouts=str(path), output=str(tmp_path / "out.jsonl"), capture_dir=None)
    assert [len(_file_join.plan_ranges(settings, workers)) for workers in (1, 2, 4)] == [5, 6, 8]
    assert [len(_ranges.plan([str(path)], workers).ranges) for workers in (1, 2, 4)] == [1, 6, 8]
    monkeypatch.setattr(_ranges, "RANGE_BYTES", 10_000)  # one range: a small file stays whole
    assert len(_ranges.plan([str(path)], 4).ranges) == 1


def test_health_cuts_a_small_file_for_forked_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """For forked workers, a file under RANGE_BYTES is still cut into one range per worker once it
    holds more than FORKED_RANGE_MIN_BYTES; for spawned ones it stays whole. The direct command
    plans for forked workers when it can fork."""
    from gymflow.health import _command, _ranges

    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b"".join(b'{"n":%d}\n' % i for i in range(500)))  # 4,890 bytes
    monkeypatch.setattr(_ranges, "FORKED_RANGE_MIN_BYTES", 1000)
    assert [len(_ranges.plan([str(path)], workers, forked=True).ranges) for workers in (1, 2, 4)] == [1, 2, 4]
    assert [len(_ranges.plan([str(path)], workers).ranges) for workers in (1, 2, 4)] == [1, 1, 1]
    monkeypatch.setattr(_ranges, "FORKED_RANGE_MIN_BYTES", 4890)  # not more than one: whole
    assert len(_ranges.plan([str(path)], 4, forked=True).ranges) == 1

    monkeypatch.setattr(_ranges, "FORKED_RANGE_MIN_BYTES", 1000)
    planned: list[int] = []
    plan = _ranges.plan

    def counting(*args: Any, **kwargs: Any) -> _ranges.HealthPlan:
        planned.append(len((made := plan(*args, **kwargs)).ranges))
        return made

    monkeypatch.setattr(_command, "plan", counting)
    for forkable in (True, False):
        monkeypatch.setattr(_command, "can_fork", lambda forkable=forkable: forkable)
        options = _command.HealthOptions(paths=(str(path),), workers=2, use_cache=False)
        assert _command.run_health(options).run["artifacts"]["records"] == 500
    assert planned == [2, 1]


_ORPHAN = """
import os, subprocess, sys, time
if sys.argv[1] == "creator":  # starts the worker, then dies before the worker watches it
    command = [sys.executable, "-c", sys.argv[2], "worker", str(os.getpid()), sys.argv[3]]
    worker = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(worker.pid, flush=True)
    os._exit(0)
creator = int(sys.argv[2])
while os.getppid() == creator:  # the creator is gone: this process was adopted
    time.sleep(0.01)
from gymflow import lifeline
open(sys.argv[3], "w").close()
lifeline.watch_parent(creator, interval=0.05)
time.sleep(30)
"""


def test_a_worker_whose_creator_died_before_it_watched_exits(tmp_path: Path) -> None:
    """The race of a kill -9 during a pool's start: the worker is adopted before its watch starts.
    It watches its creator's pid (not its parent's, read then), so it still exits at once."""
    import psutil

    watching = tmp_path / "watching"
    code = _ORPHAN
    creator = subprocess.run(
        [sys.executable, "-c", code, "creator", code, str(watching)],
        capture_output=True, text=True, timeout=30, check=True, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    worker = psutil.Process(int(creator.stdout))
    try:
        worker.wait(timeout=10)
    except psutil.TimeoutExpired:
        worker.kill()
        raise AssertionError("the adopted worker did not exit") from None
    assert watching.exists()  # it reached the watch: only the watch ends it before its sleep


_WATCHED = """
import os, subprocess, sys, time
if sys.argv[1] == "parent":  # starts the worker, then waits to be killed
    command = [sys.executable, "-c", sys.argv[2], "worker", str(os.getpid()), sys.argv[3]]
    worker = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(worker.pid, flush=True)
    time.sleep(60)
from gymflow import lifeline
lifeline.watch_parent(int(sys.argv[2]), interval=600)  # polling alone would take ten minutes
open(sys.argv[3], "w").close()
time.sleep(60)
"""


def _pidfds() -> bool:
    """Whether the watch can wait on a pid file descriptor here (lifeline's own test of it)."""
    from gymflow import lifeline

    handle = lifeline._pidfd(os.getpid())
    if handle is None:
        return False
    os.close(handle)
    return True


@pytest.mark.skipif(not _pidfds(), reason="no pid file descriptors here")
def test_a_worker_exits_as_soon_as_its_parent_is_killed(tmp_path: Path) -> None:
    """A worker waits on its parent's pid file descriptor: it exits when the parent dies, not at
    its next poll, so a worker writing an output stops with its killed command."""
    import psutil

    watching = tmp_path / "watching"
    worker: psutil.Process | None = None
    code = _WATCHED
    parent = subprocess.Popen(
        [sys.executable, "-c", code, "parent", code, str(watching)],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    try:
        assert parent.stdout is not None
        worker = psutil.Process(int(parent.stdout.readline()))
        deadline = time.monotonic() + 30
        while not watching.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert watching.exists(), "the worker did not start watching"
    finally:
        parent.kill()
        parent.communicate()
        if worker is not None and not watching.exists():  # it never watched: do not leave it behind
            worker.kill()
    assert worker is not None
    try:
        worker.wait(timeout=5)  # not its child: psutil cannot tell its exit status
    except psutil.TimeoutExpired:
        worker.kill()
        raise AssertionError("the worker outlived its parent") from None

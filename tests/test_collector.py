"""``gymflow.collector``: the heap a finished step freed goes back to the system
(``release_memory``); the command line's set-up is frozen for the command (``frozen_after``)."""

from __future__ import annotations

import gc
import subprocess
import sys
from typing import Any

import pytest

from gymflow import cli
from gymflow.cli import orchestrated
from gymflow.collector import frozen_after
from gymflow.config import GymflowConfig
from gymflow.run_context import RunContext

_PROGRAM = """
from gymflow.collector import release_memory

def rss_mb():
    with open("/proc/self/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) // 1024

rows = [bytes(2000) + bytes([i % 256]) for i in range(40_000)]  # 80 MB of the C heap
pinned = bytes(3000) + b"x"  # above them: free() alone cannot shrink the heap
grown = rss_mb()
del rows
freed = rss_mb()
release_memory()
print(grown, freed, rss_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; malloc_trim is glibc's")
def test_memory_freed_by_a_step_leaves_the_process() -> None:
    out = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True, check=True)
    grown, freed, released = map(int, out.stdout.split())
    assert freed > grown - 10  # freed, yet still held by the process
    assert released < freed - 60


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_set_up_runs_without_collections_and_is_frozen_after() -> None:
    before = gc.get_freeze_count()
    try:
        with frozen_after():
            assert not gc.isenabled()
            kept = [_Node() for _ in range(1000)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= before + len(kept)
    finally:
        gc.unfreeze()


def test_an_orchestrated_command_runs_its_flow_with_prefect_frozen_and_main_unfreezes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the command builds to orchestrate (Prefect's settings and modules) is built with the
    collector paused and frozen while the flow runs, the collector on for the run's own objects;
    when ``main`` returns nothing is frozen any more."""
    import gymflow.flows._runtime as runtime  # what orchestrated.run imports for the flow

    seen: dict[str, Any] = {}
    set_up: list[_Node] = []

    def prepare_prefect(settings: GymflowConfig, verbose: bool) -> None:
        seen["collecting_in_set_up"] = gc.isenabled()
        set_up.extend(_Node() for _ in range(20_000))

    def run_flow(flow: Any, ctx: RunContext, workers: int, pool: Any, **parameters: Any) -> tuple[str, str]:
        seen.update(frozen=gc.get_freeze_count(), collecting=gc.isenabled())
        return "result", "http://127.0.0.1/flow-run"

    def handler(args: Any, extras: Any) -> int:
        seen["frozen_before"] = gc.get_freeze_count()
        orchestrated.run(GymflowConfig(), False, "reverify:reverify_flow", RunContext(), 1, link=False)
        return 0

    monkeypatch.setattr(orchestrated, "prepare_prefect", prepare_prefect)
    monkeypatch.setattr(runtime, "run_flow", run_flow)
    monkeypatch.setattr(cli, "build_parser", lambda: _parser_running(handler))
    assert cli.main([]) == 0
    assert not seen["collecting_in_set_up"]
    assert seen["collecting"]
    assert seen["frozen"] - seen["frozen_before"] >= len(set_up)
    assert gc.get_freeze_count() == 0


def _parser_running(handler: Any) -> Any:
    import argparse

    parser = argparse.ArgumentParser()
    parser.set_defaults(handler=handler)
    return parser

"""Prefect's task cache follows gymflow's content keys: after one shard changes, a rerun reads
only that shard again (the other's scan is a cache hit)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from uuid import UUID

import pytest
from prefect.client.schemas.objects import TaskRun

from gymflow.cli import main
from tests.prefect_api import local_client

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "post_run"


def _scan_states(flow_run_id: str, count: int = 2, timeout_s: float = 30.0) -> list[str]:
    """The final state names of the flow run's scan-shard task runs (the server records task runs
    from events, a moment after the command returns: wait, bounded, for ``count`` of them)."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = _read_scan_states(flow_run_id)
        if len(states) >= count and all(state in ("Completed", "Cached") for state in states):
            return sorted(states)
        if time.monotonic() > deadline:
            return sorted(states)
        time.sleep(0.3)


def _task_runs(flow_run_id: str) -> list[TaskRun]:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    flow_runs = FlowRunFilter(id=FlowRunFilterId(any_=[UUID(flow_run_id)]))
    with local_client() as client:
        return client.read_task_runs(flow_run_filter=flow_runs)


def _read_scan_states(flow_run_id: str) -> list[str]:
    runs = _task_runs(flow_run_id)
    return [str(run.state.name if run.state else None) for run in runs if run.name.startswith("scan-shard")]


def _aggregate_run_id(run: Path) -> str:
    record = json.loads((run / "rollouts.provenance.json").read_text())
    return str(record["orchestrator"]["flow_run_id"])


def test_changing_one_shard_reruns_only_its_scan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE / "shards", run / "shards")
    args = ["eval", "aggregate", "-i", str(run / "shards" / "*.jsonl"), "-o", str(run / "rollouts.jsonl")]
    assert main(args) == 0
    assert _scan_states(_aggregate_run_id(run)) == ["Completed", "Completed"]
    # After the scans, the UI shows the merged file's write beside the reduce and the metrics' write,
    # then the provenance record (recorded from events: waited for, bounded).
    wanted = {"prehash", "scan-shard", "write-merged", "reduce", "write-metrics", "write-provenance"}
    deadline = time.monotonic() + 30
    while not wanted <= (steps := {t.name.rsplit("-", 1)[0] for t in _task_runs(_aggregate_run_id(run))}):
        assert time.monotonic() < deadline, steps
        time.sleep(0.3)

    changed = run / "shards" / "rollouts_shard_1.jsonl"
    lines = changed.read_text().splitlines(keepends=True)
    changed.write_text("".join(lines[:-1]))  # one rollout fewer
    assert main(args) == 0
    capsys.readouterr()
    assert _scan_states(_aggregate_run_id(run)) == ["Cached", "Completed"]


def test_the_logs_tab_holds_the_warnings_the_console_prints(tmp_path: Path) -> None:
    """gymflow's own warnings (here: missing rollouts) reach the flow run's logs in the
    orchestrator, not only the console (a command in a process of its own, as a user runs it)."""
    import subprocess
    import sys

    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    run = tmp_path / "run"
    shutil.copytree(EXAMPLE / "shards", run / "shards")
    args = ["eval", "aggregate", "-i", str(run / "shards" / "*.jsonl"), "-o", str(run / "rollouts.jsonl")]
    done = subprocess.run(
        [sys.executable, "-m", "gymflow.cli", *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "repeat(s) are missing rollouts" in done.stderr  # on the console
    assert "Flow run: http" in done.stderr
    flow_run_id = _aggregate_run_id(run)
    deadline = time.monotonic() + 30
    messages: list[str] = []
    while time.monotonic() < deadline:
        with local_client() as client:
            logs = client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[UUID(flow_run_id)]))
            )
        messages = [log.message for log in logs]
        if any("missing rollouts" in message for message in messages):
            break
        time.sleep(0.5)
    assert any("repeat(s) are missing rollouts" in message for message in messages), messages

"""The Prefect path's batch cache names the verifier (issue 19 item 8): a rerun on the same
inputs against a server on another port verifies again; the same inputs, server and settings
reuse the stored batch and still write every row into a new ``--output``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gymflow.cli import main
from tests.reverify.cases import write_jsonl
from tests.reverify.server_process import ServerProcess, mcqa_rows, write_gym_config
from tests.reverify.test_prefect import _args


def test_batch_cache_names_the_server_and_its_settings(
    tmp_path: Path, start_resources_server: Callable[..., ServerProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    materialized, rollouts = mcqa_rows(7, 3, wrong=[(2, 1)])  # 21 rows: rows no other test uses
    write_jsonl(tmp_path / "inputs.jsonl", materialized)
    write_jsonl(tmp_path / "rollouts.jsonl", rollouts)
    first = start_resources_server()
    config = write_gym_config(tmp_path / "cfg.yaml", {"mcqa": first})

    assert main(_args(tmp_path, config, tmp_path / "a.jsonl")) == 0
    assert len(first.log("/verify")) == 21
    first.reset()

    # Same inputs, same server, same settings, a new output: the stored batch is reused, and its
    # rows are written into the new output.
    assert main(_args(tmp_path, config, tmp_path / "b.jsonl")) == 0
    assert first.log("/verify") == []
    assert (tmp_path / "b.jsonl").read_bytes() == (tmp_path / "a.jsonl").read_bytes()
    assert len((tmp_path / "b.jsonl").read_bytes().splitlines()) == 21

    # Another server on another port: another verifier, every row verified again.
    second = start_resources_server()
    assert second.port != first.port
    moved = write_gym_config(tmp_path / "moved.yaml", {"mcqa": second})
    assert main(_args(tmp_path, moved, tmp_path / "c.jsonl")) == 0
    assert len(second.log("/verify")) == 21
    assert first.log("/verify") == []
    assert (tmp_path / "c.jsonl").read_bytes() == (tmp_path / "a.jsonl").read_bytes()

    assert "Traceback" not in capsys.readouterr().err


def _batch_states(output: Path, count: int, timeout_s: float = 15.0) -> list[str]:
    """The final states of the verify-batch task runs of the flow run that wrote ``output`` (the
    server records task runs from events, a moment after the command returns: wait, bounded)."""
    import json
    import time
    from uuid import UUID

    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from tests.prefect_api import local_client

    record = json.loads(output.with_suffix(".provenance.json").read_text())
    flow_run = UUID(str(record["orchestrator"]["flow_run_id"]))
    deadline = time.monotonic() + timeout_s
    while True:
        with local_client() as client:
            runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run])))
        states = [
            str(run.state.name if run.state else None) for run in runs if run.name.startswith("verify-batch")
        ]
        if (
            len(states) >= count and all(s in ("Completed", "Cached") for s in states)
        ) or time.monotonic() > deadline:
            return states
        time.sleep(0.3)


def test_a_server_gymflow_launches_on_a_port_it_picks_keeps_its_batches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from tests.reverify.server_process import REPO_ROOT

    materialized, rollouts = mcqa_rows(3, 3)
    write_jsonl(tmp_path / "inputs.jsonl", materialized)
    write_jsonl(tmp_path / "rollouts.jsonl", rollouts)
    command = [sys.executable, "-m", "tests.reverify.server", "--host", "{host}", "--port", "{port}"]
    config = write_gym_config(tmp_path / "cfg.yaml", {"mcqa": {"command": command, "dir": str(REPO_ROOT)}})
    assert main(_args(tmp_path, config, tmp_path / "a.jsonl")) == 0
    first = capsys.readouterr()
    assert "Starting resources server 'mcqa' on http://127.0.0.1:" in first.out + first.err
    assert _batch_states(tmp_path / "a.jsonl", 1) == ["Completed"]
    # The next launch gets another port: the same launch recipe and settings, so the batch is reused.
    assert main(_args(tmp_path, config, tmp_path / "b.jsonl")) == 0
    capsys.readouterr()
    assert _batch_states(tmp_path / "b.jsonl", 1) == ["Cached"]
    assert (tmp_path / "b.jsonl").read_bytes() == (tmp_path / "a.jsonl").read_bytes()


def test_batches_are_an_eighth_of_the_run_from_1000_to_5000_rows() -> None:
    from gymflow.reverify._run import batch_rows

    sizes = {total: batch_rows(total) for total in (1, 999, 8000, 8001, 20_000, 40_000, 40_001, 10**6)}
    assert sizes == {
        1: 1000,
        999: 1000,
        8000: 1000,
        8001: 1001,
        20_000: 2500,
        40_000: 5000,
        40_001: 5000,
        10**6: 5000,
    }

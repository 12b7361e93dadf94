"""kill -9 in the middle of a 5,000-row run, then --resume: every row exactly once, same aggregate."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.reverify.cases import read_jsonl, write_jsonl
from tests.reverify.server_process import REPO_ROOT, ServerProcess, mcqa_rows, server_env, write_gym_config

pytestmark = pytest.mark.timeout(120)


def _command(config: Path, root: Path, output: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "gymflow.cli", "eval", "reverify", "--direct",
        "--config", str(config),
        "--inputs", str(root / "inputs.jsonl"),
        "--rollouts", str(root / "rollouts.jsonl"),
        "--output", str(output),
        *extra,
    ]  # fmt: skip


def _whole_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_bytes().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def test_kill_9_then_resume(tmp_path: Path, start_resources_server: Callable[..., ServerProcess]) -> None:
    server = start_resources_server(latency_ms=3, no_log=True)
    materialized, rollouts = mcqa_rows(2500, 2, wrong=[(t, 0) for t in range(0, 2500, 7)])
    write_jsonl(tmp_path / "inputs.jsonl", materialized)
    write_jsonl(tmp_path / "rollouts.jsonl", rollouts)
    config = write_gym_config(tmp_path / "cfg.yaml", {"mcqa": server})
    env = {**server_env(), "CI": "1"}
    output = tmp_path / "out.jsonl"

    log = tmp_path / "child.log"
    with open(log, "wb") as sink:
        child = subprocess.Popen(
            _command(config, tmp_path, output),
            cwd=REPO_ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if (
                output.exists()
                and output.stat().st_size > 0
                and len(output.read_bytes().splitlines()) > 1000  # the last may be cut short
            ):
                break
            assert child.poll() is None, log.read_text()
            time.sleep(0.02)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(10)
    # The kill may cut the last line short: resume skips such a line, so only whole rows count.
    partial = len(_whole_rows(output))
    assert 1000 <= partial < 5000
    assert not (tmp_path / "out_aggregate_metrics.json").exists()

    resumed = subprocess.run(
        _command(config, tmp_path, output, "--resume"),
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        timeout=90,
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert f"- {partial} rows already done (in main jsonl)".encode() in resumed.stdout
    rows = read_jsonl(output)
    keys = [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows]
    assert keys == sorted({(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rollouts})
    assert (tmp_path / "out_failures.jsonl").read_bytes() == b""

    clean = tmp_path / "clean.jsonl"
    again = subprocess.run(
        _command(config, tmp_path, clean), cwd=REPO_ROOT, env=env, capture_output=True, timeout=90
    )
    assert again.returncode == 0, again.stderr.decode()
    assert (tmp_path / "out_aggregate_metrics.json").read_bytes() == (
        tmp_path / "clean_aggregate_metrics.json"
    ).read_bytes()
    assert read_jsonl(clean) == rows


def test_ctrl_c_leaves_the_output_resumable(
    tmp_path: Path, start_resources_server: Callable[..., ServerProcess]
) -> None:
    server = start_resources_server(latency_ms=3, no_log=True)
    materialized, rollouts = mcqa_rows(1500, 2)
    write_jsonl(tmp_path / "inputs.jsonl", materialized)
    write_jsonl(tmp_path / "rollouts.jsonl", rollouts)
    config = write_gym_config(tmp_path / "cfg.yaml", {"mcqa": server})
    env = {**server_env(), "CI": "1"}
    output = tmp_path / "out.jsonl"
    log = tmp_path / "child.log"
    with open(log, "wb") as sink:
        child = subprocess.Popen(
            _command(config, tmp_path, output), cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=sink
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (output.exists() and output.stat().st_size > 0):
        assert child.poll() is None, log.read_text()
        time.sleep(0.02)
    child.send_signal(signal.SIGINT)
    assert child.wait(10) == 130
    lines = [line for line in log.read_text().strip().splitlines() if not line.startswith("Warning: ")]
    partial = len(read_jsonl(output))
    assert len(lines) == 1 and lines[0].startswith(f"Interrupted; kept {partial} verified rows in"), lines
    assert "--resume" in lines[0]
    assert 0 < partial < 3000
    resumed = subprocess.run(
        _command(config, tmp_path, output, "--resume"),
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        timeout=90,
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert len(read_jsonl(output)) == 3000


def test_a_killed_default_mode_run_does_not_stay_running(
    tmp_path: Path, start_resources_server: Callable[..., ServerProcess]
) -> None:
    """kill -9 of an orchestrated run: its rows verified so far are kept (each is recorded as it
    completes), and the next orchestrated command marks its flow run Crashed."""
    from gymflow.flows import _server
    from gymflow.flows._runtime import crash_orphans, prefect_api
    from tests.prefect_api import local_client

    _server.ensure(90.0)
    server = start_resources_server(latency_ms=3, no_log=True)
    materialized, rollouts = mcqa_rows(2500, 2)
    write_jsonl(tmp_path / "inputs.jsonl", materialized)
    write_jsonl(tmp_path / "rollouts.jsonl", rollouts)
    config = write_gym_config(tmp_path / "cfg.yaml", {"mcqa": server})
    output = tmp_path / "out.jsonl"
    command = [part for part in _command(config, tmp_path, output) if part != "--direct"]
    child = subprocess.Popen(
        command, cwd=REPO_ROOT, env={**server_env(), "CI": "1"}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (
        output.exists() and len(output.read_bytes().splitlines()) >= 300
    ):
        assert child.poll() is None
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait(10)
    kept = len(read_jsonl(output))
    assert kept >= 300  # rows are in the output as they complete, not at a batch's end

    def killed_runs() -> list[object]:
        with local_client() as client:
            runs = client.read_flow_runs(limit=200)
        return [run for run in runs if (run.infrastructure_pid or "").endswith(f":{child.pid}")]

    (run,) = killed_runs()
    assert run.state_type.value == "RUNNING"  # type: ignore[attr-defined]
    with prefect_api():
        assert crash_orphans() >= 1
    (run,) = killed_runs()
    assert run.state_type.value == "CRASHED", run.state  # type: ignore[attr-defined]
    assert "is gone" in (run.state.message or "")  # type: ignore[attr-defined]

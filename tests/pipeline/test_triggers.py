"""Triggers end to end: ``gymflow serve`` in a subprocess, ``gymflow notify RUN`` starts a
``post-run`` flow run for RUN, a completed flow run of the configured evaluation flow starts one
for the run its parameter names, and the sweep schedule finds a stale run under its prefix."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.prefect_api import local_client

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "post_run"

# An evaluation as a Prefect flow of its own: it writes the run's shards and completes.
EVALUATION = """
import shutil, sys
from prefect import flow

@flow(name="nightly-eval")
def nightly_eval(output_dir: str) -> None:
    shutil.copytree(sys.argv[1], output_dir + "/shards")

nightly_eval(sys.argv[2])
"""


def _wait_for(path: Path, process: subprocess.Popen[str], timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert process.poll() is None, f"gymflow serve exited early:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {path.name} after {timeout_s} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.5)


def _completed_post_runs(run_uri: str) -> list[str]:
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    with local_client() as client:
        runs = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=["post-run"])),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.COMPLETED]))
            ),
        )
    return [str(run.id) for run in runs if run.parameters.get("run") == run_uri]


def test_notify_and_the_evaluation_flow_start_post_and_the_sweep_finds_a_stale_run(tmp_path: Path) -> None:
    notified = tmp_path / "notified"
    evaluated = tmp_path / "evaluated"
    prefix = tmp_path / "results"
    stale = prefix / "stale-run"
    for run in (notified, stale):
        shutil.copytree(EXAMPLE / "shards", run / "shards")
    env = {**os.environ, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        serve = subprocess.Popen(
            [
                *(
                    sys.executable,
                    "-m",
                    "gymflow.cli",
                    "serve",
                    "--sweep",
                    str(prefix),
                    "--sweep-interval",
                    "15",
                ),
                *("--evaluation-flow", "nightly-eval", "--run-parameter", "output_dir"),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while "Serving" not in log.read_text():
            assert serve.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert log.read_text().startswith("Serving eval post deployments against http://127.0.0.1:")
        notify = subprocess.run(
            [sys.executable, "-m", "gymflow.cli", "notify", str(notified)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert notify.returncode == 0, notify.stderr
        assert notify.stdout.startswith(f"Emitted gymflow.eval.completed for {notified.as_uri()} (event ")
        _wait_for(notified / "quality_summary.provenance.json", serve, 120, log)
        from gymflow.flows import _server

        evaluation = subprocess.run(
            [sys.executable, "-c", EVALUATION, str(EXAMPLE / "shards"), str(evaluated)],
            env={**env, "PREFECT_API_URL": _server.api_url()},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert evaluation.returncode == 0, evaluation.stderr[-3000:]
        _wait_for(evaluated / "quality_summary.provenance.json", serve, 120, log)
        _wait_for(stale / "quality_summary.provenance.json", serve, 60, log)
        # A run's final state lands after its reports: wait for it before stopping the server.
        deadline = time.monotonic() + 90
        for uri, name in ((notified.as_uri(), "notified"), (str(evaluated), "evaluated")):
            while not _completed_post_runs(uri):
                assert time.monotonic() < deadline, f"no completed post-run flow run for the {name} run"
                time.sleep(0.5)
    finally:
        os.killpg(serve.pid, signal.SIGINT)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()
    record = json.loads((notified / "quality_summary.provenance.json").read_text())
    assert record["orchestrator"]["kind"] == "prefect"
    assert (notified / "rollouts_aggregate_metrics.json").is_file()

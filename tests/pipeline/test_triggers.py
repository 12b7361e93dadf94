"""Triggers end to end: ``gymflow serve`` in a subprocess, ``gymflow notify RUN`` starts a
``post-run`` flow run for RUN, a completed flow run of the configured evaluation flow starts one
for the run its parameter names, and the sweep schedule finds a stale run under its prefix; Ctrl-C
leaves nothing scheduled. serve's deployments and those of ``deployments/prefect.yaml`` are apart."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from gymflow.cli import serve as serve_cli
from tests.prefect_api import local_client

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "post_run"

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


def _served() -> dict[str, tuple[bool, int]]:
    """serve's deployments (flow/deployment) -> (paused, schedule-made runs still scheduled)."""
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    out = {}
    with local_client() as client:
        for name in ("post-run/post-serve", "post-sweep/sweep-serve", "gymflow-command/command-serve"):
            deployment = client.read_deployment_by_name(name)
            runs = client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id])),
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))
                ),
            )
            out[name] = (deployment.paused, sum(run.auto_scheduled for run in runs))
    return out


def test_serve_and_prefect_yaml_name_their_deployments_apart() -> None:
    from gymflow.config import ServeConfig

    config = ServeConfig(
        config_paths=(),
        sweep="s3://b/r",
        sweep_interval=60.0,
        evaluation_flow=None,
        run_parameter="output_dir",
        verbose=False,
    )
    served = {f"{d.flow_name}/{d.name}" for d in serve_cli.deployments(config, [])}
    assert served == {"post-run/post-serve", "post-sweep/sweep-serve", "gymflow-command/command-serve"}
    flows = {"post_run": "post-run", "post_sweep": "post-sweep", "gymflow_command": "gymflow-command"}
    declared = yaml.safe_load((REPO / "deployments" / "prefect.yaml").read_text())["deployments"]
    names = {f"{flows[d['entrypoint'].split(':')[1]]}/{d['name']}" for d in declared}
    assert {"post-run/post", "post-sweep/sweep"} <= names
    assert not served & names


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
        # (after the line saying the local server starts, when this is its first start)
        serving = [line for line in log.read_text().splitlines() if "Serving" in line]
        assert serving[0].startswith("Serving eval post deployments against http://127.0.0.1:"), serving
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
        before = _served()
        assert not any(paused for paused, _ in before.values()), before
        assert before["post-sweep/sweep-serve"][1] > 1, before  # the schedule's next runs
    finally:
        os.killpg(serve.pid, signal.SIGINT)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()
    assert serve.returncode == 130, log.read_text()[-3000:]
    # Stopping serve removed what it scheduled: its deployments are paused, no schedule-made run waits.
    assert _served() == dict.fromkeys(before, (True, 0))
    record = json.loads((notified / "quality_summary.provenance.json").read_text())
    assert record["orchestrator"]["kind"] == "prefect"
    assert (notified / "rollouts_aggregate_metrics.json").is_file()

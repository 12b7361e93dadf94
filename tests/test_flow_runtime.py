"""What :func:`gymflow.flows._runtime.run_flow` does around a command's work, on the real local
API: the housekeeping (crashing orphaned runs, claiming this run) runs beside the work, not before
it, and is done when the command returns; the progress artifact is written sparingly."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from uuid import UUID

import pytest

from gymflow.run_context import RunContext
from tests.prefect_api import local_client


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_housekeeping_runs_beside_the_work_and_is_done_when_the_command_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from prefect import flow
    from prefect.runtime import flow_run
    from prefect.states import Running

    from gymflow.flows import _runtime, _server

    _server.ensure(90.0)

    @flow(name="orphan-test")
    def orphan() -> None:
        pass

    with local_client() as client:
        stale = client.create_flow_run(orphan, state=Running())
        client.update_flow_run(stale.id, infrastructure_pid=f"gymflow:{socket.gethostname()}:{_dead_pid()}")

    work_started = threading.Event()
    waited: list[bool] = []
    sweep = _runtime.crash_orphans

    def sweep_once_the_work_runs(client: object = None) -> int:
        # Housekeeping that ran before the work would wait here in vain.
        waited.append(work_started.wait(timeout=30))
        return sweep(client)  # type: ignore[arg-type]

    monkeypatch.setattr(_runtime, "crash_orphans", sweep_once_the_work_runs)

    @flow(name="housekeeping-test", validate_parameters=False)
    def probe(ctx: RunContext, workers: int) -> str:
        with _runtime.flow_executor(ctx, workers, "testing"):
            work_started.set()
            return str(flow_run.get_id())

    run_id, _ = _runtime.run_flow(probe, RunContext(), 1)
    assert waited == [True]
    with local_client() as client:
        assert client.read_flow_run(stale.id).state_type.value == "CRASHED"  # type: ignore[union-attr]
        mine = client.read_flow_run(UUID(run_id)).infrastructure_pid
    assert mine == f"gymflow:{socket.gethostname()}:{os.getpid()}"


def test_progress_artifact_is_written_at_most_once_an_interval_and_when_complete() -> None:
    from prefect import flow
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from gymflow.flows._publish import RunProgress
    from gymflow.flows._runtime import run_flow

    def shown(key: str) -> list[float]:
        with local_client() as client:
            found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
        return [float(artifact.data) for artifact in found]  # type: ignore[arg-type]

    @flow(name="progress-test", validate_parameters=False)
    def probe(ctx: RunContext, workers: int) -> list[list[float]]:
        progress = RunProgress("progress-test", f"/tmp/progress-{os.getpid()}", 4.0, interval_s=3600.0)
        seen = []
        for _ in range(4):
            progress.advance(1.0)
            seen.append(shown(progress.key))
        return seen

    seen, _ = run_flow(probe, RunContext(), 1)
    # Created at 25 %, not written again within the interval, written when complete.
    assert seen == [[25.0], [25.0], [25.0], [100.0]]


def test_stored_parameters_are_prefects_encoding_redacted_without_fastapi() -> None:
    """What the API stores of a run's parameters: what Prefect's encoder (FastAPI's) gives for
    gymflow's dataclasses and settings, with secrets redacted; a callback by its type name."""
    from fastapi.encoders import jsonable_encoder
    from prefect import flow

    from gymflow.flows._runtime import _jsonable, run_flow
    from gymflow.health import HealthOptions
    from gymflow.provenance import redact

    ctx = RunContext(
        storage_options={"s3": {"key": "AKIA-CANARY", "endpoint_url": "http://127.0.0.1:9"}},
        config={"prefect": {"port": 4200}, "servers": [{"api_key": "sk-canary"}]},
    )
    options = HealthOptions(("a/rollouts.jsonl",), "a", 2, ("check",), True)
    for value in (ctx, options, [options, (1, 2.5, None)]):
        assert _jsonable(value) == jsonable_encoder(value)
    assert _jsonable(print) == "<builtin_function_or_method>"

    @flow(name="parameters-test", validate_parameters=False)
    def probe(ctx: RunContext, workers: int, options: HealthOptions, echo: object) -> str:
        from prefect.runtime import flow_run

        return str(flow_run.get_id())

    run_id, _ = run_flow(probe, ctx, 1, options=options, echo=print)
    with local_client() as client:
        stored = client.read_flow_run(UUID(run_id)).parameters
    expected = {"ctx": jsonable_encoder(ctx), "workers": 1, "options": jsonable_encoder(options)}
    assert stored == redact({**expected, "echo": "<builtin_function_or_method>"})
    assert "AKIA-CANARY" not in str(stored) and "sk-canary" not in str(stored)


def test_the_post_flow_parameter_schema_describes_its_options() -> None:
    """Prefect builds a flow's parameter schema from its annotations when the flow is defined; a
    type the pipeline imports only for type checking would leave ``options`` undescribed, silently."""
    from gymflow.flows.post import post_flow

    schema = post_flow.parameters.model_dump()
    assert schema["properties"]["options"]["$ref"] == "#/definitions/PostOptions"
    assert "reverify" in schema["definitions"]["PostOptions"]["properties"]

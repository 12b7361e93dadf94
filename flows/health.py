"""The ``eval health-check`` flow: :func:`gymflow.health.run_health` on the Prefect executor,
then the run's artifacts. It holds no sequence of its own."""

from __future__ import annotations

from collections.abc import Callable

from prefect import flow

from gymflow import health, storage
from gymflow.flows._annotations import Returned
from gymflow.flows._artifacts import publish_health
from gymflow.flows._publish import RunProgress
from gymflow.flows._runtime import flow_executor
from gymflow.health import HealthOptions, HealthOutcome
from gymflow.run_context import RunContext


@flow(name="eval-health-check", log_prints=False, validate_parameters=False)
def health_check(
    options: HealthOptions,
    ctx: RunContext,
    workers: int,
    progress: Callable[[int], None] | None = None,
) -> Returned[HealthOutcome]:
    """Health-check rollout files and write reports and provenance (``progress``: advanced by
    each range's bytes as it completes)."""
    with flow_executor(ctx, workers, "running rollout health checks") as (executor, recorded):
        total = sum(storage.size(path) for path in options.paths)
        artifact = RunProgress("eval-health-check", options.report_dir or options.paths[0], total)

        def advanced(nbytes: int) -> None:
            artifact.advance(nbytes)
            if progress is not None:
                progress(nbytes)

        outcome = health.run_health(options, recorded, executor, advanced)
    publish_health(outcome)
    return Returned(outcome)  # the summary object is large: Prefect must not walk it

"""The ``eval join`` flow: :func:`gymflow.join.run_join` on the Prefect executor, then the run's
artifacts. It holds no sequence of its own."""

from __future__ import annotations

from collections.abc import Callable

from prefect import flow

from gymflow.flows._artifacts import publish_join
from gymflow.flows._runtime import flow_executor
from gymflow.join import JoinResult, JoinSettings, run_join
from gymflow.run_context import RunContext


@flow(name="eval-join", log_prints=False, validate_parameters=False)
def join_flow(
    settings: JoinSettings,
    ctx: RunContext,
    workers: int,
    use_cache: bool = True,
    progress: Callable[[int], None] | None = None,
) -> JoinResult:
    """Join ``settings.rollouts`` with its capture store into ``settings.output`` (``progress``:
    advanced by each range's bytes as it completes)."""
    with flow_executor(ctx, workers, "joining rollouts") as (executor, recorded):
        result = run_join(
            settings, recorded, executor, use_cache=use_cache, workers=workers, progress=progress
        )
    publish_join(result)
    return result

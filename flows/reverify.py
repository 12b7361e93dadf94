"""The ``eval reverify`` flow: :func:`gymflow.reverify.run_reverify` on the Prefect executor (its
batches are cached tasks), then the run's artifacts. It holds no sequence of its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from prefect import flow

from gymflow.flows._annotations import Returned
from gymflow.flows._artifacts import publish_reverify
from gymflow.flows._runtime import flow_executor
from gymflow.reverify import Progress, ReverifyOptions, ReverifyOutcome, run_reverify
from gymflow.reverify._plan import Echo
from gymflow.run_context import RunContext
from gymflow.tasks.executor import PrefectExecutor

if TYPE_CHECKING:  # the pipeline (every command's core) is not imported to re-verify
    from gymflow.pipeline import Reverify


@flow(name="eval-reverify", log_prints=False, validate_parameters=False)
def reverify_flow(
    options: ReverifyOptions,
    gym_config: Mapping[str, Any],
    ctx: RunContext,
    workers: int,
    echo: Echo,
    progress: Progress | None = None,
    warn: Echo | None = None,
) -> Returned[ReverifyOutcome]:
    """Re-verify the selected rollouts through their resources servers' ``/verify``."""
    with flow_executor(ctx, workers, "re-verifying") as (executor, recorded):
        outcome = run_reverify(options, gym_config, echo, progress, recorded, executor, warn=warn)
    publish_reverify(outcome)
    return Returned(outcome)  # its metrics hold a group block per task: Prefect must not walk them


def flow_reverifier(ctx: RunContext, executor: PrefectExecutor) -> Reverify:
    """The reverify step of a pipeline running in this flow (``eval post``)."""

    def reverify(options: ReverifyOptions, gym_config: Mapping[str, Any], echo: Echo) -> ReverifyOutcome:
        return run_reverify(options, gym_config, echo, None, ctx, executor)

    return reverify

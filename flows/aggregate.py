"""The ``eval aggregate`` flows: :func:`gymflow.aggregate.run_aggregate` (and for the command,
the health check after it, :func:`gymflow.pipeline.aggregate_then_health`) on the Prefect
executor, then the run's artifacts. They hold no sequence of their own. Console text goes to
``echo`` as the steps run, as in ``--direct``."""

from __future__ import annotations

from collections.abc import Callable

from prefect import flow

from gymflow import pipeline
from gymflow.aggregate import AggregateOptions, AggregateOutcome
from gymflow.flows._annotations import Returned
from gymflow.flows._artifacts import publish_aggregate, publish_outcome
from gymflow.flows._runtime import flow_executor
from gymflow.run_context import RunContext


@flow(name="eval-aggregate", log_prints=False, validate_parameters=False)
def aggregate_command(
    options: AggregateOptions,
    ctx: RunContext,
    workers: int,
    echo: Callable[[str], None],
    progress: Callable[[int], None] | None = None,
) -> Returned[AggregateOutcome]:
    """``gymflow eval aggregate``: merge and metrics, then the health check."""
    from gymflow.flows.reverify import flow_reverifier

    with flow_executor(ctx, workers, "aggregating shards") as (executor, recorded):
        steps = pipeline.Runner(recorded, executor, flow_reverifier(recorded, executor), progress)
        outcome, _, _ = pipeline.aggregate_then_health(options, steps, echo)
    publish_aggregate(outcome)  # tags this run as the aggregate command's
    for done in steps.outcomes:
        if done is not outcome:
            publish_outcome(done)
    return Returned(outcome)  # every group's metrics: Prefect must not walk them

"""The ``eval reverify`` flow (spec §5): prepare, then each batch verified in turn, each row
recorded as it completes (one batch in flight keeps at most ``--concurrency`` requests at the
server), then finish. It composes tasks only; every rule lives in ``gymflow.reverify``.

Unlike the other commands, reverify's sequence is still written twice: here as cached batch
tasks, and in :func:`gymflow.reverify.run_reverify` as one stream for ``--direct``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from prefect import flow

from gymflow.flows._annotations import unwalked
from gymflow.flows._artifacts import publish_reverify
from gymflow.flows._publish import RunProgress, lineage, orchestrator
from gymflow.pipeline import Reverify
from gymflow.reverify import COMMAND, BatchResult, ReverifyOptions, ReverifyOutcome
from gymflow.reverify._plan import Echo
from gymflow.reverify._results import Destination
from gymflow.reverify._verify import record_row
from gymflow.run_context import RunContext
from gymflow.tasks import reverify as tasks

BATCH_ROWS = 1000
Progress = Callable[[int, int, int], None]


@dataclass
class ReverifyFlowResult:
    outcome: ReverifyOutcome
    cached_batches: int = 0


@flow(name="eval-reverify", log_prints=False, validate_parameters=False)
def reverify_flow(
    options: ReverifyOptions,
    gym_config: Mapping[str, Any],
    ctx: RunContext,
    workers: int,
    echo: Echo,
    progress: Progress | None = None,
    warn: Echo | None = None,
) -> ReverifyFlowResult:
    """Re-verify the selected rollouts through their resources servers' ``/verify``."""
    recorded = ctx.under(orchestrator())
    with recorded.active(), recorded.lock(options.output_jsonl_fpath, COMMAND):
        result = reverify_batches(options, gym_config, recorded, echo, progress, warn)
    publish_reverify(result.outcome, result.cached_batches)
    return result


def flow_reverifier(ctx: RunContext) -> Reverify:
    """The reverify step of a pipeline running in this flow (``eval post``): its batches are
    tasks of the running flow."""

    def reverify(options: ReverifyOptions, gym_config: Mapping[str, Any], echo: Echo) -> ReverifyOutcome:
        with ctx.lock(options.output_jsonl_fpath, COMMAND):
            return reverify_batches(options, gym_config, ctx, echo).outcome

    return reverify


def reverify_batches(
    options: ReverifyOptions,
    gym_config: Mapping[str, Any],
    ctx: RunContext,
    echo: Echo,
    progress: Progress | None = None,
    warn: Echo | None = None,
) -> ReverifyFlowResult:
    """Prepare, then each batch verified in turn as a task (one batch in flight keeps at most
    ``--concurrency`` requests at the server; each row is recorded as it completes, so an
    interrupted run keeps it), then finish."""
    plan = tasks.prepare(options, unwalked(gym_config), unwalked(echo), unwalked(warn or echo))
    total = len(plan.work)
    done = failures = cached = 0

    def on_row(destination: Destination, row: dict[str, Any]) -> None:
        nonlocal done, failures
        record_row(plan, destination, row, echo)
        done += 1
        failures += destination == "sidecar"
        if progress is not None:
            progress(done, failures, total)

    artifact = RunProgress("eval-reverify", options.output_jsonl_fpath, total / BATCH_ROWS)
    try:
        for batch in plan.batches(BATCH_ROWS):
            before = done
            future = tasks.verify_batch.submit(unwalked(plan), unwalked(batch), unwalked(on_row))
            future.wait()
            result = future.state.result(raise_on_failure=False)
            if not isinstance(result, BatchResult):
                raise result  # the task itself broke (not a row failure): stop, output stays resumable
            if done == before:  # a cache hit: no row completed in this run; record the stored ones
                cached += 1
                done += len(batch)
                failures += len(result.failures)
                tasks.record_batch(unwalked(plan), unwalked(result), unwalked(echo))
                if progress is not None:
                    progress(done, failures, total)
            artifact.advance(len(batch) / BATCH_ROWS)
    except BaseException:
        plan.abort()
        raise
    paths = plan.paths
    written = [paths.output, paths.sidecar, paths.record] + (
        [] if options.disable_aggregation else [paths.metrics]
    )
    sources = (
        options.materialized_inputs_jsonl_fpath,
        options.rollouts_jsonl_fpath,
        options.atif_manifest_jsonl_fpath,
    )
    finish = tasks.finish.with_options(**lineage(written, [source for source in sources if source]))
    outcome = finish(unwalked(plan), unwalked(echo), unwalked(ctx))
    return ReverifyFlowResult(outcome, cached)

"""The ``eval post`` flow: :func:`gymflow.pipeline.run_post` on the Prefect executor, then each
step's artifacts and the run's summary. It holds no logic: the pipeline decides what runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prefect import flow
from prefect.runtime import flow_run

from gymflow import pipeline, provenance, storage
from gymflow.flows._artifacts import publish_outcome
from gymflow.flows._publish import publish, record_inputs
from gymflow.flows._runtime import flow_executor
from gymflow.flows.reverify import flow_reverifier
from gymflow.pipeline import PipelineSummary, PostOptions
from gymflow.run_context import RunContext


@dataclass
class PostResult:
    summary: PipelineSummary
    flow_run_url: str | None = None


def _markdown(summary: PipelineSummary) -> str:
    return "# eval post\n\n```\n" + "\n".join(summary.lines()[2:]) + "\n```"


@flow(name="eval-post", log_prints=False, validate_parameters=False)
def post_flow(
    options: PostOptions,
    ctx: RunContext,
    workers: int,
    echo: Callable[[str], None],
    progress: Callable[[int], None] | None = None,
) -> PostResult:
    """Aggregate, join, health-check and reverify the run at ``options.run``, as configured."""
    with flow_executor(ctx, workers, "running eval post") as (executor, recorded):
        steps = pipeline.Runner(recorded, executor, flow_reverifier(recorded, executor), progress)
        summary = pipeline.run_post(options, steps, echo)
    for outcome in steps.outcomes:
        publish_outcome(outcome)
    reports = {f"{step.name}: {label}": url for step in summary.steps for label, url in step.reports.items()}
    records = [url for url in reports.values() if storage.isfile(provenance.record_path(url))]
    inputs = list(
        {item.uri: item for url in records for item in record_inputs(provenance.record_path(url))}.values()
    )
    reports.update({f"provenance of {storage.name(url)}": provenance.record_path(url) for url in records})
    publish("eval-post", options.run, _markdown(summary), inputs, reports)
    return PostResult(summary, flow_run.get_flow_run_ui_url())

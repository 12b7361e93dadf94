"""The ``eval post`` flow: the pipeline of :mod:`gymflow.pipeline` with each step a subflow.

It holds no logic: :func:`gymflow.pipeline.run_post` decides what runs;
:class:`~gymflow.flows._steps.FlowSteps` runs each command as its own flow (so its provenance
says ``prefect`` and its tasks and artifacts show under this run); the console text is collected
and returned for the CLI to print.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prefect import flow
from prefect.runtime import flow_run

from gymflow import pipeline, storage
from gymflow.config import RunnerConfig
from gymflow.flows._publish import publish, record_inputs
from gymflow.flows._steps import FlowSteps
from gymflow.pipeline import PipelineSummary, PostOptions


@dataclass
class PostResult:
    summary: PipelineSummary
    console_lines: list[str] = field(default_factory=list)
    flow_run_url: str | None = None


def _markdown(summary: PipelineSummary) -> str:
    return "# eval post\n\n```\n" + "\n".join(summary.lines()[2:]) + "\n```"


@flow(name="eval-post", log_prints=False, validate_parameters=False)
def post_flow(
    options: PostOptions,
    step_runner: RunnerConfig,
    workers: int,
    storage_options: dict[str, dict[str, Any]] | None = None,
) -> PostResult:
    """Aggregate, join, health-check and reverify the run at ``options.run``, as configured."""
    storage.configure(storage_options or {})
    lines: list[str] = []
    summary = pipeline.run_post(options, FlowSteps(step_runner, workers), lines.append)
    reports = {f"{step.name}: {label}": url for step in summary.steps for label, url in step.reports.items()}
    records = [url for url in reports.values() if storage.isfile(_record_of(url))]
    inputs = list({item.uri: item for url in records for item in record_inputs(_record_of(url))}.values())
    reports.update({f"provenance of {storage.name(url)}": _record_of(url) for url in records})
    publish("eval-post", options.run, _markdown(summary), inputs, reports)
    return PostResult(summary, lines, flow_run.get_flow_run_ui_url())


def _record_of(report: str) -> str:
    from gymflow import provenance

    return provenance.record_path(report)

"""The ``eval post`` flow: the pipeline of :mod:`gymflow.pipeline` with each step a subflow.

It holds no logic: :func:`gymflow.pipeline.run_post` decides what runs; :class:`FlowSteps` runs
each command as its own flow (so its provenance says ``prefect`` and its tasks and artifacts show
under this run); the console text is collected and returned for the CLI to print.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prefect import flow, tags
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner

from gymflow import pipeline, storage
from gymflow.aggregate import AggregateOptions, AggregateOutcome
from gymflow.config import RunnerConfig
from gymflow.flows._publish import publish, record_inputs
from gymflow.flows._runtime import offloading_runner, task_runner
from gymflow.health import HealthOutcome
from gymflow.join.run import JoinResult, JoinSettings
from gymflow.pipeline import Echo, PipelineSummary, PostOptions
from gymflow.reverify import ReverifyOptions, ReverifyOutcome


class FlowSteps:
    """Each command as a subflow of the running flow, on the configured task runner."""

    def __init__(self, runner: RunnerConfig, workers: int) -> None:
        self.runner = runner
        self.workers = workers

    def aggregate(self, options: AggregateOptions, echo: Echo) -> AggregateOutcome:
        from gymflow.flows.aggregate import aggregate_flow

        subflow = aggregate_flow.with_options(task_runner=task_runner(self.runner, self.workers))
        result = subflow(options=options, storage_options=storage.current_options())
        for line in result.console_lines:
            echo(line)
        return result.outcome

    def join(self, settings: JoinSettings, use_cache: bool) -> JoinResult:
        from gymflow.flows.join import join_flow

        subflow = join_flow.with_options(task_runner=task_runner(self.runner, self.workers))
        return subflow(
            settings=settings,
            workers=self.workers,
            use_cache=use_cache,
            storage_options=storage.current_options(),
        )

    def health(
        self,
        paths: Sequence[str],
        report_dir: str,
        workers: int | None,
        ignored: tuple[str, ...],
        use_cache: bool,
    ) -> HealthOutcome:
        from gymflow.flows.health import health_check

        runner, offload = offloading_runner(self.runner, workers or self.workers)
        return health_check.with_options(task_runner=runner)(
            paths=list(paths),
            report_dir=report_dir,
            workers=workers,
            ignored_checks=list(ignored),
            use_cache=use_cache,
            storage_options=storage.current_options(),
            offload_workers=offload,
        )

    def reverify(
        self, options: ReverifyOptions, gym_config: Mapping[str, Any], echo: Echo
    ) -> ReverifyOutcome:
        from gymflow.flows.reverify import reverify_flow

        subflow = reverify_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=1))
        result = subflow(
            options=options, gym_config=dict(gym_config), storage_options=storage.current_options()
        )
        for line in result.console_lines:
            echo(line)
        return result.outcome


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
    with tags("eval post", storage.name(options.run.rstrip("/"))):
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

"""The pipeline's steps as Prefect subflows (:class:`gymflow.pipeline.Steps`), each on the
configured task runner: what ``eval post`` and ``eval aggregate`` (aggregate, then health) run."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from gymflow import storage
from gymflow.aggregate import AggregateOptions, AggregateOutcome
from gymflow.config import RunnerConfig
from gymflow.flows._annotations import Returned
from gymflow.flows._runtime import offloading_runner
from gymflow.health import HealthOutcome
from gymflow.join import JoinResult, JoinSettings
from gymflow.pipeline import Echo
from gymflow.reverify import ReverifyOptions, ReverifyOutcome


class FlowSteps:
    """Each command as a subflow of the running flow, on the configured task runner."""

    def __init__(
        self, runner: RunnerConfig, workers: int, progress: Callable[[int], None] | None = None
    ) -> None:
        self.runner = runner
        self.workers = workers
        self.progress = progress

    def aggregate(self, options: AggregateOptions, echo: Echo) -> AggregateOutcome:
        from gymflow.flows.aggregate import FlowOutcome, aggregate_flow

        runner, offload = offloading_runner(self.runner, self.workers)
        returned: Returned[FlowOutcome] = aggregate_flow.with_options(task_runner=runner)(
            options=options,
            storage_options=storage.current_options(),
            progress=self.progress,
            offload_workers=offload,
        )
        result = returned.result
        for line in result.console_lines:
            echo(line)
        return result.outcome

    def join(self, settings: JoinSettings, use_cache: bool) -> JoinResult:
        from gymflow.flows.join import join_flow

        runner, offload = offloading_runner(self.runner, self.workers)
        return join_flow.with_options(task_runner=runner)(
            settings=settings,
            workers=self.workers,
            use_cache=use_cache,
            storage_options=storage.current_options(),
            offload_workers=offload,
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
        returned: Returned[HealthOutcome] = health_check.with_options(task_runner=runner)(
            paths=list(paths),
            report_dir=report_dir,
            workers=workers,
            ignored_checks=list(ignored),
            use_cache=use_cache,
            storage_options=storage.current_options(),
            offload_workers=offload,
        )
        return returned.result

    def reverify(
        self, options: ReverifyOptions, gym_config: Mapping[str, Any], echo: Echo
    ) -> ReverifyOutcome:
        from gymflow.flows.reverify import reverify_flow

        runner: TaskRunner[Any] = ThreadPoolTaskRunner(max_workers=1)
        subflow = reverify_flow.with_options(task_runner=runner)
        result = subflow(
            options=options, gym_config=dict(gym_config), storage_options=storage.current_options()
        )
        for line in result.console_lines:
            echo(line)
        return result.outcome

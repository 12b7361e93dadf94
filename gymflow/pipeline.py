"""The one place that chains commands.

``eval post RUN``: aggregate (when the run has shards) -> join (when rows carry raw capture but no
``ng_trajectory``) -> health-check -> the merged rollouts' metrics over the healthy ones
(:mod:`gymflow.healthy`, when aggregate merged shards) -> reverify (when configured).
``eval aggregate``: aggregate -> health-check (aggregate.md §1.8). Each step is one command's
runner, called with the :class:`Runner`'s context and executor: :func:`direct_runner` runs them
in this process; the Prefect flows pass the Prefect executor, so the sequence below is the same
in both paths and a Prefect run is a Prefect run all the way down.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import orjson

from gymflow import collector, storage
from gymflow.aggregate import AggregateOptions, AggregateOutcome
from gymflow.errors import GymflowError
from gymflow.executor import Executor
from gymflow.frozen import FrozenDict, freeze
from gymflow.parallel import default_workers
from gymflow.reverify import ReverifyOptions, ReverifyOutcome, run_reverify
from gymflow.run_context import RunContext

if TYPE_CHECKING:  # imported by the steps that run them (40-60 ms each): `eval aggregate
    # --no-health-check` needs none of them. (ReverifyOptions types a field of PostOptions, whose
    # schema Prefect builds when the post flow is defined: it must resolve at run time.)
    from gymflow.health import HealthOptions, HealthOutcome
    from gymflow.healthy import HealthyOptions, HealthyOutcome
    from gymflow.join import JoinResult, JoinSettings

logger = logging.getLogger(__name__)

Echo = Callable[[str], None]
StepStatus = Literal["ran", "up to date", "skipped", "failed"]
HEALTH_FAILED = "Rollout health checks failed after aggregation; aggregate artifacts are still available."
_RAW_EVIDENCE = ("ng_model_call_capture", "ng_agent_observations")


_Outcome = TypeVar("_Outcome")

Reverify = Callable[[ReverifyOptions, Mapping[str, Any], Echo], ReverifyOutcome]
"""How a pipeline re-verifies (the direct path: :func:`gymflow.reverify.run_reverify`)."""


@dataclass
class Runner:
    """Where a pipeline's commands run: their context, executor and reverify path; ``progress``
    advances by the bytes of each shard read."""

    ctx: RunContext
    executor: Executor | None
    """None: each command on its own default executor (this process and its pool)."""
    reverify: Reverify
    progress: Callable[[int], None] | None = None
    outcomes: list[object] = field(default_factory=list)
    """Every command's outcome, in order (the flows publish each)."""

    def _done(self, outcome: _Outcome) -> _Outcome:
        """A step is over: keep its outcome, give back the memory it freed (the next step's
        workers start beside this process)."""
        self.outcomes.append(outcome)
        collector.release_memory()
        return outcome

    def aggregate(self, options: AggregateOptions, echo: Echo) -> AggregateOutcome:
        from gymflow.aggregate import run_aggregate

        outcome = run_aggregate(options, self.ctx, self.executor, echo, self.progress)
        return self._done(outcome)

    def join(self, settings: JoinSettings, use_cache: bool, workers: int) -> JoinResult:
        from gymflow.join import run_join

        result = run_join(settings, self.ctx, self.executor, use_cache=use_cache, workers=workers)
        return self._done(result)

    def health(self, options: HealthOptions) -> HealthOutcome:
        from gymflow.health import run_health

        outcome = run_health(options, self.ctx, self.executor)
        return self._done(outcome)

    def healthy_metrics(self, options: HealthyOptions) -> HealthyOutcome:
        from gymflow.healthy import run_healthy_metrics

        outcome = run_healthy_metrics(options, self.ctx, self.executor)
        return self._done(outcome)

    def reverify_step(
        self, options: ReverifyOptions, gym_config: Mapping[str, Any], echo: Echo
    ) -> ReverifyOutcome:
        outcome = self.reverify(options, gym_config, echo)
        return self._done(outcome)

    def report_html(self, run: str, summary: PipelineSummary, use_cache: bool) -> StepReport:
        """``RUN/report.html`` (:mod:`gymflow.view`) through the executor, like every report write;
        a failure to render is logged and shown as the step's status, never fails the run. When
        every other step found its reports up to date, the report written with them stands."""
        from gymflow.executor import LocalExecutor
        from gymflow.view import FILES, WRITE_REPORT_HTML, ReportJob, StepRow

        url = storage.join(run, FILES["report"])
        unchanged = all(s.status in ("up to date", "skipped") for s in summary.steps)
        if use_cache and unchanged and storage.exists(url):
            return StepReport("report", "up to date", {"html": url})
        rows = [StepRow(s.name, s.status, ", ".join([*s.reports.values(), *s.lines])) for s in summary.steps]
        job = ReportJob.of(run, rows, summary.failures)
        try:
            if self.executor is None:
                with LocalExecutor(self.ctx) as local:
                    url = local.call(WRITE_REPORT_HTML, job)
            else:
                url = self.executor.call(WRITE_REPORT_HTML, job)
        except Exception as exc:  # noqa: BLE001 - the viewer's page must not fail the reports
            logger.warning("report.html was not written: %s: %s", type(exc).__name__, exc)
            logger.debug("report.html failure", exc_info=True)
            return StepReport("report", "failed", lines=[f"{type(exc).__name__}: {exc}"])
        return StepReport("report", "ran", {"html": url})


@dataclass(frozen=True)
class HealthStep:
    workers: int | None = None
    ignored: tuple[str, ...] = ()


@dataclass(frozen=True)
class PostOptions:
    """``eval post`` after its config is composed and validated (the CLI builds it)."""

    run: str
    shards: str = "shards/*.jsonl"
    """Glob of shard files, relative to the run; none matching means the run is not sharded."""
    rollouts: str = "rollouts.jsonl"
    """The run's rollouts (the merged file when there are shards)."""
    capture_dir: str = "model-calls"
    health: HealthStep = field(default_factory=HealthStep)
    aggregate: AggregateOptions | None = None
    """Aggregate settings; ``input_glob``/``output`` are filled from ``shards``/``rollouts``."""
    reverify: ReverifyOptions | None = None
    """Set when the config enables the reverify step."""
    gym_config: Mapping[str, Any] = field(default_factory=FrozenDict)
    use_cache: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "gym_config", freeze(self.gym_config))

    def path(self, relative: str) -> str:
        return storage.resolve_under(self.run, relative)


@dataclass
class StepReport:
    """What one step of a pipeline did, for the closing summary and the flow's artifacts."""

    name: str
    status: StepStatus
    reports: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


@dataclass
class PipelineSummary:
    steps: list[StepReport] = field(default_factory=list)
    verdicts: dict[str, int] = field(default_factory=dict)
    key_metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    rewards: list[str] = field(default_factory=list)
    """``mean/reward`` of each group over all rollouts and over the healthy ones."""

    def step(self, name: str) -> StepReport | None:
        return next((step for step in self.steps if step.name == name), None)

    def lines(self) -> list[str]:
        """The closing summary printed after every step's own output."""
        out = ["", "Summary:"]
        for step in self.steps:
            where = ", ".join([*(f"{label} {url}" for label, url in step.reports.items()), *step.lines])
            out.append(f"  {step.name}: {step.status}" + (f" ({where})" if where else ""))
        if self.verdicts:
            out.append("  verdicts: " + ", ".join(f"{count} {name}" for name, count in self.verdicts.items()))
        for label, metrics in self.key_metrics.items():
            shown = ", ".join(f"{name} {value}" for name, value in metrics.items())
            out.append(f"  key metrics of {label}: {shown}")
        out.extend(f"  {line}" for line in self.rewards)
        if self.failures:
            out.append(
                "  failures by class: " + ", ".join(f"{n} {c}" for c, n in sorted(self.failures.items()))
            )
        return out


def needs_join(path: str) -> bool:
    """Whether a rollouts file's rows carry raw capture or observations but no ``ng_trajectory``
    (judged on its first readable row: a run is joined as a whole or not at all)."""
    for _, line in storage.iter_lines(path):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(row, dict):
            return "ng_trajectory" not in row and any(key in row for key in _RAW_EVIDENCE)
    return False


def aggregate_then_health(
    options: AggregateOptions, steps: Runner, echo: Echo
) -> tuple[AggregateOutcome, HealthOutcome | None, str | None]:
    """``eval aggregate``: merge and metrics, then health-check the merged file (§1.8). A failing
    health check is logged and returned as text; it never fails the command."""
    outcome = steps.aggregate(replace(options, health_check=False), echo)
    if not options.health_check:
        return outcome, None, None
    from gymflow.health import HealthOptions

    paths = [options.output] if options.merge_shards else list(outcome.shards)
    try:
        health = steps.health(
            HealthOptions(
                tuple(paths),
                storage.parent(options.output),
                options.health_check_workers,
                options.health_check_ignored,
                options.use_cache,
            )
        )
    except Exception as exc:  # noqa: BLE001 - a health failure must not fail the command (§1.8)
        logger.warning(HEALTH_FAILED)
        logger.debug("health check failure", exc_info=True)
        return outcome, None, f"{type(exc).__name__}: {exc}"
    echo(health.console_line)
    echo(f"Quality summary: {health.summary_url}")
    return outcome, health, None


def run_post(options: PostOptions, steps: Runner, echo: Echo) -> PipelineSummary:
    """``eval post``: every step whose inputs are present, in order; one summary at the end."""
    summary = PipelineSummary()
    rollouts = options.path(options.rollouts)
    shards = _matching(options.path(options.shards))
    aggregated: tuple[AggregateOptions, AggregateOutcome] | None = None

    if shards:
        base = options.aggregate or AggregateOptions(input_glob="", output="")
        aggregate = replace(
            base, input_glob=options.path(options.shards), output=rollouts, health_check=False
        )
        outcome = steps.aggregate(aggregate, echo)
        aggregated = (aggregate, outcome)
        report = StepReport("aggregate", "up to date" if outcome.up_to_date else "ran")
        if outcome.merged:
            report.reports["merged"] = outcome.output
        report.reports["metrics"] = outcome.metrics_path
        summary.steps.append(report)
        for entry in outcome.entries:
            summary.key_metrics[entry["agent_ref"]["name"]] = dict(entry.get("key_metrics", {}))
        if outcome.coverage is not None:
            for name, count in outcome.coverage.dropped.items():
                summary.failures[name] = summary.failures.get(name, 0) + count
    else:
        summary.steps.append(StepReport("aggregate", "skipped", lines=["no shards"]))

    if not storage.isfile(rollouts):
        raise _NoRollouts(f"no rollouts in {options.run}: {rollouts} does not exist and no shards matched")

    checked = rollouts
    if needs_join(rollouts):
        from gymflow.join import resolve_settings

        settings = resolve_settings(options.run, options.rollouts, options.capture_dir)
        result = steps.join(settings, options.use_cache, options.health.workers or default_workers())
        summary.steps.append(
            StepReport("join", "up to date" if result.up_to_date else "ran", {"joined": settings.output})
        )
        checked = settings.output
    else:
        summary.steps.append(StepReport("join", "skipped", lines=["rows already carry ng_trajectory"]))

    from gymflow.health import HealthOptions

    health = steps.health(
        HealthOptions(
            (checked,), options.run, options.health.workers, options.health.ignored, options.use_cache
        )
    )
    echo(health.console_line)
    summary.steps.append(
        StepReport(
            "health-check", "up to date" if health.up_to_date else "ran", {"summary": health.summary_url}
        )
    )
    summary.verdicts = dict(health.run.get("verdicts", {}))
    rows = health.healthy_rows if checked == rollouts else None  # its own flags of these rows
    _healthy_metrics(aggregated, health, rows, options.use_cache, steps, summary)

    if options.reverify is None:
        summary.steps.append(StepReport("reverify", "skipped", lines=["reverify.enabled is false"]))
    else:
        reverified = steps.reverify_step(options.reverify, options.gym_config, echo)
        summary.steps.append(_reverify_report(reverified))
        for name, count in reverified.tally.failures.items():
            summary.failures[name] = summary.failures.get(name, 0) + count
    summary.steps.append(steps.report_html(options.run, summary, options.use_cache))
    return summary


def _healthy_metrics(
    aggregated: tuple[AggregateOptions, AggregateOutcome] | None,
    health: HealthOutcome,
    healthy_rows: bytes | None,
    use_cache: bool,
    steps: Runner,
    summary: PipelineSummary,
) -> None:
    """The merged rollouts' metrics over the healthy ones only (:mod:`gymflow.healthy`);
    ``healthy_rows``: the health check's flags of the merged rows, when it checked that file."""
    if aggregated is None or not aggregated[1].merged:
        reason = "no shards" if aggregated is None else "rollouts not merged"
        summary.steps.append(StepReport("healthy-metrics", "skipped", lines=[reason]))
        return
    from gymflow.healthy import HealthyOptions, reward_lines

    options, outcome = aggregated
    healthy = steps.healthy_metrics(
        HealthyOptions(outcome.output, health.verdicts_url, options, use_cache, healthy_rows)
    )
    summary.steps.append(
        StepReport(
            "healthy-metrics", "up to date" if healthy.up_to_date else "ran", {"metrics": healthy.output}
        )
    )
    summary.rewards = reward_lines(
        outcome.entries, healthy.entries, rollouts=(outcome.rollouts, healthy.rollouts)
    )


def _reverify_report(outcome: ReverifyOutcome) -> StepReport:
    status: StepStatus = "ran" if outcome.tally.verified else "up to date"
    reports = {"reverified": outcome.output, "failures": outcome.sidecar}
    if outcome.metrics_path:
        reports["metrics"] = outcome.metrics_path
    return StepReport("reverify", status, reports)


class _NoRollouts(GymflowError):
    """``eval post`` found neither shards nor a rollouts file."""


def _matching(pattern: str) -> list[str]:
    from gymflow.aggregate import select_shards

    try:
        return select_shards(pattern)
    except GymflowError:
        return []


def direct_runner(ctx: RunContext, progress: Callable[[int], None] | None = None) -> Runner:
    """A pipeline in this process (``--direct``): each command on its default executor."""

    def reverify(options: ReverifyOptions, gym_config: Mapping[str, Any], echo: Echo) -> ReverifyOutcome:
        return run_reverify(options, gym_config, echo)

    return Runner(ctx, None, reverify, progress)

"""The health-check flow: hash, plan byte ranges, evaluate them as coarse tasks, reduce, write.

It composes tasks only; every rule lives in ``gymflow.health``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from prefect import flow

from gymflow import health, locking, provenance, storage
from gymflow.flows._annotations import Returned, unwalked
from gymflow.flows._publish import RunProgress, lineage, orchestrator, publish, record_inputs
from gymflow.flows._runtime import process_pool
from gymflow.health import HealthOutcome
from gymflow.tasks import health as tasks


def _publish(outcome: HealthOutcome, report_dir: str) -> None:
    """The run's artifacts (also for a cached run: they link the reports it found up to date)."""
    run = outcome.summary["run"]
    rows = ["| verdict | rollouts |", "|---|---|"]
    rows += [f"| {verdict} | {count} |" for verdict, count in run["verdicts"].items()]
    rows += [f"| issue: {check} | {count} |" for check, count in run["issues"].items() if count]
    state = " (up to date: nothing recomputed)" if outcome.up_to_date else ""
    markdown = "\n".join([f"# eval health-check\n\n**{outcome.console_line}**{state}\n", *rows])
    reports = {
        "quality summary": outcome.summary_url,
        "rollout verdicts": storage.join(report_dir, "rollout_verdicts.jsonl"),
        "provenance": outcome.record_url,
    }
    publish("eval-health-check", report_dir, markdown, record_inputs(outcome.record_url), reports)


@flow(name="eval-health-check", log_prints=False)
def health_check(
    paths: Sequence[str],
    report_dir: str,
    workers: int | None = None,
    ignored_checks: Sequence[str] = (),
    use_cache: bool = True,
    storage_options: dict[str, dict[str, Any]] | None = None,
    offload_workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Returned[HealthOutcome]:
    """Health-check rollout files and write reports and provenance into ``report_dir``.

    With ``offload_workers``, range tasks hand their work to that many core-only processes;
    ``progress`` is advanced by each range's bytes as it completes.
    """
    storage.configure(storage_options or {})
    summary_url = storage.join(report_dir, "quality_summary.json")
    with locking.run_lock(summary_url, health.COMMAND):
        outcome = _checked(
            paths, report_dir, summary_url, workers, ignored_checks, use_cache, offload_workers, progress
        )
    return Returned(outcome)  # the summary object is large: Prefect must not walk it


def _checked(
    paths: Sequence[str],
    report_dir: str,
    summary_url: str,
    workers: int | None,
    ignored_checks: Sequence[str],
    use_cache: bool,
    offload_workers: int | None,
    progress: Callable[[int], None] | None,
) -> HealthOutcome:
    """The flow's work once the lock of its reports is held."""
    started_at = provenance.timestamp()
    plan = tasks.plan_ranges(paths, workers, ignored_checks)
    inputs = [future.result() for future in [tasks.hash_input.submit(path) for path in plan.paths]]
    record_url = provenance.record_path(summary_url)
    if use_cache and provenance.up_to_date(record_url, health.cache_key(plan, inputs)):
        cached = health.cached_outcome(summary_url, record_url)
        _publish(cached, report_dir)
        return cached
    sha_by_source = [digest.sha256 for digest in inputs]
    offload = offload_workers and min(offload_workers, len(plan.ranges))
    with process_pool(offload, "running rollout health checks") as pool:
        evaluate = tasks.evaluate_range.with_options(refresh_cache=not use_cache)  # --no-cache: redo all
        futures = [
            evaluate.submit(byte_range, plan.ignored, sha_by_source[byte_range.source_index], pool)
            for byte_range in plan.ranges
        ]
        results = []
        artifact = RunProgress("eval-health-check", report_dir, len(plan.ranges))
        for byte_range, future in zip(plan.ranges, futures, strict=True):
            results.append(future.result())
            artifact.advance(1)
            if progress is not None:
                progress(byte_range.end - byte_range.start)
        # unwalked(): Prefect would otherwise walk every row of these arguments looking for futures.
        report = tasks.reduce_report(plan, unwalked(results), pool)
    reports = [summary_url, storage.join(report_dir, "rollout_verdicts.jsonl")]
    write = tasks.write_reports.with_options(**lineage(reports, [digest.uri for digest in inputs]))
    outcome = write(plan, unwalked(report), report_dir, inputs, orchestrator(), started_at)
    _publish(outcome, report_dir)
    return outcome

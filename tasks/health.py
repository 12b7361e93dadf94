"""Prefect tasks of the health check: each a few lines around one core call.

I/O tasks retry with backoff; pure computation does not. Only range evaluation is cached by the
SHA-256 of the input, the byte range, the ignored checks and gymflow's version, so a rerun after a
crash redoes only the ranges that did not finish. ``write_reports`` materialises the report files
as Prefect assets (the flow names them per run), with the inputs as their dependencies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefect import task
from prefect.assets import materialize
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext

from gymflow import __version__, health, parallel, provenance
from gymflow.health import ByteRange, HealthPlan, HealthReport, RangeResult
from gymflow.tasks._retries import IO_RETRIES


@task(name="hash-input", cache_policy=NO_CACHE, **IO_RETRIES)
def hash_input(path: str) -> provenance.FileDigest:
    return provenance.digest(path)


@task(name="plan-ranges", cache_policy=NO_CACHE, **IO_RETRIES)
def plan_ranges(paths: Sequence[str], workers: int | None, ignored_checks: Sequence[str]) -> HealthPlan:
    return health.plan(paths, workers, ignored_checks)


def _range_key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
    byte_range: ByteRange = parameters["byte_range"]
    parts = {
        "input": parameters["input_sha256"],
        "range": [byte_range.source_index, byte_range.start, byte_range.end],
        "ignored": sorted(parameters["ignored"]),
        "gymflow": __version__,
    }
    return "health-range-" + provenance.cache_key("health-range", parts, []).removeprefix("sha256:")


@task(name="evaluate-range", cache_key_fn=_range_key, persist_result=True, **IO_RETRIES)
def evaluate_range(
    byte_range: ByteRange, ignored: Sequence[str], input_sha256: str, pool: parallel.Workers | None = None
) -> RangeResult:
    if pool is None:
        return health.evaluate_range(byte_range, ignored)
    return pool.call(health.evaluate_range, byte_range, tuple(ignored))


@task(name="reduce-report", cache_policy=NO_CACHE)
def reduce_report(
    plan: HealthPlan, results: Sequence[RangeResult], pool: parallel.Workers | None = None
) -> HealthReport:
    return health.finish(plan, results, pool)


@materialize("gymflow://health-reports", name="write-reports", cache_policy=NO_CACHE, **IO_RETRIES)
def write_reports(
    plan: HealthPlan,
    report: HealthReport,
    report_dir: str,
    inputs: Sequence[provenance.FileDigest],
    orchestrator: dict[str, Any],
    started_at: str,
) -> health.HealthOutcome:
    return health.record_outputs(plan, report, report_dir, inputs, orchestrator, started_at)

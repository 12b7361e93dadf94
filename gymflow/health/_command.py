"""The library entry: health-check rollout files, write reports and their provenance record."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from gymflow import kept, lineage, provenance, scratch, storage
from gymflow.executor import Executor, LocalExecutor, Step
from gymflow.health._ranges import (
    EVALUATE_RANGE,
    HealthPlan,
    Progress,
    RangeResult,
    RangeWork,
    finish,
    plan,
    report_dir_for,
)
from gymflow.health._report import HealthReport, console_line, write_reports_digested
from gymflow.parallel import can_fork
from gymflow.run_context import RunContext

logger = logging.getLogger(__name__)
COMMAND = "eval health-check"
VERDICTS = "rollout_verdicts.jsonl"


@dataclass(frozen=True, slots=True)
class HealthOutcome:
    """What a health run produced (or found up to date)."""

    run: Mapping[str, Any]
    """The ``run`` object of ``quality_summary.json`` (a :class:`RunSummary`)."""
    summary_url: str
    record_url: str
    up_to_date: bool
    console_line: str
    healthy_rows: bytes | None = field(default=None, repr=False, compare=False)
    """A byte per input row (its number among the rows of the inputs): 1 where its verdict is
    healthy, the rows after the last healthy one left out; None for reports found up to date."""

    @property
    def summary(self) -> dict[str, Any]:
        """``quality_summary.json`` as an object (a :class:`QualitySummary`), read from the file
        (it lists every task: a large run's is large)."""
        return _read_summary(self.summary_url)

    @property
    def verdicts_url(self) -> str:
        """``rollout_verdicts.jsonl``, beside the summary."""
        return storage.join(storage.parent(self.summary_url), VERDICTS)


def parameters(plan_: HealthPlan) -> dict[str, Any]:
    """Settings that can change report bytes (the input names appear in unreadable-row locators)."""
    return {"ignored_checks": sorted(plan_.ignored), "inputs": list(plan_.paths)}


def cache_key(plan_: HealthPlan, inputs: Sequence[provenance.FileDigest]) -> str:
    return provenance.cache_key(COMMAND, parameters(plan_), [("rollouts", item.sha256) for item in inputs])


def record_outputs(
    plan_: HealthPlan,
    report: HealthReport,
    report_dir: str,
    inputs: Sequence[provenance.FileDigest],
    ctx: RunContext,
    started_at: str,
) -> HealthOutcome:
    """Write both reports, then (last) their provenance record."""
    summary, verdicts = write_reports_digested(report, report_dir)
    summary_url = storage.join(report_dir, "quality_summary.json")
    record_url = provenance.record_path(summary_url)
    record = provenance.build_record(
        command=COMMAND,
        cache_key=cache_key(plan_, inputs),
        inputs=list(inputs),
        outputs=[summary, verdicts],
        parameters={**parameters(plan_), "workers": plan_.workers},
        orchestrator=ctx.orchestrator,
        config=ctx.config,
        started_at=started_at,
        finished_at=provenance.timestamp(),
    )
    provenance.write_record(record_url, record)
    return HealthOutcome(
        report.run, summary_url, record_url, False, report.console_line(), report.healthy_rows
    )


def _read_summary(summary_url: str) -> dict[str, Any]:
    with storage.open_read(summary_url) as handle:
        summary: dict[str, Any] = json.loads(handle.read())
    return summary


def cached_outcome(summary_url: str, record_url: str) -> HealthOutcome:
    run = _read_summary(summary_url)["run"]
    return HealthOutcome(run, summary_url, record_url, True, console_line({"run": run}))


@dataclass(frozen=True)
class HealthOptions:
    """One health run, validated (``gymflow.options`` builds it from the command's config)."""

    paths: tuple[str, ...]
    report_dir: str | None = None
    """Default: beside the first file."""
    workers: int | None = None
    ignored_checks: tuple[str, ...] = ()
    use_cache: bool = True


_WriteJob = tuple[HealthPlan, HealthReport, str, Sequence[provenance.FileDigest], RunContext, str]


def _write(job: _WriteJob) -> HealthOutcome:
    return record_outputs(*job)


HASH_INPUT: Step[str, provenance.FileDigest] = Step("hash-input", provenance.digest, io=True)
WRITE_REPORTS: Step[_WriteJob, HealthOutcome] = Step("write-reports", _write, io=True)


def run_health(
    options: HealthOptions,
    ctx: RunContext | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> HealthOutcome:
    """Health-check rollout JSONL files and write ``quality_summary.json``, ``rollout_verdicts.jsonl``
    and ``quality_summary.provenance.json`` into the report directory; the one sequence of the
    command, whatever ``executor`` runs its steps (default: this process and a pool of
    ``workers`` processes). ``progress`` is advanced by each range's bytes as it completes.

    With ``use_cache``, a run whose record shows the same inputs and parameters, and whose reports
    are intact, does no work and returns ``up_to_date=True``.
    """
    ctx = ctx or RunContext()
    with lineage.run(COMMAND, ctx), ctx.active():
        # Workers this command forks (--direct, on Linux, one thread) start at once: small files are cut too.
        forked = executor is None and can_fork()
        plan_ = plan(options.paths, options.workers, options.ignored_checks, forked=forked)
        directory = report_dir_for(options.paths, options.report_dir)
        summary_url = storage.join(directory, "quality_summary.json")
        with ctx.lock(summary_url, COMMAND):
            if executor is not None:
                return _run_locked(plan_, directory, summary_url, options.use_cache, ctx, executor, progress)
            pool = min(plan_.workers, len(plan_.ranges))
            with LocalExecutor(ctx, pool, "running rollout health checks") as local:
                return _run_locked(plan_, directory, summary_url, options.use_cache, ctx, local, progress)


def _run_locked(
    plan_: HealthPlan,
    directory: str,
    summary_url: str,
    use_cache: bool,
    ctx: RunContext,
    executor: Executor,
    progress: Progress | None,
) -> HealthOutcome:
    """The run once the lock of its reports is held (see :mod:`gymflow.locking`)."""
    started_at = provenance.timestamp()
    record_url = provenance.record_path(summary_url)
    located = [executor.locate(path) for path in plan_.paths]
    provenance.prefetch(located)  # hashing overlaps what follows
    inputs: list[provenance.FileDigest] | None = None
    if use_cache and _may_be_current(record_url, plan_.paths):
        inputs = executor.map(HASH_INPUT, located)
        if provenance.up_to_date(record_url, cache_key(plan_, inputs)):
            logger.info("reports are up to date: %s", record_url)
            return cached_outcome(summary_url, record_url)
    if inputs is None and executor.persistent:  # range results are stored under their input's hash
        inputs = executor.map(HASH_INPUT, located)
    sha = [digest.sha256 for digest in inputs] if inputs is not None else [""] * len(located)

    def done(work: RangeWork, _: RangeResult) -> None:
        if progress is not None:
            progress(work.byte_range.end - work.byte_range.start)

    with (
        scratch.temporary_dir("health")
        if not executor.persistent and executor.same_machine
        else nullcontext(None)
    ) as spill_dir:
        work = [
            RangeWork(
                replace(byte_range, path=located[byte_range.source_index]),
                plan_.ignored,
                sha[byte_range.source_index],
                spill_dir,
                executor.keep_dir,
            )
            for byte_range in plan_.ranges
        ]
        results = executor.map(EVALUATE_RANGE.cached(use_cache), work, done=done)
        kept.recompute_lost(executor, EVALUATE_RANGE, work, results, RangeResult.files)
        report = finish(plan_, results, executor)
    if inputs is None:
        inputs = executor.map(HASH_INPUT, located)
    reports = [summary_url, storage.join(directory, VERDICTS)]
    write = WRITE_REPORTS.writing(reports, [digest.uri for digest in inputs])
    return executor.call(write, (plan_, report, directory, inputs, ctx, started_at))


def _may_be_current(record_url: str, paths: Sequence[str]) -> bool:
    """False when the record is missing or lists inputs of other sizes: a cheap "certainly stale"."""
    record = provenance.read_record(record_url)
    if record is None:
        return False
    recorded = [entry.get("bytes") for entry in record.get("inputs", [])]
    return recorded == [storage.size(path) for path in paths]

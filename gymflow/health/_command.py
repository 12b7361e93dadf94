"""The library entry: health-check rollout files, write reports and their provenance record."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gymflow import locking, provenance, storage
from gymflow.health._ranges import HealthPlan, Progress, evaluate_all, plan, report_dir_for
from gymflow.health._report import HealthReport, console_line, write_reports_digested

logger = logging.getLogger(__name__)
COMMAND = "eval health-check"


@dataclass(frozen=True, slots=True)
class HealthOutcome:
    """What a health run produced (or found up to date)."""

    summary: Mapping[str, Any]
    """``quality_summary.json`` as an object (a :class:`QualitySummary`)."""
    summary_url: str
    record_url: str
    up_to_date: bool
    console_line: str


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
    orchestrator: Mapping[str, Any],
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
        orchestrator=orchestrator,
        started_at=started_at,
        finished_at=provenance.timestamp(),
    )
    provenance.write_record(record_url, record)
    return HealthOutcome(report.summary, summary_url, record_url, False, report.console_line())


def cached_outcome(summary_url: str, record_url: str) -> HealthOutcome:
    with storage.open_read(summary_url) as handle:
        summary = json.loads(handle.read())
    return HealthOutcome(summary, summary_url, record_url, True, console_line(summary))


def run_health(
    paths: Sequence[str],
    report_dir: str | None = None,
    workers: int | None = None,
    ignored_checks: str | Iterable[str] | None = None,
    *,
    use_cache: bool = True,
    progress: Progress | None = None,
) -> HealthOutcome:
    """Health-check rollout JSONL files and write ``quality_summary.json``, ``rollout_verdicts.jsonl``
    and ``quality_summary.provenance.json`` into ``report_dir`` (default: beside the first file).

    With ``use_cache``, a run whose record shows the same inputs and parameters, and whose reports
    are intact, does no work and returns ``up_to_date=True``.
    """
    started_at = provenance.timestamp()
    plan_ = plan(paths, workers, ignored_checks)
    directory = report_dir_for(paths, report_dir)
    summary_url = storage.join(directory, "quality_summary.json")
    with locking.run_lock(summary_url, COMMAND):
        return _run_locked(plan_, directory, summary_url, use_cache, progress, started_at)


def _run_locked(
    plan_: HealthPlan,
    directory: str,
    summary_url: str,
    use_cache: bool,
    progress: Progress | None,
    started_at: str,
) -> HealthOutcome:
    """The run once the lock of its reports is held (see :mod:`gymflow.locking`)."""
    record_url = provenance.record_path(summary_url)
    if use_cache and _may_be_current(record_url, plan_.paths):
        inputs = _digests(plan_.paths)
        if provenance.up_to_date(record_url, cache_key(plan_, inputs)):
            logger.info("reports are up to date: %s", record_url)
            return cached_outcome(summary_url, record_url)
        report = evaluate_all(plan_, progress)
    else:
        # Nothing can be up to date, so hashing the inputs overlaps the evaluation.
        with ThreadPoolExecutor(max_workers=1) as hasher:
            hashing = hasher.submit(_digests, plan_.paths)
            report = evaluate_all(plan_, progress)
            inputs = hashing.result()
    return record_outputs(plan_, report, directory, inputs, {"kind": "direct"}, started_at)


def _digests(paths: Sequence[str]) -> list[provenance.FileDigest]:
    return [provenance.digest(path) for path in paths]


def _may_be_current(record_url: str, paths: Sequence[str]) -> bool:
    """False when the record is missing or lists inputs of other sizes: a cheap "certainly stale"."""
    record = provenance.read_record(record_url)
    if record is None:
        return False
    recorded = [entry.get("bytes") for entry in record.get("inputs", [])]
    return recorded == [storage.size(path) for path in paths]

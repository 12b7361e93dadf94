"""Running the checks over rollout files: plan byte ranges, evaluate them (serially or in a
process pool), place the rows, reduce, and write the reports (spec §8).

The same three steps (:func:`plan`, :func:`evaluate_range`, :func:`finish`) are what the Prefect
flow composes as tasks, so both paths write identical bytes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import PurePath

from gymflow import parallel, storage
from gymflow.errors import InputError, UsageError
from gymflow.health._evaluate import RowResult, RunStats, evaluate_line, is_blank
from gymflow.health._registry import normalize_ignored
from gymflow.health._report import HealthReport, build_report
from gymflow.health._vocabulary import CheckId
from gymflow.provenance import FileDigest

Progress = Callable[[int], None]
"""Called with a number of bytes just processed."""

RANGE_BYTES = 32 * 1024 * 1024
MAX_RANGES_PER_FILE = 256
MAX_DEFAULT_WORKERS = 8


@dataclass(frozen=True, slots=True)
class ByteRange:
    """The lines that start in [start, end) of the input at ``source_index``."""

    source_index: int
    path: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class RangeResult:
    byte_range: ByteRange
    rows: list[RowResult]
    physical_lines: int
    stats: RunStats


@dataclass(frozen=True, slots=True)
class HealthPlan:
    paths: tuple[str, ...]
    ranges: tuple[ByteRange, ...]
    workers: int
    ignored: tuple[CheckId, ...]


def default_workers() -> int:
    return min(os.cpu_count() or 1, MAX_DEFAULT_WORKERS)


def source_file_name(path: str) -> str:
    """The input path as the locator reports it: as passed, normalised like ``pathlib``."""
    return path if "://" in path else str(PurePath(path))


def plan(
    paths: Sequence[str],
    workers: int | None = None,
    ignored_checks: str | Iterable[str] | None = None,
) -> HealthPlan:
    """Validate the call (in the reference's order) and split the inputs into byte ranges."""
    ignored = normalize_ignored(ignored_checks)
    if not paths:
        raise UsageError("at least one rollout JSONL path is required")
    for path in paths:
        if not storage.isfile(path):
            raise InputError(f"Rollout JSONL not found: {path}")
    limit = default_workers() if workers is None else workers
    ranges: list[ByteRange] = []
    for index, path in enumerate(paths):
        size = storage.size(path)
        parts = 1 if limit <= 1 else max(1, min(MAX_RANGES_PER_FILE, math.ceil(size / RANGE_BYTES)))
        ranges += [ByteRange(index, path, start, end) for start, end in storage.split_ranges(path, parts)]
    if workers is not None and workers < 1:
        raise UsageError("workers must be at least 1")
    return HealthPlan(tuple(paths), tuple(ranges), limit, ignored)


def evaluate_range(
    byte_range: ByteRange, ignored: Sequence[str], progress: Progress | None = None
) -> RangeResult:
    """Evaluate every non-blank line starting in one byte range, with range-local numbering."""
    ignored_set = frozenset(ignored)
    rows: list[RowResult] = []
    stats = RunStats()
    physical = 0
    for _, line in storage.iter_lines(byte_range.path, byte_range.start, byte_range.end):
        physical += 1
        if not is_blank(line):
            rows.append(evaluate_line(line, physical, len(rows), ignored_set, stats))
        if progress is not None:
            progress(len(line))
    return RangeResult(byte_range, rows, physical, stats)


def finish(plan_: HealthPlan, results: Sequence[RangeResult]) -> HealthReport:
    """Place range-local rows in input order and reduce them to the report."""
    ordered = sorted(results, key=lambda r: (r.byte_range.source_index, r.byte_range.start))
    rows: list[RowResult] = []
    stats = RunStats()
    line_offset = 0
    current_source = -1
    for result in ordered:
        stats.add(result.stats)
        source = result.byte_range.source_index
        if source != current_source:
            current_source, line_offset = source, 0
        # The name comes from this run's plan: a cached range result may have been computed
        # from the same bytes under another path.
        name = source_file_name(plan_.paths[source])
        ordinal_offset = len(rows)
        for row in result.rows:
            row.place(source, name, line_offset, ordinal_offset)
        rows += result.rows
        line_offset += result.physical_lines
    return build_report(rows, plan_.ignored, stats)


def _evaluate_in_worker(byte_range: ByteRange, ignored: tuple[str, ...]) -> RangeResult:
    return evaluate_range(byte_range, ignored)


def evaluate_all(plan_: HealthPlan, progress: Progress | None = None) -> list[RangeResult]:
    """Evaluate every range, in a process pool when that helps; serially when it cannot run."""
    if plan_.workers <= 1 or len(plan_.ranges) <= 1:
        return [evaluate_range(r, plan_.ignored, progress) for r in plan_.ranges]

    def done(byte_range: ByteRange, _: RangeResult) -> None:
        if progress is not None:
            progress(byte_range.end - byte_range.start)

    return parallel.map_ordered(
        partial(_evaluate_in_worker, ignored=tuple(plan_.ignored)),
        plan_.ranges,
        plan_.workers,
        what="running rollout health checks",
        done=done,
    )


def report_dir_for(paths: Sequence[str], report_dir: str | None) -> str:
    return report_dir if report_dir is not None else storage.parent(paths[0])


def write_reports(report: HealthReport, report_dir: str) -> tuple[str, str]:
    """Write both report files atomically; returns their URLs (summary, verdicts)."""
    write_reports_digested(report, report_dir)
    return storage.join(report_dir, "quality_summary.json"), storage.join(
        report_dir, "rollout_verdicts.jsonl"
    )


def write_reports_digested(report: HealthReport, report_dir: str) -> tuple[FileDigest, FileDigest]:
    """Write both report files atomically; returns the digests of the bytes written (summary,
    verdicts), hashed while writing: a record built from them never lists another run's bytes."""
    summary_url = storage.join(report_dir, "quality_summary.json")
    verdicts_url = storage.join(report_dir, "rollout_verdicts.jsonl")
    verdicts = FileDigest(
        storage.to_uri(verdicts_url), *storage.write_atomic_lines(verdicts_url, report.verdict_lines())
    )
    summary = FileDigest(
        storage.to_uri(summary_url), *storage.write_atomic(summary_url, report.summary_bytes)
    )
    return summary, verdicts

"""Evaluating rollout files by byte ranges: plan the ranges, evaluate each (serially or in a
process pool) into a sorted run of rows, and merge the runs into the reports (spec §8).

The same three steps (:func:`plan`, :func:`evaluate_range`, :func:`finish`) are what the Prefect
flow composes as tasks, so both paths write identical bytes. The direct path keeps every row in
the workers and on disk: a worker sorts the entries of its range's rows into a run file as it
evaluates them, except the few rows whose place depends on the lines before the range (no task
index, unreadable), which it spills; once those lines are counted, a sort step places such rows
into a run of their own, and the parent only merges the runs (by key, then input order), holding a
small batch of entries per run at a time. With a result store on this machine the run files are a
stored result's, kept beside the store (:mod:`gymflow.kept`), so the orchestrated path holds no
rows either.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext, suppress
from dataclasses import dataclass, replace
from pathlib import PurePath

from gymflow import scratch, storage
from gymflow.collector import paused_gc
from gymflow.errors import InputError, UsageError
from gymflow.executor import Executor, Step
from gymflow.health._evaluate import RowResult, RunStats, evaluate_line
from gymflow.health._reading import is_blank
from gymflow.health._registry import normalize_ignored
from gymflow.health._report import HealthReport, merge_runs
from gymflow.health._runs import (
    Entry,
    Placement,
    RowWriter,
    SortedRun,
    entry,
    needs_placement,
    read_spilled_rows,
    sort_rows,
    unpack_rows,
    write_batches,
)
from gymflow.health._vocabulary import CheckId
from gymflow.kept import kept_files
from gymflow.parallel import default_workers, full_waves

Progress = Callable[[int], None]
"""Called with a number of bytes just processed."""

RANGE_BYTES = 32 * 1024 * 1024
MAX_RANGES_PER_FILE = 256
FORKED_RANGE_MIN_BYTES = 1024 * 1024
"""With forked workers (ready in milliseconds), a file of more than this is cut into at
least one range per worker: on 2 CPUs, 3 runs each, 10,000 small rollouts (25 MB) 1.38-1.42 s
whole against 0.94-1.06 s in two ranges; 750 large ones (12 MB) even (0.41-0.51 s against
0.46-0.48 s). Spawned workers cost about 0.4 s each to start: there a file is cut only every
:data:`RANGE_BYTES`."""


@dataclass(frozen=True, slots=True)
class ByteRange:
    """The lines that start in [start, end) of the input at ``source_index``."""

    source_index: int
    path: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class RangeResult:
    """One range evaluated, with range-local numbering: the entries of the rows that need no
    placement, sorted into a run, and the rows that do (:func:`needs_placement`, rare), in input
    order. Both are packed into bytes (a result that crosses processes and persists cheaply), or
    (the direct path) in the local files ``spill`` and ``spill + PENDING``."""

    byte_range: ByteRange
    packed: bytes
    physical_lines: int
    stats: RunStats
    row_count: int
    spill: str | None = None
    pending_packed: bytes = b""
    pending_count: int = 0
    kept: bool = False
    """The spilled files are a stored result's (:mod:`gymflow.kept`): they stay after the run."""

    def files(self) -> list[str]:
        """The local files holding the range's rows."""
        if self.spill is None:
            return []
        return [self.spill, self.spill + PENDING] if self.pending_count else [self.spill]

    def run(self) -> SortedRun:
        """The sorted run of the rows that need no placement."""
        return SortedRun(packed=self.packed) if self.spill is None else SortedRun(path=self.spill)

    def pending(self) -> Iterator[RowResult]:
        """The rows that need placement, in input order."""
        if self.spill is None:
            return unpack_rows(self.pending_packed)
        return read_spilled_rows(self.spill + PENDING) if self.pending_count else iter(())


@dataclass(frozen=True, slots=True)
class HealthPlan:
    paths: tuple[str, ...]
    ranges: tuple[ByteRange, ...]
    workers: int
    ignored: tuple[CheckId, ...]


def source_file_name(path: str) -> str:
    """The input path as the locator reports it: as passed, normalised like ``pathlib``."""
    return path if "://" in path else str(PurePath(path))


def plan(
    paths: Sequence[str],
    workers: int | None = None,
    ignored_checks: str | Iterable[str] | None = None,
    *,
    forked: bool = False,
) -> HealthPlan:
    """Validate the call (in the reference's order) and split the inputs into byte ranges
    (``forked``: for workers forked from this process, see :data:`FORKED_RANGE_MIN_BYTES`)."""
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
        if forked and size > FORKED_RANGE_MIN_BYTES:
            parts = max(parts, limit)
        if parts > 1:  # a file of one range is not cut further (a small file's is cheaper whole)
            parts = full_waves(parts, limit, MAX_RANGES_PER_FILE)
        ranges += [ByteRange(index, path, start, end) for start, end in storage.split_ranges(path, parts)]
    if workers is not None and workers < 1:
        raise UsageError("workers must be at least 1")
    return HealthPlan(tuple(paths), tuple(ranges), limit, ignored)


PENDING = ".pending"
"""Suffix of the local file of a spilled range's rows that need placement."""


def evaluate_range(
    byte_range: ByteRange, ignored: Sequence[str], progress: Progress | None = None, spill: str | None = None
) -> RangeResult:
    """Evaluate every non-blank line starting in one byte range, with range-local numbering, into
    a :class:`RangeResult`, packed or written to the local files ``spill`` and ``spill + PENDING``."""
    ignored_set = frozenset(ignored)
    stats = RunStats()
    physical = count = pending = 0
    entries: list[Entry] = []
    with paused_gc(), RowWriter(None if spill is None else spill + PENDING) as writer:
        for _, line in storage.iter_lines(byte_range.path, byte_range.start, byte_range.end):
            physical += 1
            if not is_blank(line):
                row = evaluate_line(line, physical, count, ignored_set, stats)
                if needs_placement(row):
                    writer.add(row)
                    pending += 1
                else:
                    entries.append(entry(row, count))
                count += 1
            if progress is not None:
                progress(len(line))
    entries.sort(key=lambda item: item.key)  # stable: input order among equal keys
    packed = write_batches(entries, spill)
    return RangeResult(byte_range, packed, physical, stats, count, spill, writer.packed, pending)


def finish(
    plan_: HealthPlan, results: Sequence[RangeResult], executor: Executor | None = None
) -> HealthReport:
    """Place the range-local rows that need it and sort them into a run of each range's own (as
    steps of ``executor`` when it runs on this machine, into local files: beside a spilled range,
    else in a scratch directory; otherwise here, in memory), and merge all the runs into the
    report: the ranges' runs stay as they were written."""
    sorter = executor if executor is not None and executor.same_machine else None
    packed = sorter is not None and any((r.spill is None or r.kept) and r.pending_count for r in results)
    with scratch.temporary_dir("runs") if packed else nullcontext("") as runs_dir:
        return _finish(plan_, results, sorter, runs_dir)


def _finish(
    plan_: HealthPlan, results: Sequence[RangeResult], sorter: Executor | None, runs_dir: str
) -> HealthReport:
    ordered = sorted(results, key=lambda r: (r.byte_range.source_index, r.byte_range.start))
    jobs: list[_SortJob] = []
    runs: list[tuple[Iterator[Entry], int]] = []
    stats = RunStats()
    line_offset = ordinal_offset = 0
    current_source = -1
    for result in ordered:
        stats.add(result.stats)
        source = result.byte_range.source_index
        if source != current_source:
            current_source, line_offset = source, 0
        # The name comes from this run's plan: a cached range result may have been computed
        # from the same bytes under another path.
        placement = Placement(source, source_file_name(plan_.paths[source]), line_offset, ordinal_offset)
        runs.append((result.run().entries(), ordinal_offset))
        if result.pending_count:
            beside = result.spill is not None and not result.kept
            run_file = f"{result.spill}.placed" if beside else os.path.join(runs_dir, f"run-{len(jobs)}")
            jobs.append((result, placement, None if sorter is None else run_file))
        line_offset += result.physical_lines
        ordinal_offset += result.row_count
    if sorter is None:
        placed = [_sort_job(job) for job in jobs]
    else:
        placed = sorter.map(SORT_RUN, jobs, done=_sorted)
    runs += [(run.entries(), job[1].ordinal_offset) for run, job in zip(placed, jobs, strict=True)]
    return merge_runs(runs, plan_.ignored, stats)


_SortJob = tuple[RangeResult, Placement, str | None]
"""A range with rows to place, where it stands, and the local file for the sorted run of those
rows (in a worker)."""


def _sort_job(job: _SortJob) -> SortedRun:
    result, placement, run_file = job
    return sort_rows(result.pending(), placement, spill=run_file)


def _sorted(job: _SortJob, _: SortedRun) -> None:
    """Once its rows are placed, a range's spilled file of them goes (not in the worker: a worker
    that dies after sorting leaves it for the serial retry)."""
    spill = job[0].spill
    if spill is not None and not job[0].kept:
        with suppress(FileNotFoundError):
            os.unlink(spill + PENDING)


@dataclass(frozen=True, slots=True)
class RangeWork:
    """One range to evaluate: where its bytes are, what to skip, and (for a result store) the
    SHA-256 of its input; ``spill_dir``: a local directory for its rows (the direct path);
    ``keep_dir``: where a stored result keeps them (:mod:`gymflow.kept`)."""

    byte_range: ByteRange
    ignored: tuple[CheckId, ...]
    input_sha256: str = ""
    spill_dir: str | None = None
    keep_dir: str | None = None


def _evaluate_work(work: RangeWork) -> RangeResult:
    if work.keep_dir is not None:
        with kept_files(work.keep_dir, _range_key(work)) as (staging, final):
            result = evaluate_range(work.byte_range, work.ignored, spill=os.path.join(staging, "rows"))
        return replace(result, spill=os.path.join(final, "rows"), kept=True)
    spill = None
    if work.spill_dir is not None:
        where = work.byte_range
        spill = os.path.join(work.spill_dir, f"range-{where.source_index}-{where.start}")
    return evaluate_range(work.byte_range, work.ignored, spill=spill)


def _range_key(work: RangeWork) -> str:
    from gymflow import __version__, provenance

    where = work.byte_range
    parts = {
        "input": work.input_sha256,
        "range": [where.source_index, where.start, where.end],
        "ignored": sorted(work.ignored),
        "gymflow": __version__,
        "result": 4,  # RangeResult names kept files, or holds its entries and rows to place, compressed
    }
    return "health-range-" + provenance.cache_key("health-range", parts, []).removeprefix("sha256:")


EVALUATE_RANGE: Step[RangeWork, RangeResult] = Step(
    "evaluate-range", _evaluate_work, io=True, cpu=True, cache_key=_range_key
)
"""Evaluate one byte range (cached by the SHA-256 of its input, the range and the ignored checks,
so a rerun after a crash redoes only the ranges that did not finish)."""

SORT_RUN: Step[_SortJob, SortedRun] = Step("sort-run", _sort_job, cpu=True, tracked=False)
"""Part of the reduce: no task run of its own in the orchestrator."""


def report_dir_for(paths: Sequence[str], report_dir: str | None) -> str:
    return report_dir if report_dir is not None else storage.parent(paths[0])

"""``eval join``'s one sequence: plan byte ranges of the rollouts file, join each into a part
file beside the output (a range reads the capture files of its own rows, so capture I/O spreads
over the workers with the rows), concatenate the parts atomically, write provenance.

:func:`run_join` runs it on any :class:`~gymflow.executor.Executor`: this process and a pool of
``workers`` processes (``--direct``), or Prefect tasks. A file of one range is joined straight
into the output. Range results are not cached: they depend on capture files their parameters do
not name; the command-level provenance check skips a whole unchanged join instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Final

from gymflow import lineage, provenance, scratch, storage
from gymflow.errors import InputError
from gymflow.executor import Executor, LocalExecutor, Step
from gymflow.join._file_join import (
    PartAppender,
    capture_listing,
    concatenate_parts,
    current_key,
    finish,
    hash_captures,
    join_range,
    missing_capture_warning,
    part_urls,
    plan_ranges,
    remove_parts,
)
from gymflow.join._read_files import ReadFiles
from gymflow.join._settings import COMMAND, JoinResult, JoinSettings
from gymflow.join._stats import JoinStats
from gymflow.run_context import RunContext

__all__ = ["PARALLEL_MIN_BYTES", "run_join"]

PARALLEL_MIN_BYTES: Final = 4 * 2**20
"""Smaller rollouts files are joined as one range: a pool would cost more than it saves."""

Progress = Callable[[int], None]
"""Advanced by the number of rollouts bytes joined."""


@dataclass(frozen=True)
class RangeJob:
    """The rows starting in bytes ``[start, end)`` of the rollouts file, joined into ``part``."""

    settings: JoinSettings
    start: int
    end: int
    part: str


def _join(job: RangeJob) -> JoinStats:
    return join_range(job.settings, job.start, job.end, job.part)


def _concatenate(job: tuple[JoinSettings, list[str]]) -> provenance.FileDigest:
    return concatenate_parts(*job)


FinishJob = tuple[
    JoinSettings,
    provenance.FileDigest,
    provenance.FileDigest,
    ReadFiles,
    list[provenance.FileDigest],
    RunContext,
    str,
]


def _finish(job: FinishJob) -> str:
    return finish(*job)


CAPTURES_PER_HASH: Final = 1000
"""Unread capture files hashed by one item of the hashing step (spread over the workers)."""


HASH_ROLLOUTS: Step[str, provenance.FileDigest] = Step("hash-rollouts", provenance.digest, io=True)
JOIN_RANGE: Step[RangeJob, JoinStats] = Step("join-range", _join, io=True, cpu=True)
CONCATENATE: Step[tuple[JoinSettings, list[str]], provenance.FileDigest] = Step(
    "concatenate-parts", _concatenate, io=True
)
HASH_CAPTURES: Step[list[tuple[str, str]], list[provenance.FileDigest]] = Step(
    "hash-unread-captures", hash_captures, io=True, cpu=True
)
WRITE_PROVENANCE = Step("write-provenance", _finish, io=True)


def _unread_captures(
    located: JoinSettings, read: ReadFiles, executor: Executor
) -> list[provenance.FileDigest]:
    """The digests of the capture files no row read (the cache key names every file of the
    directory), in name order, hashed in chunks by the executor's workers."""
    listed = capture_listing(located, read.uris())
    chunks = []
    while chunk := list(itertools.islice(listed, CAPTURES_PER_HASH)):
        chunks.append(chunk)
    return [d for digests in executor.map(HASH_CAPTURES, chunks) for d in digests] if chunks else []


def run_join(
    settings: JoinSettings,
    ctx: RunContext | None = None,
    executor: Executor | None = None,
    *,
    use_cache: bool = True,
    workers: int = 1,
    parallel_min_bytes: int = PARALLEL_MIN_BYTES,
    progress: Progress | None = None,
) -> JoinResult:
    """Join the whole rollouts file and write output and provenance (default executor: this
    process and ``workers`` processes for files of at least ``parallel_min_bytes``). The output
    bytes depend on neither."""
    ctx = ctx or RunContext()
    with lineage.run(COMMAND, ctx), ctx.active():
        started_at = provenance.timestamp(datetime.now(UTC))
        if not storage.isfile(settings.rollouts):
            raise InputError(f"{settings.rollouts}: rollouts file not found")
        ranges = workers if storage.size(settings.rollouts) >= parallel_min_bytes else 1
        with ctx.lock(settings.output, COMMAND):
            if executor is not None:
                return _run(settings, ctx, executor, use_cache, ranges, started_at, progress)
            with LocalExecutor(ctx, ranges, "joining rollouts") as local:
                return _run(settings, ctx, local, use_cache, ranges, started_at, progress)


def _join_streaming(
    settings: JoinSettings,
    located: JoinSettings,
    executor: Executor,
    jobs: list[RangeJob],
    done: Callable[[RangeJob, JoinStats], None],
    sources: list[str],
) -> provenance.FileDigest:
    """Join the ranges into part files and append each, in order, to the output as it arrives."""

    def write(target: int) -> tuple[str, int]:
        appender = PartAppender(target)

        def arrived(job: RangeJob, part: JoinStats) -> None:
            done(job, part)
            appender.append(job.part)

        executor.map(JOIN_RANGE.writing([settings.output], sources), jobs, done=arrived)
        return appender.result()

    sha, size = storage.write_atomic_local(located.output, write)
    return provenance.FileDigest(storage.to_uri(located.output), sha, size)


def _run(
    settings: JoinSettings,
    ctx: RunContext,
    executor: Executor,
    use_cache: bool,
    workers: int,
    started_at: str,
    progress: Progress | None,
) -> JoinResult:
    """``workers``: 1 joins the file as one range, straight into the output."""
    record_url = provenance.record_path(settings.output)
    if use_cache and storage.exists(record_url) and provenance.up_to_date(record_url, current_key(settings)):
        record = provenance.read_record(record_url) or {}
        return JoinResult(settings, {"cache_key": record.get("cache_key")}, record_url, up_to_date=True)
    warnings = missing_capture_warning(settings)
    located = replace(
        settings,
        rollouts=executor.locate(settings.rollouts),
        output=executor.locate(settings.output),
        capture_dir=None if settings.capture_dir is None else executor.locate(settings.capture_dir),
    )
    provenance.prefetch([located.rollouts])  # hashing overlaps the join
    single = workers <= 1
    ranges = [(0, storage.size(settings.rollouts))] if single else plan_ranges(settings, workers)
    parts = [located.output] if single else part_urls(located, len(ranges))
    jobs = [RangeJob(located, start, end, part) for (start, end), part in zip(ranges, parts, strict=True)]
    stats = JoinStats()
    with scratch.temporary_dir("joininputs") as directory, ReadFiles(directory) as read:

        def done(job: RangeJob, part: JoinStats) -> None:
            read.add(part.files_read)  # to local scratch: the parent holds no capture file's digest
            part.files_read.clear()
            stats.merge(part)
            if progress is not None:
                progress(job.end - job.start)

        sources = [settings.rollouts, *([settings.capture_dir] if settings.capture_dir else [])]
        # Here, with every file local, each part is appended to the output as soon as it and those
        # before it are done, so the copy and the output's hash overlap the join of later ranges.
        stream = (
            not single
            and executor.same_machine
            and not executor.persistent
            and all(storage.is_local(url) for url in [located.output, *parts])
        )
        try:
            if stream:
                output = _join_streaming(settings, located, executor, jobs, done, sources)
            elif single:
                # One range is joined straight into the output: that step writes it.
                executor.map(JOIN_RANGE.writing([settings.output], sources), jobs, done=done)
                output = provenance.digest(located.output)
            else:
                executor.map(JOIN_RANGE, jobs, done=done)
                concatenate = CONCATENATE.writing([settings.output], sources)
                output = executor.call(concatenate, (located, parts))
        finally:
            if not single:
                remove_parts(parts)
        read.sort()
        unread = _unread_captures(located, read, executor)
        rollouts = executor.call(HASH_ROLLOUTS, located.rollouts)
        job: FinishJob = (settings, rollouts, output, read, unread, ctx, started_at)
        record_url = executor.call(WRITE_PROVENANCE, job)
    return JoinResult(settings, stats.summary(), record_url, warnings, list(stats.errors))

"""The direct path of ``gymflow eval join``: no orchestrator, the same core, identical outputs.

One worker streams the rollouts file through the join and into the output. Several workers
(processes on this machine) each join a byte range and send back its output lines; the parent
writes them in input order while later ranges are still being joined, holding at most a few
ranges in memory, so memory stays flat with the number of rows.
"""

from __future__ import annotations

import hashlib
import multiprocessing
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from datetime import UTC, datetime
from typing import Any, Final

from gymflow import lifeline, locking, provenance, storage
from gymflow.errors import InputError
from gymflow.join._capture_store import CaptureStore
from gymflow.join._file_join import current_key, finish, join_lines, missing_capture_warning
from gymflow.join._settings import COMMAND, JoinResult, JoinSettings
from gymflow.join._stats import JoinStats

__all__ = ["PARALLEL_MIN_BYTES", "RANGE_BYTES", "run_join"]

PARALLEL_MIN_BYTES: Final = 4 * 2**20
"""Smaller rollouts files are joined in this process: a pool would cost more than it saves."""

RANGE_BYTES: Final = 512 * 2**10
"""Rollouts bytes per range in the parallel path. Its joined output (a few times larger) crosses
the process boundary whole, so the parent holds a few of them at once: 512 KiB keeps the process
tree near 185 MB at 10k rollouts of bench/join.py's corpus where 2 MiB ranges took 280-310 MB, at
no cost in CPU time."""


def _store(settings: JoinSettings) -> CaptureStore | None:
    return None if settings.capture_dir is None else CaptureStore(settings.capture_dir)


def _range_lines(url: str, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` of a range whose bounds are line starts (as ``split_ranges`` makes them)."""
    data = storage.read_range(url, start, end)
    offset = start
    for line in data.split(b"\n"):
        yield offset, line
        offset += len(line) + 1


_worker_store: CaptureStore | None = None
"""The capture store of this pool worker, set by :func:`_init_worker` (None elsewhere)."""


def _init_worker(settings: JoinSettings, *lifeline_args: Any) -> None:
    """Pool initializer: gymflow's worker set-up, then one store for all the worker's ranges (the
    capture directory is listed once per worker, not once per range)."""
    global _worker_store
    lifeline.worker_init(*lifeline_args)
    _worker_store = _store(settings)


def join_chunk(settings: JoinSettings, start: int, end: int) -> tuple[bytes, JoinStats]:
    """Joined output lines and counts of the rows starting in ``[start, end)`` (a worker's job)."""
    stats = JoinStats()
    lines = _range_lines(settings.rollouts, start, end)
    store = _worker_store if _worker_store is not None else _store(settings)
    data = b"".join(join_lines(lines, store, stats, perf=settings.perf, source=settings.rollouts))
    return data, stats


Progress = Callable[[int], None]
"""Advanced by the number of rollouts bytes joined."""


class _Hashed:
    """Counts and hashes the bytes that pass through it (or is told the result)."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.bytes = 0
        self.known: str | None = None

    def add(self, data: bytes) -> bytes:
        self.hash.update(data)
        self.bytes += len(data)
        return data

    def hexdigest(self) -> str:
        return self.known if self.known is not None else self.hash.hexdigest()


def _serial(
    settings: JoinSettings, stats: JoinStats, source: _Hashed, progress: Progress | None
) -> Iterator[bytes]:
    def hashed_lines() -> Iterator[tuple[int, bytes]]:
        for offset, line in storage.iter_lines(settings.rollouts):
            source.add(line)
            if progress is not None:
                progress(len(line))
            yield offset, line

    batch: list[bytes] = []
    size = 0
    for line in join_lines(
        hashed_lines(), _store(settings), stats, perf=settings.perf, source=settings.rollouts
    ):
        batch.append(line)
        size += len(line)
        if size >= 2**20:
            yield b"".join(batch)
            batch, size = [], 0
    if batch:
        yield b"".join(batch)


def _parallel(
    settings: JoinSettings,
    stats: JoinStats,
    source: _Hashed,
    workers: int,
    range_bytes: int,
    progress: Progress | None,
) -> Iterator[bytes]:
    total = storage.size(settings.rollouts)
    ranges = storage.split_ranges(settings.rollouts, max(workers * 2, -(-total // range_bytes)))
    # fork is cheap and inherits imports; a parent with remote-storage threads must not fork.
    local = storage.is_local(settings.rollouts) and (
        settings.capture_dir is None or storage.is_local(settings.capture_dir)
    )
    context = multiprocessing.get_context("fork" if local else "spawn")
    lifeline.ensure_watchdog()
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_init_worker,
        initargs=(settings, *lifeline.worker_initargs()),
    ) as pool:
        pending: deque[tuple[int, Future[tuple[bytes, JoinStats]]]] = deque()
        queue = iter(ranges)
        for start, end in queue:
            pending.append((end - start, pool.submit(join_chunk, settings, start, end)))
            if len(pending) >= workers + 1:
                break
        # Hash the rollouts file while the workers start on it.
        source.known, source.bytes = storage.sha256(settings.rollouts)
        while pending:
            size, future = pending.popleft()
            data, part = future.result()
            nxt = next(queue, None)
            if nxt is not None:
                pending.append((nxt[1] - nxt[0], pool.submit(join_chunk, settings, *nxt)))
            stats.merge(part)
            if progress is not None:
                progress(size)
            yield data


def run_join(
    settings: JoinSettings,
    *,
    use_cache: bool = True,
    workers: int = 1,
    parallel_min_bytes: int = PARALLEL_MIN_BYTES,
    range_bytes: int = RANGE_BYTES,
    progress: Progress | None = None,
) -> JoinResult:
    """Join the whole rollouts file without an orchestrator and write output and provenance.

    ``workers`` > 1 joins byte ranges of about ``range_bytes`` in that many processes; files under
    ``parallel_min_bytes`` stay in this process. The output bytes do not depend on either.
    ``progress`` is advanced by the rollouts bytes joined.
    """
    started_at = provenance.timestamp(datetime.now(UTC))
    if not storage.isfile(settings.rollouts):
        raise InputError(f"{settings.rollouts}: rollouts file not found")
    with locking.run_lock(settings.output, COMMAND):
        return _run_locked(
            settings, use_cache, workers, parallel_min_bytes, range_bytes, started_at, progress
        )


def _run_locked(
    settings: JoinSettings,
    use_cache: bool,
    workers: int,
    parallel_min_bytes: int,
    range_bytes: int,
    started_at: str,
    progress: Progress | None,
) -> JoinResult:
    record_url = provenance.record_path(settings.output)
    if use_cache and storage.exists(record_url) and provenance.up_to_date(record_url, current_key(settings)):
        record = provenance.read_record(record_url) or {}
        return JoinResult(settings, {"cache_key": record.get("cache_key")}, record_url, up_to_date=True)
    warnings = missing_capture_warning(settings)
    stats = JoinStats()
    source = _Hashed()
    if workers > 1 and storage.size(settings.rollouts) >= parallel_min_bytes:
        chunks = _parallel(settings, stats, source, workers, range_bytes, progress)
    else:
        chunks = _serial(settings, stats, source, progress)
    written_sha, written_bytes = storage.write_atomic_lines(settings.output, chunks)
    rollouts = provenance.FileDigest(storage.to_uri(settings.rollouts), source.hexdigest(), source.bytes)
    output = provenance.FileDigest(storage.to_uri(settings.output), written_sha, written_bytes)
    record_url = finish(settings, stats, rollouts, output, {"kind": "direct"}, started_at)
    return JoinResult(settings, stats.summary(), record_url, warnings, list(stats.errors))

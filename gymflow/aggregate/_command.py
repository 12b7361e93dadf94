"""``eval aggregate``'s one sequence: select, hash, scan each shard, merge while reducing, write.

:func:`run_aggregate` runs it on any :class:`~gymflow.executor.Executor`: this process (and, with
``workers`` > 1, a pool reading local shards) for ``--direct``, Prefect tasks for the default
mode. One task per shard reads it (parse, per-row facts, sidecars), cached by the SHA-256 of the
shard and its sidecars and the output-affecting options, so after one shard changes a rerun reads
only that shard.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gymflow import kept, lineage, provenance, scratch, storage
from gymflow.aggregate._reduce import Reduction
from gymflow.aggregate._run import (
    COMMAND,
    AggregateOptions,
    AggregateOutcome,
    Echo,
    ShardPart,
    apply_server_metrics,
    is_up_to_date,
    loaded_line,
    merge_job,
    prehash,
    read_cached,
    reduce_parts,
    report_run,
    scan_part,
    up_to_date_line,
    write_merged_file,
    write_metrics_file,
    write_record,
)
from gymflow.aggregate._scan import ShardScan
from gymflow.aggregate._select import select_shards
from gymflow.executor import Executor, LocalExecutor, Step
from gymflow.kept import kept_files
from gymflow.parallel import can_fork, default_workers
from gymflow.provenance import FileDigest
from gymflow.run_context import RunContext

__all__ = ["READERS_MIN_BYTES", "run_aggregate"]

READERS_MIN_BYTES = 192 * 2**20
"""Where reader processes would be spawned (:func:`gymflow.parallel.can_fork` is false), local
shards smaller than this, in all, are read in this process by ``--direct``: a spawned reader costs
about 0.3 s to start (a fresh interpreter and its imports). Measured on two CPUs, one process
against two spawned readers: 26 MB 1.05 s against 1.30 s; 166-170 MB 1.3-2.1 s against 1.5-1.9 s
(even); 263 MB 4.5 s against 4.1 s; 670 MB 5.2 s against 4.1 s. Forked readers start in
milliseconds and are used at any size: best of 3, one process against two forked readers, 6 rows
0.60 s against 0.62 s; 25 MB 1.36 s against 0.98 s; 166 MB 1.52 s against 1.50 s; 170 MB of
corpus 2 2.40 s against 1.93 s."""

Digests = tuple[tuple[str, FileDigest], ...]


@dataclass(frozen=True)
class ShardWork:
    """One shard to read: where (as the executor's workers reach it), its place, the run's
    options, the local spool directory for a remote shard's bytes, and the digests of the run."""

    shard: str
    index: int
    options: AggregateOptions
    spool_dir: str | None
    digests: Digests
    spill_dir: str | None = None
    """Local scratch for the shard's rows (set where results are not stored: it is gone after)."""
    keep_dir: str | None = None
    """Where a stored result keeps the shard's rows (:mod:`gymflow.kept`)."""


def _scan(work: ShardWork) -> ShardPart:
    if work.keep_dir is None:
        return scan_part(work.shard, work.index, work.options, work.spool_dir, work.spill_dir)
    with kept_files(work.keep_dir, _shard_key(work)) as (staging, final):
        part = scan_part(work.shard, work.index, work.options, work.spool_dir, staging)
    runs = part.scan.runs
    runs[:] = [os.path.join(final, os.path.basename(run)) if isinstance(run, str) else run for run in runs]
    return part


def _run_files(part: ShardPart) -> list[str]:
    return [run for run in part.scan.runs if isinstance(run, str)]


def _shard_key(work: ShardWork) -> str:
    own = {f"{role}:{work.index}" for role in ("shard", "failures", "materialized")}
    sources = [(role, digest.sha256) for role, digest in work.digests if role in own]
    settings: dict[str, Any] = {
        "options": work.options.parameters(),
        "shard": storage.to_uri(work.shard),
        "index": work.index,
        "result": 4,  # ShardPart's layout (rows as compressed runs or kept files): older ones do not load
    }
    if not storage.is_local(work.shard):
        settings["spool_dir"] = work.spool_dir  # the spooled copy lives for one run only
    key = provenance.cache_key("task:aggregate-shard", settings, sources)
    return f"aggregate-shard-{key.removeprefix('sha256:')}"


def _prehash(job: tuple[Sequence[str], AggregateOptions]) -> Digests:
    return tuple(prehash(*job))


def _reduce(job: tuple[Sequence[ShardPart], AggregateOptions]) -> Reduction:
    return reduce_parts(*job)


def _server_metrics(job: tuple[Reduction, AggregateOptions, Sequence[str]]) -> Reduction:
    apply_server_metrics(*job)
    return job[0]


def _write_metrics(job: tuple[Reduction, AggregateOptions]) -> provenance.FileDigest:
    return write_metrics_file(*job)


_RecordJob = tuple[
    Sequence[ShardPart],
    AggregateOptions,
    RunContext,
    str,
    provenance.FileDigest,
    provenance.FileDigest | None,
]


def _write_record(job: _RecordJob) -> None:
    write_record(*job)


PREHASH: Step[tuple[Sequence[str], AggregateOptions], Digests] = Step("prehash", _prehash, io=True)
SCAN_SHARD: Step[ShardWork, ShardPart] = Step("scan-shard", _scan, io=True, cpu=True, cache_key=_shard_key)
WRITE_MERGED: Step[tuple[list[ShardScan], str], provenance.FileDigest] = Step(
    "write-merged", write_merged_file, io=True, cpu=True
)
"""On a worker process where there is one, beside :data:`REDUCE` (the two take about as long)."""
REDUCE: Step[tuple[Sequence[ShardPart], AggregateOptions], Reduction] = Step("reduce", _reduce)
"""Not retried: a failing reduce would fail again, and a rerun reads the shards from the cache."""
SERVER_METRICS: Step[tuple[Reduction, AggregateOptions, Sequence[str]], Reduction] = Step(
    "server-metrics", _server_metrics, io=True
)
WRITE_METRICS: Step[tuple[Reduction, AggregateOptions], provenance.FileDigest] = Step(
    "write-metrics", _write_metrics, io=True
)
WRITE_RECORD: Step[_RecordJob, None] = Step("write-provenance", _write_record, io=True)


def _quiet(_: str) -> None:
    return None


def run_aggregate(
    options: AggregateOptions,
    ctx: RunContext | None = None,
    executor: Executor | None = None,
    echo: Echo = _quiet,
    progress: Callable[[int], None] | None = None,
) -> AggregateOutcome:
    """Merge the shards of ``options.input_glob`` into ``options.output`` and compute the
    metrics, holding the run lock of the output throughout (default executor: this process, and
    ``options.workers`` processes reading local shards, by default one per CPU up to 8 over
    :data:`READERS_MIN_BYTES` or more, stopped once the shards are read). ``progress`` advances
    by each shard's bytes as it is read."""
    ctx = ctx or RunContext()
    with lineage.run(COMMAND, ctx), ctx.active(), ctx.lock(options.output, COMMAND):
        started_at = provenance.timestamp()
        shards = select_shards(options.input_glob, options.output)
        readers = _with_readers(shards, options, executor is not None and executor.persistent)
        if executor is not None:
            return _run(options, shards, readers, ctx, executor, echo, progress, started_at)
        pool = (options.workers or default_workers()) if readers else 1
        with LocalExecutor(ctx, pool, "reading shards") as local:
            return _run(options, shards, readers, ctx, local, echo, progress, started_at)


def _with_readers(shards: Sequence[str], options: AggregateOptions, persistent: bool) -> bool:
    """Whether local shards are read where the executor runs CPU-bound work. Forked readers pay
    at any size; spawned ones only over enough bytes (:data:`READERS_MIN_BYTES`), unless --workers
    asks for them. A stored result (``persistent``) is read where the executor's steps run. Remote
    shards are read in this process."""
    if not all(storage.is_local(shard) for shard in shards):
        return False
    return (
        persistent
        or options.workers is not None
        or can_fork()
        or sum(storage.size(shard) for shard in shards) >= READERS_MIN_BYTES
    )


def _run(
    options: AggregateOptions,
    shards: list[str],
    readers: bool,
    ctx: RunContext,
    executor: Executor,
    echo: Echo,
    progress: Callable[[int], None] | None,
    started_at: str,
) -> AggregateOutcome:
    """``readers``: whether local shards are read where ``executor`` runs CPU-bound work
    (:func:`_with_readers`)."""
    outcome = AggregateOutcome(
        shards, options.output, options.merge_shards, options.metrics_path, options.record_path, False
    )
    echo(f"Aggregating {len(shards)} shard(s):")
    for shard in shards:
        echo(f"  - {shard}")
    located = [executor.locate(shard) for shard in shards]
    digests = executor.call(PREHASH, (located, options)) if options.use_cache or executor.persistent else ()
    if options.use_cache and is_up_to_date(shards, options, digests):
        outcome.up_to_date = True
        echo(up_to_date_line(options))
        read_cached(outcome)
        return outcome
    # Remote shards are read in this process (on threads where the executor has them, else one
    # after the other) and spooled to its scratch space for the merge: network-bound, and their
    # storage options (sessions, credentials) need not survive pickling into another. Local ones
    # are read where the executor runs CPU-bound work.
    remote = not all(storage.is_local(shard) for shard in shards)
    spool_dir = scratch.scratch_dir("aggregate") if executor.same_machine or remote else None
    scan = replace(SCAN_SHARD, cpu=readers).cached(options.use_cache)

    def done(_: ShardWork, part: ShardPart) -> None:
        if progress is not None:
            progress(part.scan.nbytes)

    try:
        spill_dir = spool_dir if executor.same_machine and not executor.persistent else None
        work = [
            ShardWork(shard, index, options, spool_dir, digests, spill_dir, executor.keep_dir)
            for index, shard in enumerate(located)
        ]
        if remote and not executor.same_machine:
            parts = []
            for item in work:
                parts.append(executor.call(scan, item))
                done(item, parts[-1])
        else:
            parts = executor.map(scan, work, done=done)
        kept.recompute_lost(executor, scan, work, parts, _run_files)
        echo(loaded_line(parts))
        merging = None
        if options.merge_shards:
            echo(f"Merging shards into {options.output}")
            merging = executor.start(WRITE_MERGED, merge_job(parts, options.output))
        try:  # the metrics while the merged file is written
            reduction = executor.call(REDUCE, (parts, options))
            if options.server_metrics:
                reduction = executor.call(SERVER_METRICS, (reduction, options, shards))
            metrics = executor.call(WRITE_METRICS, (reduction, options))
        finally:  # the merged file is complete (or its error raised) before the run goes on
            merged = None if merging is None else merging.result()
        executor.rest()  # the rest runs here: the readers' processes need not wait beside it
        if merged is not None:  # written elsewhere: the health check that follows need not hash it again
            provenance.remember(options.output, merged)
    finally:
        if spool_dir is not None:
            shutil.rmtree(spool_dir, ignore_errors=True)
    outputs = [options.metrics_path, options.record_path] + ([options.output] if merged else [])
    record = WRITE_RECORD.writing(outputs, [digest.uri for _, digest in digests])
    executor.call(record, (parts, options, ctx, started_at, metrics, merged))
    report_run(reduction, options, outcome, echo)
    return outcome

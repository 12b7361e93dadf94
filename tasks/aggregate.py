"""Prefect tasks of ``eval aggregate``: each a few lines around one core step.

One task per shard reads it once (hash, parse, per-row facts, sidecars); ``merge-shards`` writes
the merged file; ``reduce-metrics`` computes every group's metrics; ``write-outputs`` writes the
metrics file and the provenance record. I/O tasks retry with backoff; the reduce does not. No task
caches: the up-to-date check is the provenance record's (core); Prefect's input hashing would
only cost time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from gymflow import aggregate, storage
from gymflow.aggregate import AggregateOptions, Reduction, ShardPart
from gymflow.provenance import FileDigest
from gymflow.tasks._retries import IO_RETRIES


@task(name="scan-shard", cache_policy=NO_CACHE, **IO_RETRIES)
def scan_shard(
    shard: str, index: int, options: AggregateOptions, spool_dir: str, storage_options: dict[str, Any]
) -> ShardPart:
    storage.configure(storage_options)
    return aggregate.scan_part(shard, index, options, spool_dir)


@task(name="merge-shards", cache_policy=NO_CACHE, **IO_RETRIES)
def merge_shards(parts: Sequence[ShardPart], output: str) -> FileDigest:
    return aggregate.write_merged([part.scan for part in parts], output)


@task(name="reduce-metrics", cache_policy=NO_CACHE)
def reduce_metrics(parts: Sequence[ShardPart], options: AggregateOptions) -> Reduction:
    return aggregate.reduce_shards([p.scan for p in parts], [p.sidecars for p in parts], options.settings)


@task(name="write-outputs", cache_policy=NO_CACHE, **IO_RETRIES)
def write_outputs(
    parts: Sequence[ShardPart],
    reduction: Reduction,
    options: AggregateOptions,
    orchestrator: Mapping[str, Any],
    started_at: str,
    merged: FileDigest | None = None,
) -> None:
    aggregate.write_outputs(parts, reduction, options, orchestrator, started_at, merged)

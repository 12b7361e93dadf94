"""Prefect tasks of ``eval aggregate``: each a few lines around one core step.

``prehash`` digests every input (shards, their sidecars, config files) once: the up-to-date check
and the shard tasks' cache keys both use it. One task per shard reads it (parse, per-row facts,
sidecars), cached by the SHA-256 of the shard and its sidecars and the output-affecting options,
so after one shard changes a rerun reads only that shard. ``merge-and-reduce`` computes every
group's metrics while it writes the merged file (not retried: a failing reduce would fail again,
and a rerun reads the shards from the cache); ``server-metrics`` asks the resources servers
(``--server-metrics``); ``write-outputs`` writes the metrics file and the provenance record and
materialises the outputs as Prefect assets (the flow names them, with the inputs as their
dependencies). I/O tasks retry with backoff; the reduce does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prefect import task
from prefect.assets import materialize
from prefect.cache_policies import NO_CACHE

from gymflow import aggregate, parallel, storage
from gymflow.aggregate import AggregateOptions, Reduction, ShardPart
from gymflow.provenance import FileDigest
from gymflow.tasks._cache import content_key
from gymflow.tasks._retries import IO_RETRIES

Digests = Sequence[tuple[str, FileDigest]]


@task(name="select-shards", cache_policy=NO_CACHE, **IO_RETRIES)
def select_shards(options: AggregateOptions) -> list[str]:
    return aggregate.select_shards(options.input_glob, options.output)


@task(name="prehash", cache_policy=NO_CACHE, **IO_RETRIES)
def prehash(shards: Sequence[str], options: AggregateOptions) -> list[tuple[str, FileDigest]]:
    return aggregate.prehash(shards, options)


@task(name="up-to-date", cache_policy=NO_CACHE, **IO_RETRIES)
def up_to_date(shards: Sequence[str], options: AggregateOptions, digests: Digests) -> bool:
    return aggregate.is_up_to_date(shards, options, digests)


def _shard_parts(parameters: Mapping[str, Any]) -> tuple[Mapping[str, Any], Sequence[tuple[str, str]]]:
    options: AggregateOptions = parameters["options"]
    index: int = parameters["index"]
    shard: str = parameters["shard"]
    own = {f"{role}:{index}" for role in ("shard", "failures", "materialized")}
    mine = [(role, digest.sha256) for role, digest in parameters["digests"] if role in own]
    settings: dict[str, Any] = {
        "options": options.parameters(),
        "shard": storage.to_uri(shard),
        "index": index,
    }
    if not storage.is_local(shard):
        settings["spool_dir"] = parameters["spool_dir"]  # the spooled copy lives for one run only
    return settings, mine


@task(
    name="scan-shard",
    cache_policy=content_key("aggregate-shard", _shard_parts),
    persist_result=True,
    **IO_RETRIES,
)
def scan_shard(
    shard: str,
    index: int,
    options: AggregateOptions,
    spool_dir: str,
    storage_options: dict[str, Any],
    digests: Digests,
    pool: parallel.Workers | None = None,
) -> ShardPart:
    if pool is not None:
        return pool.call(aggregate.scan_part, shard, index, options, spool_dir)
    storage.configure(storage_options)
    return aggregate.scan_part(shard, index, options, spool_dir)


@task(name="merge-and-reduce", cache_policy=NO_CACHE)
def merge_and_reduce(
    parts: Sequence[ShardPart], options: AggregateOptions
) -> tuple[Reduction, FileDigest | None]:
    return aggregate.merge_and_reduce(parts, options)


@task(name="server-metrics", cache_policy=NO_CACHE, **IO_RETRIES)
def server_metrics(reduction: Reduction, options: AggregateOptions, shards: Sequence[str]) -> Reduction:
    aggregate.apply_server_metrics(reduction, options, shards)
    return reduction


@materialize("gymflow://aggregate-outputs", name="write-outputs", cache_policy=NO_CACHE, **IO_RETRIES)
def write_outputs(
    parts: Sequence[ShardPart],
    reduction: Reduction,
    options: AggregateOptions,
    orchestrator: Mapping[str, Any],
    started_at: str,
    merged: FileDigest | None = None,
) -> None:
    aggregate.write_outputs(parts, reduction, options, orchestrator, started_at, merged)

"""Prefect tasks of the evidence join: each a few lines around one core call.

``join_range`` owns the rows that start in its byte range and reads their capture files itself, so
capture I/O is spread over the workers with the rows; on this machine it hands the work to the
flow's lean process pool (Prefect's task on a thread waits for it). It is not cached across runs: its result
depends on capture files its parameters do not name; the command-level provenance check skips a
whole unchanged join instead. ``concatenate-parts`` materialises the joined rollouts as a Prefect
asset (the flow names it, with the rollouts and the capture directory upstream). I/O tasks retry
with backoff.
"""

from __future__ import annotations

from prefect import task
from prefect.assets import materialize
from prefect.cache_policies import NO_CACHE

import gymflow.join as core
from gymflow import parallel, provenance, storage
from gymflow.join import JoinSettings, JoinStats
from gymflow.tasks._retries import IO_RETRIES


@task(name="join-up-to-date", cache_policy=NO_CACHE, **IO_RETRIES)
def up_to_date(settings: JoinSettings) -> bool:
    record_url = provenance.record_path(settings.output)
    return storage.exists(record_url) and provenance.up_to_date(record_url, core.current_key(settings))


@task(name="hash-rollouts", cache_policy=NO_CACHE, **IO_RETRIES)
def hash_input(path: str) -> provenance.FileDigest:
    return provenance.digest(path)


@task(name="plan-join-ranges", cache_policy=NO_CACHE, **IO_RETRIES)
def plan_ranges(settings: JoinSettings, workers: int) -> list[tuple[int, int]]:
    return core.plan_ranges(settings, workers)


@task(name="join-range", cache_policy=NO_CACHE)
def join_range(
    settings: JoinSettings, start: int, end: int, part_url: str, pool: parallel.Workers | None = None
) -> JoinStats:
    if pool is None:
        return core.join_range(settings, start, end, part_url)
    return pool.call(core.join_range, settings, start, end, part_url)


@materialize("gymflow://joined-rollouts", name="concatenate-parts", cache_policy=NO_CACHE, **IO_RETRIES)
def concatenate(settings: JoinSettings, parts: list[str]) -> provenance.FileDigest:
    return core.concatenate_parts(settings, parts)


@task(name="write-provenance", cache_policy=NO_CACHE, **IO_RETRIES)
def write_provenance(
    settings: JoinSettings,
    stats: JoinStats,
    rollouts: provenance.FileDigest,
    output: provenance.FileDigest,
    orchestrator: dict[str, object],
    started_at: str,
) -> str:
    return core.finish(settings, stats, rollouts, output, dict(orchestrator), started_at)

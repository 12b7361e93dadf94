"""Prefect tasks of the evidence join: each a few lines around one core call.

``join_range`` owns the rows that start in its byte range and reads their capture files itself, so
capture I/O is spread over the workers with the rows. It is not cached across runs: its result
depends on capture files its parameters do not name; the command-level provenance check skips a
whole unchanged join instead. I/O tasks retry with backoff.
"""

from __future__ import annotations

from prefect import task

from gymflow import provenance, storage
from gymflow.join import run
from gymflow.join.run import JoinSettings
from gymflow.join.stats import JoinStats
from gymflow.tasks._retries import IO_RETRIES


@task(name="join-up-to-date", **IO_RETRIES)
def up_to_date(settings: JoinSettings) -> bool:
    record_url = provenance.record_path(settings.output)
    return storage.exists(record_url) and provenance.up_to_date(record_url, run.current_key(settings))


@task(name="hash-rollouts", **IO_RETRIES)
def hash_input(path: str) -> provenance.FileDigest:
    return provenance.digest(path)


@task(name="plan-join-ranges", **IO_RETRIES)
def plan_ranges(settings: JoinSettings, workers: int) -> list[tuple[int, int]]:
    return run.plan_ranges(settings, workers)


@task(name="join-range")
def join_range(settings: JoinSettings, start: int, end: int, part_url: str) -> JoinStats:
    return run.join_range(settings, start, end, part_url)


@task(name="concatenate-parts", **IO_RETRIES)
def concatenate(settings: JoinSettings, parts: list[str]) -> provenance.FileDigest:
    return run.concatenate_parts(settings, parts)


@task(name="write-provenance", **IO_RETRIES)
def write_provenance(
    settings: JoinSettings,
    stats: JoinStats,
    rollouts: provenance.FileDigest,
    output: provenance.FileDigest,
    orchestrator: dict[str, object],
    started_at: str,
) -> str:
    return run.finish(settings, stats, rollouts, output, dict(orchestrator), started_at)

"""Prefect tasks of ``eval reverify`` (spec §5): prepare (read, join, route, guard, outputs),
verify one batch of at most 1000 rows (the concurrency bound and the per-row retries are the
core's, never Prefect's), record a batch, finish (sort, aggregate, provenance; it materialises
the outputs as Prefect assets with the inputs as their dependencies).

A batch's result is cached by its rows' ``_ng_reverify_key`` s (content keys: input bytes and the
verifier's configuration), so a rerun over the same rows reuses every batch that completed. A
batch in which any row failed ends in a Failed state that still carries its rows: they are
recorded (the sidecar holds the failures), but nothing is cached, so the next run verifies that
batch again, and only that one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prefect import task
from prefect.assets import materialize
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State
from prefect.states import Completed, Failed

from gymflow import reverify
from gymflow.reverify import BatchResult, ReverifyOptions, ReverifyOutcome, ReverifyPlan, Routed
from gymflow.reverify._plan import Echo
from gymflow.reverify._verify import OnRow
from gymflow.run_context import RunContext
from gymflow.tasks._cache import content_key
from gymflow.tasks._retries import IO_RETRIES


@task(name="prepare", cache_policy=NO_CACHE)
def prepare(options: ReverifyOptions, gym_config: Mapping[str, Any], echo: Echo, warn: Echo) -> ReverifyPlan:
    return reverify.prepare(options, gym_config, echo, warn=warn)


def _batch_parts(parameters: Mapping[str, Any]) -> tuple[Mapping[str, Any], Sequence[tuple[str, str]]]:
    plan: ReverifyPlan = parameters["plan"]
    batch: Sequence[Routed] = parameters["batch"]
    settings = {"retry_invalid_judge_responses": plan.options.retry_invalid_judge_responses}
    return settings, [("row", routed.reverify_key) for routed in batch]


@task(
    name="verify-batch",
    cache_policy=content_key("reverify-batch", _batch_parts),
    persist_result=True,
)
def verify_batch(
    plan: ReverifyPlan, batch: Sequence[Routed], on_row: OnRow | None = None
) -> State[BatchResult]:
    result = reverify.verify_batch(plan, list(batch), on_row)
    if result.failures:
        classes = sorted({str(row.get("_ng_failure_class")) for row in result.failures})
        return Failed(message=f"{len(result.failures)} of {len(batch)} row(s) failed: {classes}", data=result)
    return Completed(data=result)


@task(name="record-batch", cache_policy=NO_CACHE, **IO_RETRIES)
def record_batch(plan: ReverifyPlan, result: BatchResult, echo: Echo) -> None:
    reverify.record_batch(plan, result, echo)


@materialize("gymflow://reverify-outputs", name="finish", cache_policy=NO_CACHE, **IO_RETRIES)
def finish(plan: ReverifyPlan, echo: Echo, ctx: RunContext) -> ReverifyOutcome:
    return reverify.finish(plan, echo, ctx)

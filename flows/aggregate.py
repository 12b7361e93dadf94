"""The ``eval aggregate`` flows (no logic here).

``eval-aggregate`` is the command: :func:`gymflow.pipeline.aggregate_then_health` with each step a
subflow. ``aggregate-shards`` is its first step (and ``eval post``'s): select and hash the shards,
one task per shard, then merge, reduce and write. The console text is collected and returned, so
the CLI prints the same lines as ``--direct``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prefect import flow

from gymflow import aggregate as core
from gymflow import locking, pipeline, provenance, scratch, storage
from gymflow.aggregate import AggregateOptions, AggregateOutcome
from gymflow.config import RunnerConfig
from gymflow.flows._annotations import Returned, unwalked
from gymflow.flows._publish import lineage, orchestrator, publish, record_inputs
from gymflow.flows._runtime import process_pool
from gymflow.tasks import aggregate as tasks


@dataclass
class FlowOutcome:
    outcome: AggregateOutcome
    console_lines: list[str] = field(default_factory=list)


def _markdown(outcome: AggregateOutcome) -> str:
    rows = ["# eval aggregate", "", "| group | key metrics |", "|---|---|"]
    for entry in outcome.entries:
        shown = ", ".join(f"{name} {value}" for name, value in entry.get("key_metrics", {}).items())
        rows.append(f"| {entry['agent_ref']['name']} | {shown} |")
    state = "up to date (nothing recomputed)" if outcome.up_to_date else "computed"
    return "\n".join([*rows, "", f"{len(outcome.shards)} shard(s); {state}."])


def _publish(outcome: AggregateOutcome) -> None:
    reports = {"aggregate metrics": outcome.metrics_path, "provenance": outcome.record_path}
    if outcome.merged:
        reports = {"merged rollouts": outcome.output, **reports}
    publish("eval-aggregate", outcome.output, _markdown(outcome), record_inputs(outcome.record_path), reports)


@flow(name="aggregate-shards", log_prints=False, validate_parameters=False)
def aggregate_flow(
    options: AggregateOptions,
    storage_options: dict[str, Any] | None = None,
    progress: Callable[[int], None] | None = None,
    offload_workers: int | None = None,
) -> Returned[FlowOutcome]:
    """Merge the shards of ``options.input_glob`` into ``options.output`` and compute the metrics.

    With ``offload_workers``, shard tasks hand the reading of local shards to that many
    core-only processes."""
    storage.configure(storage_options or {})
    with locking.run_lock(options.output, core.COMMAND):
        return Returned(_aggregated(options, progress, offload_workers))


def _aggregated(
    options: AggregateOptions, progress: Callable[[int], None] | None, offload_workers: int | None
) -> FlowOutcome:
    """The flow's work once the lock of its output is held."""
    lines: list[str] = []
    started_at = provenance.timestamp()
    shards = tasks.select_shards(options)
    outcome = AggregateOutcome(
        shards, options.output, options.merge_shards, options.metrics_path, options.record_path, False
    )
    lines.append(f"Aggregating {len(shards)} shard(s):")
    lines.extend(f"  - {shard}" for shard in shards)
    digests = tasks.prehash(shards, options)
    if tasks.up_to_date(shards, options, unwalked(digests)):
        outcome.up_to_date = True
        outcome.entries = core.cached_entries(options)
        lines.append(core.up_to_date_line(options))
        _publish(outcome)
        return FlowOutcome(outcome, lines)
    spool_dir = scratch.scratch_dir("aggregate")
    # Remote shards are read here: network-bound, and their storage options stay in this process.
    offload = offload_workers if all(storage.is_local(shard) for shard in shards) else None
    try:
        with process_pool(offload and min(offload, len(shards)), "reading shards") as pool:
            scan = tasks.scan_shard.with_options(refresh_cache=not options.use_cache)  # --no-cache: redo all
            # The digests are a few small records: passed plain (a quoted argument of a submitted
            # task reaches a Dask worker as a bare tuple).
            where = storage.current_options()
            futures = [
                scan.submit(shard, index, options, spool_dir, where, digests, pool)
                for index, shard in enumerate(shards)
            ]
            parts = []
            for future in futures:
                parts.append(future.result())
                if progress is not None:
                    progress(parts[-1].scan.nbytes)
        lines.append(core.loaded_line(parts))
        if options.merge_shards:
            lines.append(f"Merging shards into {options.output}")
        # unwalked(): Prefect would otherwise walk every per-row number of these arguments.
        reduction, merged = tasks.merge_and_reduce(unwalked(parts), options)
    finally:
        shutil.rmtree(spool_dir, ignore_errors=True)
    if options.server_metrics:
        reduction = tasks.server_metrics(unwalked(reduction), options, shards)
    outputs = [options.metrics_path, options.record_path] + ([options.output] if merged else [])
    write = tasks.write_outputs.with_options(**lineage(outputs, [digest.uri for _, digest in digests]))
    write(unwalked(parts), unwalked(reduction), options, orchestrator(), started_at, merged)
    core.report_run(reduction, options, outcome, lines.append)
    _publish(outcome)
    return FlowOutcome(outcome, lines)


@flow(name="eval-aggregate", log_prints=False, validate_parameters=False)
def aggregate_command(
    options: AggregateOptions,
    step_runner: RunnerConfig,
    workers: int,
    storage_options: dict[str, Any] | None = None,
    progress: Callable[[int], None] | None = None,
) -> Returned[FlowOutcome]:
    """``gymflow eval aggregate``: merge and metrics, then the health check (each a subflow)."""
    from gymflow.flows._steps import FlowSteps

    storage.configure(storage_options or {})
    lines: list[str] = []
    steps = FlowSteps(step_runner, workers, progress)
    outcome, _, _ = pipeline.aggregate_then_health(options, steps, lines.append)
    return Returned(FlowOutcome(outcome, lines))  # every group's metrics: Prefect must not walk them

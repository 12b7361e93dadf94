"""The ``eval aggregate`` flow: one task per shard, then merge, reduce and write (no logic here).

The console text is collected and returned, so the CLI prints the same lines as ``--direct``.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run

from gymflow import aggregate as core
from gymflow import provenance, storage
from gymflow.aggregate import AggregateOptions, AggregateOutcome
from gymflow.flows._annotations import unwalked
from gymflow.tasks import aggregate as tasks


@dataclass
class FlowOutcome:
    outcome: AggregateOutcome
    console_lines: list[str] = field(default_factory=list)


def _orchestrator() -> dict[str, Any]:
    return {
        "kind": "prefect",
        "flow_run_id": flow_run.get_id(),
        "flow_run_url": flow_run.get_flow_run_ui_url(),
    }


def _publish(outcome: AggregateOutcome) -> None:
    rows = [
        {"group": entry["agent_ref"]["name"], **{k: v for k, v in entry["key_metrics"].items()}}
        for entry in outcome.entries
    ]
    create_table_artifact(rows, key="aggregate-key-metrics", description="key metrics per group")
    create_markdown_artifact(
        f"- merged rollouts: `{outcome.output if outcome.merged else '<not merged>'}`\n"
        f"- aggregate metrics: `{outcome.metrics_path}`\n- provenance: `{outcome.record_path}`\n",
        key="aggregate-outputs",
    )


@flow(name="eval-aggregate", log_prints=False, validate_parameters=False)
def aggregate_flow(options: AggregateOptions, storage_options: dict[str, Any] | None = None) -> FlowOutcome:
    """Merge the shards of ``options.input_glob`` into ``options.output`` and compute the metrics."""
    storage.configure(storage_options or {})
    lines: list[str] = []
    started_at = provenance.timestamp()
    shards = core.select_shards(options.input_glob, options.output)
    outcome = AggregateOutcome(
        shards, options.output, options.merge_shards, options.metrics_path, options.record_path, False
    )
    lines.append(f"Aggregating {len(shards)} shard(s):")
    lines.extend(f"  - {shard}" for shard in shards)
    if core.is_up_to_date(shards, options):
        outcome.up_to_date = True
        lines.append(core.up_to_date_line(options))
        outcome.health_lines, outcome.health_error = core.run_health_after(options, shards)
        lines.extend(outcome.health_lines)
        return FlowOutcome(outcome, lines)
    spool_dir = tempfile.mkdtemp(prefix="gymflow-aggregate-")
    merged = None
    try:
        futures = [
            tasks.scan_shard.submit(shard, index, options, spool_dir, storage.current_options())
            for index, shard in enumerate(shards)
        ]
        parts = [future.result() for future in futures]
        lines.append(core.loaded_line(parts))
        if options.merge_shards:
            lines.append(f"Merging shards into {options.output}")
            merged = tasks.merge_shards(unwalked(parts), options.output)
    finally:
        shutil.rmtree(spool_dir, ignore_errors=True)
    # unwalked(): Prefect would otherwise walk every per-row number of these arguments for futures.
    reduction = tasks.reduce_metrics(unwalked(parts), options)
    core.apply_server_metrics(reduction, options, shards)
    tasks.write_outputs(unwalked(parts), unwalked(reduction), options, _orchestrator(), started_at, merged)
    core.report_run(reduction, options, outcome, lines.append)
    _publish(outcome)
    return FlowOutcome(outcome, lines)

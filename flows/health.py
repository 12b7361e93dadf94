"""The health-check flow: hash, plan byte ranges, evaluate them as coarse tasks, reduce, write.

It composes tasks only; every rule lives in ``gymflow.health``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run

from gymflow import health, provenance, storage
from gymflow.flows._annotations import unwalked
from gymflow.flows._runtime import process_pool
from gymflow.health import HealthOutcome
from gymflow.tasks import health as tasks


def _orchestrator() -> dict[str, Any]:
    return {
        "kind": "prefect",
        "flow_run_id": flow_run.get_id(),
        "flow_run_url": flow_run.get_flow_run_ui_url(),
    }


def _publish(outcome: HealthOutcome) -> None:
    run = outcome.summary["run"]
    rows = [{"verdict": verdict, "rollouts": count} for verdict, count in run["verdicts"].items()]
    rows += [
        {"verdict": f"issue: {check}", "rollouts": count} for check, count in run["issues"].items() if count
    ]
    create_table_artifact(rows, key="rollout-health", description=outcome.console_line)
    create_markdown_artifact(
        f"**{outcome.console_line}**\n\n- quality summary: `{outcome.summary_url}`\n"
        f"- provenance: `{outcome.record_url}`\n",
        key="rollout-health-reports",
    )


@flow(name="eval-health-check", log_prints=False)
def health_check(
    paths: Sequence[str],
    report_dir: str,
    workers: int | None = None,
    ignored_checks: Sequence[str] = (),
    use_cache: bool = True,
    storage_options: dict[str, dict[str, Any]] | None = None,
    offload_workers: int | None = None,
) -> HealthOutcome:
    """Health-check rollout files and write reports and provenance into ``report_dir``.

    With ``offload_workers``, range tasks hand their work to that many core-only processes.
    """
    storage.configure(storage_options or {})
    started_at = provenance.timestamp()
    plan = tasks.plan_ranges(paths, workers, ignored_checks)
    inputs = [future.result() for future in [tasks.hash_input.submit(path) for path in plan.paths]]
    summary_url = storage.join(report_dir, "quality_summary.json")
    record_url = provenance.record_path(summary_url)
    if use_cache and provenance.up_to_date(record_url, health.cache_key(plan, inputs)):
        return health.cached_outcome(summary_url, record_url)
    sha_by_source = [digest.sha256 for digest in inputs]
    with process_pool(offload_workers and min(offload_workers, len(plan.ranges))) as pool:
        futures = [
            tasks.evaluate_range.submit(
                byte_range, plan.ignored, sha_by_source[byte_range.source_index], pool
            )
            for byte_range in plan.ranges
        ]
        results = [future.result() for future in futures]
    # unwalked(): Prefect would otherwise walk every row of these arguments looking for futures.
    report = tasks.reduce_report(plan, unwalked(results))
    write = tasks.write_reports.with_options(
        assets=[
            storage.to_uri(summary_url),
            storage.to_uri(storage.join(report_dir, "rollout_verdicts.jsonl")),
        ],
        asset_deps=[digest.uri for digest in inputs],
    )
    outcome = write(plan, unwalked(report), report_dir, inputs, _orchestrator(), started_at)
    _publish(outcome)
    return outcome

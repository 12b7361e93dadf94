"""The ``eval reverify`` flow (spec §5): prepare, then each batch verified and recorded in turn
(one batch in flight keeps at most ``--concurrency`` requests at the server), then finish. It
composes tasks only; every rule lives in ``gymflow.reverify``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prefect import flow

from gymflow import locking, storage
from gymflow.flows._annotations import unwalked
from gymflow.flows._publish import RunProgress, lineage, orchestrator, publish, record_inputs
from gymflow.reverify import COMMAND, BatchResult, ReverifyOptions, ReverifyOutcome
from gymflow.reverify._results import Destination
from gymflow.tasks import reverify as tasks

BATCH_ROWS = 1000
Progress = Callable[[int, int, int], None]


@dataclass
class ReverifyFlowResult:
    outcome: ReverifyOutcome
    console_lines: list[str] = field(default_factory=list)
    cached_batches: int = 0


def _markdown(outcome: ReverifyOutcome, cached: int) -> str:
    tally = outcome.tally
    failures = ", ".join(f"{count} {name}" for name, count in sorted(tally.failures.items())) or "none"
    return (
        "# eval reverify\n\n"
        f"| selected | skipped by resume | verified | succeeded | failed | duplicates | unmatched |\n"
        "|---|---|---|---|---|---|---|\n"
        f"| {tally.selected} | {tally.skipped_by_resume} | {tally.verified} | {tally.succeeded} "
        f"| {tally.routed_failures} | {tally.duplicates} | {tally.unmatched} |\n\n"
        f"Failures by class: {failures}. Batches reused from the cache: {cached}."
    )


@flow(name="eval-reverify", log_prints=False, validate_parameters=False)
def reverify_flow(
    options: ReverifyOptions,
    gym_config: Mapping[str, Any],
    storage_options: dict[str, dict[str, Any]] | None = None,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
) -> ReverifyFlowResult:
    """Re-verify the selected rollouts through their resources servers' ``/verify``."""
    storage.configure(storage_options or {})
    with locking.run_lock(options.output_jsonl_fpath, COMMAND):
        return _reverified(options, gym_config, progress, warn)


def _reverified(
    options: ReverifyOptions,
    gym_config: Mapping[str, Any],
    progress: Progress | None,
    warn: Callable[[str], None] | None,
) -> ReverifyFlowResult:
    """The flow's work once the lock of its output is held."""
    lines: list[str] = []
    echo, warned = unwalked(lines.append), unwalked(warn or lines.append)
    plan = tasks.prepare(options, unwalked(gym_config), echo, warned)
    total = len(plan.work)
    done = failures = cached = 0

    def on_row(destination: Destination, _: dict[str, Any]) -> None:
        nonlocal done, failures
        done += 1
        failures += destination == "sidecar"
        if progress is not None:
            progress(done, failures, total)

    artifact = RunProgress("eval-reverify", options.output_jsonl_fpath, total / BATCH_ROWS)
    try:
        for batch in plan.batches(BATCH_ROWS):
            before = done
            future = tasks.verify_batch.submit(unwalked(plan), unwalked(batch), unwalked(on_row))
            future.wait()
            result = future.state.result(raise_on_failure=False)
            if not isinstance(result, BatchResult):
                raise result  # the task itself broke (not a row failure): stop, output stays resumable
            if done == before:  # a cache hit: no row completed in this run
                cached += 1
                done += len(batch)
                failures += len(result.failures)
                if progress is not None:
                    progress(done, failures, total)
            tasks.record_batch(unwalked(plan), unwalked(result), unwalked(lines.append))
            artifact.advance(len(batch) / BATCH_ROWS)
    except BaseException:
        plan.abort()
        raise
    paths = plan.paths
    written = [paths.output, paths.sidecar, paths.record] + (
        [] if options.disable_aggregation else [paths.metrics]
    )
    sources = (
        options.materialized_inputs_jsonl_fpath,
        options.rollouts_jsonl_fpath,
        options.atif_manifest_jsonl_fpath,
    )
    finish = tasks.finish.with_options(**lineage(written, [source for source in sources if source]))
    outcome = finish(unwalked(plan), unwalked(lines.append), orchestrator())
    reports = {"reverified rollouts": outcome.output, "failures sidecar": outcome.sidecar}
    if outcome.metrics_path:
        reports["aggregate metrics"] = outcome.metrics_path
    reports["provenance"] = outcome.record_path
    publish(
        "eval-reverify",
        outcome.output,
        _markdown(outcome, cached),
        record_inputs(outcome.record_path),
        reports,
    )
    return ReverifyFlowResult(outcome, lines, cached)

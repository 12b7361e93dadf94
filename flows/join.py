"""The evidence-join flow: plan byte ranges of the rollouts file, join each as one task (which
reads the capture files of its own rows), concatenate the parts atomically, write provenance.

It composes tasks only; every rule lives in ``gymflow.join``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefect import flow

from gymflow import locking, provenance, storage
from gymflow.flows._publish import lineage, orchestrator, publish, record_inputs
from gymflow.flows._runtime import process_pool
from gymflow.join import (
    COMMAND,
    JoinResult,
    JoinSettings,
    JoinStats,
    missing_capture_warning,
    part_urls,
    remove_parts,
    summary_paragraph,
)
from gymflow.tasks import join as tasks


def _publish(result: JoinResult) -> None:
    """The run's artifacts (also for a cached run: they link the output it found up to date)."""
    summary = result.summary
    if result.up_to_date:
        markdown = "# eval join\n\nJoined rollouts are up to date: nothing recomputed."
    else:
        rows = ["| measure | value |", "|---|---|"]
        rows += [
            f"| {k} | {summary[k]} |"
            for k in ("rows", "merged", "projected", "projection_failed", "perf_rows", "row_errors")
        ]
        rows += [f"| gap: {code} | {count} |" for code, count in summary["gap_counts"].items()]
        markdown = "\n".join([f"# eval join\n\n**{summary_paragraph(summary)}**\n", *rows])
    reports = {"joined rollouts": result.settings.output, "provenance": result.record_url}
    publish("eval-join", result.settings.output, markdown, record_inputs(result.record_url), reports)


@flow(name="eval-join", log_prints=False)
def join_flow(
    settings: JoinSettings,
    workers: int = 2,
    use_cache: bool = True,
    storage_options: dict[str, dict[str, Any]] | None = None,
    progress: Callable[[int], None] | None = None,
    offload_workers: int | None = None,
) -> JoinResult:
    """Join ``settings.rollouts`` with its CaptureStore into ``settings.output`` (``progress``
    advanced by each range's bytes as it completes); ``offload_workers``: processes of a pool of
    the flow's own that join the ranges (None: the tasks join them where they run, e.g. Dask)."""
    storage.configure(storage_options or {})
    with locking.run_lock(settings.output, COMMAND):
        return _joined(settings, workers, use_cache, progress, offload_workers)


def _joined(
    settings: JoinSettings,
    workers: int,
    use_cache: bool,
    progress: Callable[[int], None] | None,
    offload_workers: int | None,
) -> JoinResult:
    """The flow's work once the lock of its output is held."""
    started_at = provenance.timestamp()
    record_url = provenance.record_path(settings.output)
    if use_cache and tasks.up_to_date(settings):
        cached = JoinResult(settings, {}, record_url, up_to_date=True)
        _publish(cached)
        return cached
    warnings = missing_capture_warning(settings)
    rollouts = tasks.hash_input.submit(settings.rollouts)
    ranges = tasks.plan_ranges(settings, workers)
    parts = part_urls(settings, len(ranges))
    try:
        with process_pool(offload_workers and min(offload_workers, len(ranges)), "joining rollouts") as pool:
            futures = [
                tasks.join_range.submit(settings, start, end, part, pool)
                for (start, end), part in zip(ranges, parts, strict=True)
            ]
            stats = JoinStats()
            for (start, end), future in zip(ranges, futures, strict=True):
                stats.merge(future.result())
                if progress is not None:
                    progress(end - start)
        sources = [settings.rollouts] + ([settings.capture_dir] if settings.capture_dir else [])
        output = tasks.concatenate.with_options(**lineage([settings.output], sources))(settings, parts)
    finally:
        remove_parts(parts)
    record_url = tasks.write_provenance(
        settings, stats, rollouts.result(), output, orchestrator(), started_at
    )
    result = JoinResult(settings, stats.summary(), record_url, warnings, list(stats.errors))
    _publish(result)
    return result

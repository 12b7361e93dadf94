"""``eval reverify``'s one sequence: prepare, verify the rows in batches (each row recorded as it
completes), finish (reverify.md §5).

:func:`run_reverify` runs it on any :class:`~gymflow.executor.Executor`. Without a result store
(``--direct``) the whole run is one batch: one event loop and one connection pool keep
``--concurrency`` requests in flight from the first row to the last. With one (Prefect), each
batch of :func:`batch_rows` rows is a task cached by its rows' ``_ng_reverify_key`` s
(content keys: input bytes and the verifier's configuration), so a rerun over the same rows reuses
every batch that completed; a batch in which any row failed is not cached, so the next run
verifies that batch again, and only that one. Either way each completed row is appended at once
and flushed before the event loop's next turn (§2.6 point 4): a killed run leaves every recorded
row in the output or the sidecar exactly once for ``--resume``.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Final

from gymflow import kept, lineage, provenance
from gymflow.errors import GymflowError
from gymflow.executor import Executor, LocalExecutor, Step
from gymflow.reverify._client import Stream, TransportFactory, secure
from gymflow.reverify._finish import COMMAND, ReverifyOutcome, finish
from gymflow.reverify._options import ReverifyOptions
from gymflow.reverify._plan import Echo, ReverifyPlan, Routed, prepare
from gymflow.reverify._results import Destination
from gymflow.reverify._verify import (
    BatchResult,
    OnRow,
    record_batch,
    record_row,
    verify_batch,
    with_kept_rows,
)
from gymflow.reverify.launch import server_block
from gymflow.run_context import RunContext

__all__ = ["FailedRows", "Progress", "batch_rows", "run_reverify"]

BATCH_ROWS_MIN: Final = 1000
BATCH_ROWS_MAX: Final = 5000
BATCHES: Final = 8


def batch_rows(total: int) -> int:
    """Rows per cached batch of a run with a result store that verifies ``total`` rows: about an
    eighth of them, from :data:`BATCH_ROWS_MIN` to :data:`BATCH_ROWS_MAX`. Each batch is a Prefect
    task run, whose states cost the client ~15 ms and Prefect's server ~25 ms of CPU to record (20k
    rows, 20 batches of 1000 -> 8 of 2500: the server's CPU 1.13 -> 0.67 s, the client's 5.36 ->
    5.06 s, wall 6.39 -> 5.86 s, medians of 6 alternating runs); a row that fails costs the next
    run its batch, at most 5000 rows."""
    return min(BATCH_ROWS_MAX, max(BATCH_ROWS_MIN, -(-total // BATCHES)))


Progress = Callable[[int, int, int], None]
"""``progress(rows done, failures so far, rows to verify)``, called as rows complete."""


@dataclass(frozen=True)
class BatchJob:
    """One batch: the run's plan (live: a batch runs where the run does), its rows (pulled
    lazily, as the requests go out), how many, where each completed row goes, and (for a cached
    batch) each row's server and content key."""

    plan: ReverifyPlan
    rows: Iterable[Routed]
    count: int
    on_row: OnRow
    keys: tuple[tuple[str, str], ...] = ()
    """Each row's server and content key: a cached batch, whose result holds its rows."""
    stream: Stream | None = None
    """The run's loop and connections, shared by its batches (None: the batch opens its own)."""
    keep_dir: str | None = None
    """Where a stored result keeps the batch's rows (:mod:`gymflow.kept`; None: in the result)."""

    @cached_property
    def cache_key(self) -> str:
        """The batch's key in the result store (:func:`_batch_key`), computed once: the executor
        asks for it before the batch runs, and the batch names its kept rows by it."""
        return _batch_key(self)


class FailedRows(GymflowError):
    """A batch in which some rows failed: its result is kept (the sidecar has the failures) but
    must not be cached. Its text names counts and classes, never a row."""

    def __init__(self, result: BatchResult, count: int) -> None:
        classes = sorted({str(row.get("_ng_failure_class")) for row in result.failures})
        super().__init__(f"{len(result.failures)} of {count} row(s) failed: {', '.join(classes)}")
        self.result = result


def _verify(job: BatchJob) -> BatchResult:
    result = verify_batch(job.plan, job.rows, job.on_row, job.count, keep=bool(job.keys), stream=job.stream)
    if result.failures:
        raise FailedRows(result, job.count)
    if job.keep_dir is not None and result.lines:
        return with_kept_rows(result, job.keep_dir, job.cache_key)
    return result


def _batch_key(job: BatchJob) -> str:
    """The batch's rows (their content keys: input bytes and the verifier's configuration) and
    the verifier that scores them: per routed server its address, its settings (the config hash of
    provenance, launch recipe included) and the mode it reported. A server moved to another port,
    or a different server at the configured one, is another verifier, so its rows are verified
    again. A server gymflow launches on a port it picks is named by its configured host and its
    launch recipe, so a rerun still finds the batches of the previous launch. The output location
    is not part of the key: a stored batch is written into whichever output the run has."""
    if len(job.keys) != job.count:
        raise TypeError("a cached batch must name its rows' keys")
    plan = job.plan
    settings = {"retry_invalid_judge_responses": plan.options.retry_invalid_judge_responses}
    sources = [("row", key) for _, key in job.keys]
    verifier = {
        name: {
            "address": _address(plan, name),
            "config_sha256": plan.verifier_hashes.get(name),
            "reverify_mode": plan.modes.get(name),
        }
        for name in sorted({server for server, _ in job.keys})
    }
    key = provenance.cache_key("task:reverify-batch", settings, sources, verifier)
    return "reverify-batch-" + key.removeprefix("sha256:")


def _address(plan: ReverifyPlan, name: str) -> str:
    """Where the server ``name`` is: its URL, or for a server gymflow launched on a port it picked,
    the configured address (host only)."""
    url = plan.urls[name]
    try:
        configured = server_block(plan.gym_config, name)
    except GymflowError:
        return url
    return configured.url if configured.port is None and configured.launchable else url


def _finish(job: tuple[ReverifyPlan, Echo, RunContext]) -> ReverifyOutcome:
    return finish(*job)


VERIFY_BATCH: Step[BatchJob, BatchResult] = Step(
    "verify-batch", _verify, cache_key=operator.attrgetter("cache_key")
)
FINISH: Step[tuple[ReverifyPlan, Echo, RunContext], ReverifyOutcome] = Step("finish", _finish, io=True)


def run_reverify(
    options: ReverifyOptions,
    gym_config: Mapping[str, Any],
    echo: Echo,
    progress: Progress | None = None,
    ctx: RunContext | None = None,
    executor: Executor | None = None,
    *,
    warn: Echo | None = None,
    transport: TransportFactory | None = None,
    timings: dict[str, float] | None = None,
) -> ReverifyOutcome:
    """The whole command, holding the run lock of ``--output`` (:mod:`gymflow.locking`); on any
    interruption the output is left resumable. ``timings``, when given, receives the seconds of
    ``prepare``, ``stream`` and ``finish``.
    """
    ctx = ctx or RunContext()
    with lineage.run(COMMAND, ctx), ctx.active(), ctx.lock(options.output_jsonl_fpath, COMMAND):
        marks = timings if timings is not None else {}
        began = time.perf_counter()
        # The provenance record's input digests: hashed on a thread while the run reads and verifies.
        provenance.prefetch(options.input_files())
        plan = prepare(options, gym_config, echo, warn=warn, transport=transport)
        marks["prepare"] = time.perf_counter() - began
        with LocalExecutor(ctx) if executor is None else nullcontext(executor) as runs:
            try:
                began = time.perf_counter()
                _verify_all(plan, runs, echo, progress)
                marks["stream"] = time.perf_counter() - began
            except BaseException:
                plan.abort()
                raise
            began = time.perf_counter()
            sources = [
                source
                for source in (
                    options.materialized_inputs_jsonl_fpath,
                    options.rollouts_jsonl_fpath,
                    options.atif_manifest_jsonl_fpath,
                )
                if source
            ]
            paths = plan.paths
            written = [paths.output, paths.sidecar, paths.record]
            if not options.disable_aggregation:
                written.append(paths.metrics)
            outcome = runs.call(FINISH.writing(written, sources), (plan, echo, ctx))
            marks["finish"] = time.perf_counter() - began
            return outcome


def _verify_all(plan: ReverifyPlan, executor: Executor, echo: Echo, progress: Progress | None) -> None:
    """Every row still to verify, batch by batch, each recorded as it completes (a batch found in
    the result store is recorded from there)."""
    total = len(plan.work)
    done = failures = 0
    flush_pending = False

    def flush() -> None:
        nonlocal flush_pending
        flush_pending = False
        plan.flush()

    def on_row(destination: Destination, row: dict[str, Any], line: bytes) -> None:
        nonlocal done, failures, flush_pending
        # Rows completed in one turn of the event loop are flushed together at the start of its next
        # turn (one write per turn, not per row); a row lost to kill -9 before that is verified again
        # by --resume, never recorded twice.
        record_row(plan, destination, row, echo, flush=False, line=line)
        if not flush_pending:
            flush_pending = True
            asyncio.get_running_loop().call_soon(flush)
        done += 1
        failures += destination == "sidecar"
        if progress is not None:
            progress(done, failures, total)

    def outcome(job: BatchJob, step: Step[BatchJob, BatchResult]) -> BatchResult:
        try:
            return executor.call(step, job)
        except FailedRows as failed:
            return failed.result

    def run(job: BatchJob) -> None:
        nonlocal done, failures
        before = done
        result = outcome(job, VERIFY_BATCH)
        if done == before and job.count and not kept.present(result.files):
            result = outcome(job, VERIFY_BATCH.cached(False))  # its kept rows are gone: verified again
        plan.flush()
        if done == before and job.count:  # found in the result store: no row completed in this run
            record_batch(plan, result, echo)
            done += job.count
            failures += len(result.failures)
            if progress is not None:
                progress(done, failures, total)

    if not executor.persistent:
        run(BatchJob(plan, plan.rows(), total, on_row))
        plan.release()
        plan.flush()
        return
    # Batches of the work list: a batch's cache key needs only its rows' content keys, and its rows
    # are read and built as its requests go out (no pause to read the next batch first), on one
    # loop and one set of connections for the whole run.
    sources = plan.sources()
    size = batch_rows(total)
    with Stream(plan.settings, plan.transport, secure(plan.urls.values())) as stream:
        for start in range(0, total, size):
            works = plan.work[start : start + size]
            pulled = itertools.islice(sources, len(works))
            rows = (plan.routed(work, line) for work, line in pulled)
            keys = tuple((w.server, w.reverify_key) for w in works)
            run(BatchJob(plan, rows, len(works), on_row, keys, stream, executor.keep_dir))
            for _ in pulled:  # a batch found in the result store read none of its rows
                pass
    plan.release()
    plan.flush()

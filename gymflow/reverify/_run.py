"""The direct path: prepare, verify every row as one stream, finish (reverify.md §5 without Prefect).

One event loop and one connection pool for the whole run: the client pulls rows lazily from the
source, keeps ``--concurrency`` requests in flight from the first row to the last (no drain at batch
boundaries), and each completed row is appended at once and flushed before the loop's next turn
(§2.6 point 4), so a killed run leaves every recorded row in the output or the sidecar exactly once
for ``--resume``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from gymflow.reverify._client import Result, TransportFactory, run, verify_stream
from gymflow.reverify._finish import COMMAND, ReverifyOutcome, finish
from gymflow.reverify._options import ReverifyOptions
from gymflow.reverify._plan import Echo, Routed, prepare
from gymflow.reverify._verify import completed_row, record_row, requests_of
from gymflow.run_context import RunContext

__all__ = ["Progress", "run_reverify"]

Progress = Callable[[int, int, int], None]
"""``progress(rows done, failures so far, rows to verify)``, called as rows complete."""


def run_reverify(
    options: ReverifyOptions,
    gym_config: Mapping[str, Any],
    echo: Echo,
    progress: Progress | None = None,
    ctx: RunContext | None = None,
    *,
    warn: Echo | None = None,
    transport: TransportFactory | None = None,
    guard_transport: httpx.BaseTransport | None = None,
    timings: dict[str, float] | None = None,
) -> ReverifyOutcome:
    """The whole command in-process, holding the run lock of ``--output`` (:mod:`gymflow.locking`).
    Rows are streamed and recorded one by one; on any interruption the output is left resumable.
    ``timings``, when given, receives the seconds of ``prepare``, ``stream`` and ``finish``.
    """
    ctx = ctx or RunContext()
    with ctx.active(), ctx.lock(options.output_jsonl_fpath, COMMAND):
        return _run(options, gym_config, echo, progress, ctx, warn, transport, guard_transport, timings)


def _run(
    options: ReverifyOptions,
    gym_config: Mapping[str, Any],
    echo: Echo,
    progress: Progress | None,
    ctx: RunContext,
    warn: Echo | None,
    transport: TransportFactory | None,
    guard_transport: httpx.BaseTransport | None,
    timings: dict[str, float] | None,
) -> ReverifyOutcome:
    marks = timings if timings is not None else {}
    began = time.perf_counter()
    plan = prepare(options, gym_config, echo, warn=warn, transport=transport, guard_transport=guard_transport)
    marks["prepare"] = time.perf_counter() - began
    total = len(plan.work)
    done = 0
    failures = 0

    flush_pending = False

    def flush() -> None:
        nonlocal flush_pending
        flush_pending = False
        plan.flush()

    def on_result(routed: Routed, outcome: Result) -> None:
        nonlocal done, failures, flush_pending
        destination, row = completed_row(plan, routed, outcome)
        # Rows completed in one turn of the event loop are flushed together at the start of its next
        # turn (one write per turn, not per row); a row lost to kill -9 before that is verified again
        # by --resume, never recorded twice.
        record_row(plan, destination, row, echo, flush=False)
        if not flush_pending:
            flush_pending = True
            asyncio.get_running_loop().call_soon(flush)
        done += 1
        if destination == "sidecar":
            failures += 1
        if progress is not None:
            progress(done, failures, total)

    began = time.perf_counter()
    try:
        if total:
            stream = verify_stream(
                requests_of(plan.rows()), plan.settings, on_result, plan.transport, pool=total
            )
            run(stream)
    except BaseException:
        plan.abort()
        raise
    marks["stream"] = time.perf_counter() - began
    began = time.perf_counter()
    outcome = finish(plan, echo, ctx)
    marks["finish"] = time.perf_counter() - began
    return outcome

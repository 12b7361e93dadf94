"""The direct path: prepare, verify and record each batch, finish (reverify.md §5 without Prefect)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import httpx

from gymflow.reverify._client import TransportFactory
from gymflow.reverify._finish import ReverifyOutcome, finish
from gymflow.reverify._options import ReverifyOptions
from gymflow.reverify._plan import Echo, prepare
from gymflow.reverify._results import Destination
from gymflow.reverify._verify import record_batch, verify_batch

__all__ = ["Progress", "run_reverify"]

Progress = Callable[[int, int, int], None]
"""``progress(rows done, failures so far, rows to verify)``, called as rows complete."""


def run_reverify(
    options: ReverifyOptions,
    gym_config: Mapping[str, Any],
    echo: Echo,
    progress: Progress | None = None,
    orchestrator: Mapping[str, Any] | None = None,
    *,
    warn: Echo | None = None,
    transport: TransportFactory | None = None,
    guard_transport: httpx.BaseTransport | None = None,
    batch_size: int = 1000,
) -> ReverifyOutcome:
    """The whole command in-process. On any interruption the output is left resumable."""
    plan = prepare(options, gym_config, echo, warn=warn, transport=transport, guard_transport=guard_transport)
    total = len(plan.work)
    done = 0
    failures = 0

    def on_row(destination: Destination, _: dict[str, Any]) -> None:
        nonlocal done, failures
        done += 1
        if destination == "sidecar":
            failures += 1
        if progress is not None:
            progress(done, failures, total)

    try:
        for batch in plan.batches(batch_size):
            record_batch(plan, verify_batch(plan, batch, on_row), echo)
    except BaseException:
        plan.abort()
        raise
    return finish(plan, echo, orchestrator)

"""The one way the CLI runs a command's flow (the default mode): Prefect's environment from the
shared settings, then the flow on the task runner of the run context, against the local server
or ``PREFECT_API_URL``."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from gymflow import provenance
from gymflow.cli.setup import prepare_prefect
from gymflow.collector import frozen_after
from gymflow.config import GymflowConfig
from gymflow.parallel import Workers
from gymflow.run_context import RunContext


def run(
    settings: GymflowConfig,
    verbose: bool,
    flow: str,
    ctx: RunContext,
    workers: int,
    /,
    link: bool = True,
    hashes: Iterable[str] = (),
    **parameters: Any,
) -> Any:
    """Run the flow ``flow`` (``module:attribute`` under ``gymflow.flows``) with ``parameters``;
    its result. The link to its run in the UI goes to stderr (``eval post`` shows it in its
    summary instead: ``link=False``).

    First the ``workers`` processes of the flow's CPU-bound steps on this machine are forked, while
    this process runs one thread (spawned later, each would import the core again: 0.15 s of a
    10,000-row health check); then the provenance digests of ``hashes`` start on a thread, and
    Prefect is imported, after its environment is prepared (never by ``--direct`` runs)."""
    with _local_pool(ctx, workers) as pool:
        provenance.prefetch(hashes)
        with frozen_after():
            prepare_prefect(settings, verbose)
            from gymflow.flows._runtime import run_flow

            module, name = flow.split(":")
            flow_object = getattr(importlib.import_module(f"gymflow.flows.{module}"), name)
        result, url = run_flow(flow_object, ctx, workers, pool, **parameters)
    if link:
        print(f"Flow run: {url}", file=sys.stderr, flush=True)
    return result


@contextmanager
def _local_pool(ctx: RunContext, workers: int) -> Iterator[Workers | None]:
    """The pool of the flow's CPU-bound steps, forked now where it can be (else it starts with its
    first step); none when a Dask cluster computes them."""
    if ctx.runner.kind == "dask":
        yield None
        return
    with Workers(workers, what="running the command's steps") as pool:
        yield pool

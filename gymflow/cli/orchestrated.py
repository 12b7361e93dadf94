"""The one way the CLI runs a command's flow (the default mode): Prefect's environment from the
shared settings, then the flow on the task runner of the run context, against the local server
or ``PREFECT_API_URL``."""

from __future__ import annotations

import importlib
import sys
from typing import Any

from gymflow.cli.setup import prepare_prefect
from gymflow.collector import frozen_after
from gymflow.config import GymflowConfig
from gymflow.run_context import RunContext


def run(
    settings: GymflowConfig,
    verbose: bool,
    flow: str,
    ctx: RunContext,
    workers: int,
    /,
    link: bool = True,
    **parameters: Any,
) -> Any:
    """Run the flow ``flow`` (``module:attribute`` under ``gymflow.flows``) with ``parameters``;
    its result. The link to its run in the UI goes to stderr (``eval post`` shows it in its
    summary instead: ``link=False``).

    Prefect is imported here, after its environment is prepared, never by ``--direct`` runs."""
    with frozen_after():
        prepare_prefect(settings, verbose)
        from gymflow.flows._runtime import run_flow

        module, name = flow.split(":")
        flow_object = getattr(importlib.import_module(f"gymflow.flows.{module}"), name)
    result, url = run_flow(flow_object, ctx, workers, **parameters)
    if link:
        print(f"Flow run: {url}", file=sys.stderr, flush=True)
    return result

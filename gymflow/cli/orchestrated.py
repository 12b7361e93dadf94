"""The one way the CLI runs a command's flow (the default mode): Prefect's environment from the
shared settings, then the flow on the task runner of the run context, against the local server
or ``PREFECT_API_URL``."""

from __future__ import annotations

import importlib
from typing import Any

from gymflow.cli.config import prepare_prefect
from gymflow.config import GymflowConfig
from gymflow.run_context import RunContext


def run(
    settings: GymflowConfig, verbose: bool, flow: str, ctx: RunContext, workers: int, /, **parameters: Any
) -> Any:
    """Run the flow ``flow`` (``module:attribute`` under ``gymflow.flows``) with ``parameters``.

    Prefect is imported here, after its environment is prepared, never by ``--direct`` runs."""
    prepare_prefect(settings, verbose)
    from gymflow.flows._runtime import run_flow

    module, name = flow.split(":")
    return run_flow(
        getattr(importlib.import_module(f"gymflow.flows.{module}"), name), ctx, workers, **parameters
    )

"""What the CLI sets up for the one command a process runs: the flags given, Prefect's
environment (before Prefect is imported), and the storage options in force while the command
checks its arguments (the run itself enters its :class:`~gymflow.run_context.RunContext`)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from contextlib import ExitStack
from typing import Any

from gymflow.conf.compose import storage_options
from gymflow.config import GymflowConfig

__all__ = ["close_command_scope", "configure_storage", "flags_given", "prepare_prefect"]


def flags_given(args: argparse.Namespace, keys: Mapping[str, str]) -> dict[str, Any]:
    """Config key -> value of each flag (argparse destination in ``keys``) given on the command line."""
    return {key: getattr(args, dest) for dest, key in keys.items() if getattr(args, dest, None) is not None}


def prepare_prefect(settings: GymflowConfig, verbose: bool) -> None:
    """Prefect's environment from the shared settings (before Prefect is imported): the local
    server's port as ``PREFECT_SERVER_API_PORT`` unless that is set already."""
    from gymflow.flows import _environment

    if settings.prefect.port is not None:
        os.environ.setdefault("PREFECT_SERVER_API_PORT", str(settings.prefect.port))
    _environment.prepare(settings.prefect, verbose)


_COMMAND_SCOPE = ExitStack()
"""The storage scope of the command this process runs, closed by :func:`close_command_scope`."""


def configure_storage(settings: GymflowConfig) -> None:
    """``storage.options`` and ``storage.timeout_s`` in force for the rest of the command (the
    checks the CLI makes before the run; the run itself enters its :class:`RunContext`)."""
    from gymflow import storage

    _COMMAND_SCOPE.enter_context(storage.using(storage_options(settings)))


def close_command_scope() -> None:
    """Leave the storage scope of the command that just ended (``gymflow.cli.main``)."""
    _COMMAND_SCOPE.close()

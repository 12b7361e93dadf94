"""The `gymflow` command line: parses arguments, loads config, picks the direct or Prefect path.

The CLI is the only layer that prints. Each command module registers an argparse sub-parser
(argparse, not click/typer: the reference CLI is argparse and its exact usage and error lines are
part of the compatibility contract) and returns an exit status.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from gymflow import __version__


def build_parser() -> argparse.ArgumentParser:
    from gymflow.cli import health as health_command
    from gymflow.cli import provenance as provenance_command
    from gymflow.cli import ui as ui_command

    parser = argparse.ArgumentParser(prog="gymflow", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"gymflow {__version__}")
    groups = parser.add_subparsers(dest="group", required=True)
    eval_parser = groups.add_parser("eval", help="work on the artifacts of an evaluation run")
    eval_commands = eval_parser.add_subparsers(dest="command", required=True)
    health_command.register(eval_commands)
    for optional in ("aggregate", "join"):
        module = _optional_command(optional)
        if module is not None:
            module.register(eval_commands)
    provenance_command.register(groups)
    ui_command.register(groups)
    return parser


def _optional_command(name: str) -> ModuleType | None:
    import importlib

    try:
        return importlib.import_module(f"gymflow.cli.{name}")
    except ModuleNotFoundError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:  # pragma: no cover - argparse requires a sub-command
        parser.error("a command is required")
    from gymflow.cli import interrupt

    status: int = interrupt.run(handler, args, extras)
    return status


def entrypoint() -> None:
    sys.exit(main())

"""The `gymflow` command line: parses arguments, loads config, picks the direct or Prefect path.

The CLI is the only layer that prints. Each command module registers an argparse sub-parser
(argparse, not click/typer: the reference CLI is argparse and its exact usage and error lines are
part of the compatibility contract) and returns an exit status.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence

from gymflow import __version__
from gymflow.collector import frozen_after

DESCRIPTION = """\
Check, join, aggregate and re-verify the rollouts a NeMo Gym evaluation wrote, on local disk
or S3. Every command runs as a Prefect flow (or in-process with --direct) and writes a
provenance record next to its reports."""
EPILOG = """\
examples:
  gymflow eval health-check results/run             check every rollout of a run
  gymflow eval join results/run                     project captured model calls into trajectories
  gymflow eval aggregate -i 'results/shard-*.jsonl' -o results/rollouts.jsonl
  gymflow eval reverify --config gym.yaml --rollouts results/rollouts.jsonl
  gymflow eval post results/run                     every step the run's files call for
  gymflow provenance verify results/run/quality_summary.json
  gymflow view results/run                          browse a run's reports on 127.0.0.1:4280

Run 'gymflow eval COMMAND --help' for a command's options."""


def build_parser() -> argparse.ArgumentParser:
    from gymflow.cli import aggregate as aggregate_command
    from gymflow.cli import health as health_command
    from gymflow.cli import join as join_command
    from gymflow.cli import post as post_command
    from gymflow.cli import provenance as provenance_command
    from gymflow.cli import reverify as reverify_command
    from gymflow.cli import serve as serve_command
    from gymflow.cli import ui as ui_command
    from gymflow.cli import view as view_command

    parser = argparse.ArgumentParser(
        prog="gymflow",
        allow_abbrev=False,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gymflow {__version__}")
    groups = parser.add_subparsers(dest="group")
    eval_parser = groups.add_parser(
        "eval",
        help="work on the artifacts of an evaluation run",
        description="Work on the artifacts of an evaluation run.",
    )
    eval_commands = eval_parser.add_subparsers(dest="command")
    health_command.register(eval_commands)
    aggregate_command.register(eval_commands)
    join_command.register(eval_commands)
    post_command.register(eval_commands)
    reverify_command.register(eval_commands)
    provenance_command.register(groups)
    ui_command.register(groups)
    serve_command.register(groups)
    view_command.register(groups)
    for group in groups.choices.values():
        for action in _sub_commands(group):
            action.required = False  # a group alone prints its help (see main)
    for each in all_parsers(parser):
        # No abbreviations: `--worker 2` or `--no-cach` is an unrecognized argument, not a guess.
        each.allow_abbrev = False
    return parser


def all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and every sub-parser below it."""
    found = [parser]
    for action in _sub_commands(parser):
        for child in dict.fromkeys(action.choices.values()):
            found.extend(all_parsers(child))
    return found


def _sub_commands(
    parser: argparse.ArgumentParser,
) -> list[argparse._SubParsersAction[argparse.ArgumentParser]]:
    """The sub-command actions of ``parser`` (argparse keeps them only among its actions)."""
    return [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]


def _selected_group(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the group named on the command line (``gymflow eval``), else the top level."""
    group = getattr(args, "group", None)
    for action in _sub_commands(parser):
        if group in action.choices:
            chosen: argparse.ArgumentParser = action.choices[group]
            return chosen
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _command(argv)
    finally:
        # What the command froze (collector.frozen_after) is collected again: a caller that goes on
        # (a test calling main) keeps no frozen garbage.
        gc.unfreeze()


def _command(argv: Sequence[str] | None) -> int:
    with frozen_after():  # the command line's modules
        parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        # `gymflow` or `gymflow eval` alone: show what can follow instead of a bare usage error.
        _selected_group(parser, args).print_help()
        return 2
    from gymflow.cli import interrupt
    from gymflow.cli.setup import close_command_scope

    try:
        status: int = interrupt.run(handler, args, extras)
    finally:
        close_command_scope()
    return status


def entrypoint() -> None:
    status = main()
    # The interpreter's last garbage collection at exit walks every object Prefect and the run
    # left behind (half a second after an orchestrated run); frozen objects are not walked, and
    # exit handlers and finalizers still run.
    gc.freeze()
    sys.exit(status)

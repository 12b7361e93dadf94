"""``gymflow eval health-check RUN_DIR``: flags, messages and exit codes of NeMo Gym 0.7.0's
``gym eval health-check`` (health spec §7), plus ``--direct``, ``--no-cache`` and S3 paths."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

from gymflow import storage
from gymflow.cli.logs import configure_logging
from gymflow.cli.progress import progress_bar
from gymflow.cli.setup import configure_storage, flags_given
from gymflow.conf.compose import compose, run_context
from gymflow.config import GymflowConfig, HealthCheckConfig
from gymflow.errors import GymflowError, UsageError

if TYPE_CHECKING:  # the health package is imported by the command that runs it, not by the parser
    from gymflow.health import HealthOptions, HealthOutcome
    from gymflow.run_context import RunContext

NO_OVERRIDES = "health-check does not accept Hydra overrides"
"""0.7.0's message for an extra positional or an override of a key health-check does not have;
gymflow follows it with ``: `` and what it refused (the positionals, or the override)."""

# flag destination -> key of config/health_check.yaml
_FLAGS = {
    "rollouts_file": "rollouts_file",
    "workers": "workers",
    "ignore_checks": "ignore_checks",
    "json": "json",
    "verbose": "verbose",
    "direct": "direct",
    "no_cache": "no_cache",
}


def _check_list(value: str) -> list[str]:
    items = [item.strip() for item in value.split(",")]
    if any(not item for item in items):
        raise argparse.ArgumentTypeError("check IDs must be a comma-separated list without empty entries")
    return items


def register(eval_commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = eval_commands.add_parser(
        "health-check",
        help="check that every rollout's evidence is complete and consistent",
        description="Health-check the rollouts of a run directory (local or s3://) and write "
        "quality_summary.json and rollout_verdicts.jsonl into it.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory; reports are written here")
    parser.add_argument(
        "--rollouts-file",
        metavar="PATH",
        help="rollouts JSONL; relative paths resolve under RUN_DIR (default: rollouts.jsonl)",
    )
    parser.add_argument(
        "--workers", type=int, default=None, metavar="N", help="worker limit (default: min(CPUs, 8))"
    )
    parser.add_argument(
        "--ignore-checks",
        "--ignore",
        dest="ignore_checks",
        type=_check_list,
        default=None,
        metavar="CHECK[,CHECK...]",
        help="check ids to skip",
    )
    parser.add_argument(
        "--json", action="store_true", default=None, help="print the summary as one JSON line"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", default=None, help="show Prefect's and gymflow's logs"
    )
    parser.add_argument("--direct", action="store_true", default=None, help="run in-process, without Prefect")
    parser.add_argument(
        "--no-cache",
        action="store_true",
        default=None,
        help="recompute even if the reports are up to date",
    )
    parser.set_defaults(handler=partial(run, parser))


def _overrides(parser: argparse.ArgumentParser, extras: Sequence[str]) -> list[str]:
    flags = [item for item in extras if item.startswith("-")]
    if flags:
        parser.error(f"unrecognized arguments: {' '.join(flags)}")
    positionals = [item for item in extras if "=" not in item and not item.startswith("~")]
    if positionals:
        parser.error(f"{NO_OVERRIDES}: {' '.join(positionals)}")
    return list(extras)


def run(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: Sequence[str]) -> int:
    overrides = _overrides(parser, extras)
    try:
        composed = compose(
            "health_check",
            flags=flags_given(args, _FLAGS),
            overrides=overrides,
            unknown_key_message=NO_OVERRIDES,
        )
        cfg = composed.validate(HealthCheckConfig)
        config = composed.settings
        configure_storage(config)
        if not storage.isdir(args.run_dir):
            parser.error(f"Run directory not found: {args.run_dir}")
        path = storage.resolve_under(args.run_dir, cfg.rollouts_file)
        if not storage.isfile(path):
            parser.error(f"Rollout JSONL not found: {path}")
        from gymflow.health import normalize_ignored

        ignored = normalize_ignored(cfg.ignore_checks)
        if cfg.workers is not None and cfg.workers < 1:
            parser.error("workers must be at least 1")
    except UsageError as exc:
        parser.error(str(exc))
    except GymflowError as exc:  # storage unreachable, credentials refused, unreadable config
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    if cfg.verbose:
        configure_logging(verbose=True)
    from gymflow.health import HealthOptions

    options = HealthOptions((path,), args.run_dir, cfg.workers, ignored, not cfg.no_cache)
    try:
        outcome = _run(config, options, run_context(composed), cfg.direct, cfg.verbose)
    except GymflowError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    if outcome.up_to_date:
        print(
            f"Reports are up to date (provenance: {outcome.record_url}); nothing recomputed. "
            "Use --no-cache to recompute.",
            file=sys.stderr,
        )
    if cfg.json_:
        print(json.dumps(outcome.summary, ensure_ascii=False, separators=(",", ":")))
    else:
        print(outcome.console_line)
        print(f"Quality summary: {storage.resolve_under(args.run_dir, 'quality_summary.json')}")
    return 0


def _run(
    config: GymflowConfig, options: HealthOptions, ctx: RunContext, direct: bool, verbose: bool
) -> HealthOutcome:
    from gymflow.health import run_health
    from gymflow.parallel import default_workers

    bar = progress_bar(sum(storage.size(path) for path in options.paths), "health-check")
    try:
        if direct:
            return run_health(options, ctx, progress=bar)
        from gymflow.cli import orchestrated

        workers = options.workers if options.workers is not None else default_workers()
        returned = orchestrated.run(
            config,
            verbose,
            "health:health_check",
            ctx,
            workers,
            hashes=options.paths,
            options=options,
            progress=bar,
        )
        outcome: HealthOutcome = returned.result
        return outcome
    finally:
        if bar is not None:
            bar.close()

"""``gymflow eval aggregate``: merge shards (local or any fsspec URL) and compute NeMo Gym's
aggregate metrics locally, then health-check the merged file (aggregate spec §1)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from gymflow import storage
from gymflow.cli.logs import configure_logging
from gymflow.cli.progress import ProgressBar, progress_bar
from gymflow.cli.setup import configure_storage, flags_given
from gymflow.conf.compose import Composed, compose, run_context
from gymflow.conf.options import agent_environments
from gymflow.conf.overrides import split_overrides
from gymflow.config import AggregateConfig, GymflowConfig
from gymflow.errors import GymflowError, UsageError
from gymflow.frozen import FrozenDict

# flag destination -> key of config/aggregate.yaml (aggregate spec §1.1)
_FLAGS = {
    "input_glob": "input_glob",
    "output": "output_jsonl_fpath",
    "config": "config_paths",
    "no_health_check": "disable_health_check",
    "health_check_workers": "health_check_workers",
    "health_check_ignore": "health_check_ignored_checks",
    "server_metrics": "server_metrics",
    "workers": "workers",
    "direct": "direct",
    "no_cache": "no_cache",
    "verbose": "verbose",
}
_REQUIRED = ("input_glob", "output_jsonl_fpath")


if TYPE_CHECKING:
    from gymflow.run_context import RunContext


def register(eval_commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = eval_commands.add_parser(
        "aggregate",
        help="merge rollout shards and compute aggregate metrics",
        description="Merge rollout shards (local paths or fsspec URLs such as s3://) into one file "
        "sorted by (task, rollout), compute NeMo Gym's aggregate metrics locally and health-check "
        "the result. Every key of config/aggregate.yaml (NeMo Gym's names: input_glob, "
        "output_jsonl_fpath, ...) may also be given as an override (key=value, +key=value, ++key=value).",
    )
    parser.add_argument(
        "--input-glob", "-i", metavar="G", help="glob or comma-separated globs (required; +input_glob=G)"
    )
    parser.add_argument(
        "--output", "-o", metavar="PATH", help="merged rollouts JSONL (required; +output_jsonl_fpath=PATH)"
    )
    parser.add_argument(
        "--config", action="append", metavar="PATH", help="Gym config YAML (repeatable; optional)"
    )
    parser.add_argument(
        "--no-health-check", action="store_true", default=None, help="skip the rollout health checks"
    )
    parser.add_argument("--health-check-workers", metavar="N", help="health-check worker limit (>= 1)")
    parser.add_argument("--health-check-ignore", metavar="IDS", help="comma-separated check ids to skip")
    parser.add_argument(
        "--server-metrics",
        action="store_true",
        default=None,
        help="ask each group's resources server (from --config) for its metrics",
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="processes reading local shards with --direct (default: min(CPUs, 8) from 192 MiB of shards on)",
    )
    parser.add_argument("--direct", action="store_true", default=None, help="run in-process, without Prefect")
    parser.add_argument(
        "--no-cache", action="store_true", default=None, help="recompute even if the outputs are up to date"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", default=None, help="show Prefect's and gymflow's logs"
    )
    parser.set_defaults(handler=partial(run, parser))


def compose_aggregate(args: argparse.Namespace, extras: Sequence[str]) -> tuple[Composed, AggregateConfig]:
    """Flags + config files + overrides, composed and validated (the 0.7.0 messages)."""
    composed = compose(
        "aggregate", flags=flags_given(args, _FLAGS), overrides=split_overrides(extras), gym_files=True
    )
    config = composed.validate(AggregateConfig)
    missing = [key for key in _REQUIRED if getattr(config, key) is None]
    if missing:
        raise UsageError(
            f"missing required configuration: {', '.join(missing)}. Provide each via its flag (see "
            f"--help) or as a +{missing[0]}=<value> override."
        )
    if config.workers is not None and config.workers < 1:
        raise UsageError("argument --workers: must be at least 1")
    return composed, config


def build_options(composed: Composed, config: AggregateConfig) -> Any:
    """The validated config -> :class:`~gymflow.aggregate.AggregateOptions` (frozen mappings)."""
    from gymflow.aggregate import AggregateOptions, ReduceSettings, ScoreSpec

    gym: FrozenDict[str, Any] = composed.gym_config()
    pass_majority = config.pass_majority
    assert config.input_glob is not None and config.output_jsonl_fpath is not None
    return AggregateOptions(
        input_glob=config.input_glob,
        output=config.output_jsonl_fpath,
        merge_shards=config.merge_shards,
        settings=ReduceSettings(
            count_failure_classes_as_zero=config.count_failure_classes_as_zero,
            count_missing_rollouts_as_zero=config.count_missing_rollouts_as_zero,
            pass_majority=None
            if pass_majority is None
            else ScoreSpec(pass_majority.score_field, pass_majority.answer_key),
        ),
        agent_environments=agent_environments(gym),
        config_files=config.config_paths,
        health_check=not config.disable_health_check,
        health_check_workers=config.health_check_workers,
        health_check_ignored=config.health_check_ignored_checks,
        use_cache=not config.no_cache,
        workers=config.workers,
        server_metrics=config.server_metrics,
        server_config=gym if config.server_metrics else FrozenDict(),
    )


def _echo(line: str) -> None:
    print(line, flush=True)


def run(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: Sequence[str]) -> int:
    try:
        composed, config = compose_aggregate(args, extras)
        settings = composed.settings
        configure_storage(settings)
        options = build_options(composed, config)
    except UsageError as exc:
        parser.error(str(exc))
    except GymflowError as exc:  # storage unreachable, credentials refused, unreadable config
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    configure_logging(config.verbose)
    try:
        bar = _progress(options)
        try:
            ctx = run_context(composed)
            if config.direct:
                from gymflow.pipeline import aggregate_then_health, direct_runner

                aggregate_then_health(options, direct_runner(ctx, bar), _echo)
            else:
                _run_flow(settings, options, ctx, config.verbose, bar)
        finally:
            if bar is not None:
                bar.close()
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


def _shards(options: Any) -> list[str]:
    """The shards the run will read, or none when selecting them fails (the run reports it)."""
    from gymflow.aggregate import select_shards

    try:
        return select_shards(options.input_glob, options.output)
    except GymflowError:
        return []


def _progress(options: Any) -> ProgressBar | None:
    """A bar over the shards' bytes, on a terminal only."""
    shards = _shards(options)
    if not shards:
        return None
    return progress_bar(sum(storage.size(shard) for shard in shards), "aggregate")


def _run_flow(
    settings: GymflowConfig, options: Any, ctx: RunContext, verbose: bool, bar: ProgressBar | None
) -> None:
    from gymflow.cli import orchestrated
    from gymflow.parallel import default_workers

    workers = options.health_check_workers or default_workers()
    orchestrated.run(
        settings,
        verbose,
        "aggregate:aggregate_command",
        ctx,
        workers,
        hashes=_shards(options),
        options=options,
        echo=_echo,
        progress=bar,
    )

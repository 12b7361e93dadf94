"""``gymflow eval aggregate``: merge shards (local or any fsspec URL) and compute NeMo Gym's
aggregate metrics locally, then health-check the merged file (aggregate spec §1)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gymflow import storage
from gymflow.cli.config import load_config
from gymflow.cli.gym_config import load_gym_config, split_overrides
from gymflow.cli.logs import configure_logging
from gymflow.cli.progress import ProgressBar, progress_bar
from gymflow.config import GymflowConfig
from gymflow.errors import GymflowError, UsageError

_CONFIG_KEYS = (
    "merge_shards",
    "count_failure_classes_as_zero",
    "count_missing_rollouts_as_zero",
    "pass_majority",
    "server_metrics",
    "disable_health_check",
    "health_check_workers",
    "health_check_ignored_checks",
)


class PassMajorityConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    score_field: str = Field(default="reward", description="row field scored as `accuracy`")
    answer_key: str | None = Field(default=None, description="row field holding the extracted answer")


class AggregateConfig(BaseModel):
    """The aggregate keys of the (Gym) config, after flags and ``key=value`` overrides."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    merge_shards: bool = True
    count_failure_classes_as_zero: list[str] = Field(default_factory=list)
    count_missing_rollouts_as_zero: bool = False
    pass_majority: PassMajorityConfig | None = None
    server_metrics: bool = False
    disable_health_check: bool = False
    health_check_workers: int | None = Field(default=None, ge=1)
    health_check_ignored_checks: tuple[str, ...] = ()

    @field_validator("health_check_ignored_checks", mode="before")
    @classmethod
    def _known_checks(cls, value: Any) -> tuple[str, ...]:
        from gymflow.errors import UnknownCheckError
        from gymflow.health import normalize_ignored

        try:
            return tuple(normalize_ignored(value))
        except UnknownCheckError as exc:
            raise ValueError(str(exc)) from None


def register(eval_commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = eval_commands.add_parser(
        "aggregate",
        help="merge rollout shards and compute aggregate metrics",
        description="Merge rollout shards (local paths or fsspec URLs such as s3://) into one file "
        "sorted by (task, rollout), compute NeMo Gym's aggregate metrics locally and health-check "
        "the result. Config keys may also be given as key=value overrides.",
    )
    parser.add_argument(
        "--input-glob", "-i", required=True, metavar="G", help="glob or comma-separated globs"
    )
    parser.add_argument("--output", "-o", required=True, metavar="PATH", help="merged rollouts JSONL")
    parser.add_argument(
        "--config", action="append", default=[], metavar="PATH", help="Gym config YAML (repeatable; optional)"
    )
    parser.add_argument("--no-health-check", action="store_true", help="skip the rollout health checks")
    parser.add_argument("--health-check-workers", metavar="N", help="health-check worker limit (>= 1)")
    parser.add_argument("--health-check-ignore", metavar="IDS", help="comma-separated check ids to skip")
    parser.add_argument(
        "--server-metrics",
        action="store_true",
        help="ask each group's resources server (from --config) for its metrics",
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="processes reading local shards with --direct (default 1)",
    )
    parser.add_argument("--direct", action="store_true", help="run in-process, without Prefect")
    parser.add_argument(
        "--no-cache", action="store_true", help="recompute even if the outputs are up to date"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show Prefect's and gymflow's logs")
    parser.set_defaults(handler=partial(run, parser))


def agent_environments(config: Mapping[str, Any]) -> dict[str, str]:
    """Agent name -> the one environment server whose config fronts it (§1.6).

    An environment-server block is a top-level block with ``environment_servers``; an
    implementation names its agent under ``agent``/``agent_ref``/``responses_api_agent``
    (a mapping with ``name``, or a string). Agents behind several environment servers are an error.
    """
    fronts: dict[str, list[str]] = {}
    for block, body in config.items():
        servers = body.get("environment_servers") if isinstance(body, Mapping) else None
        if not isinstance(servers, Mapping):
            continue
        for impl in servers.values():
            if not isinstance(impl, Mapping):
                continue
            for key in ("agent", "agent_ref", "responses_api_agent"):
                ref = impl.get(key)
                name = ref.get("name") if isinstance(ref, Mapping) else ref
                if isinstance(name, str) and name and block not in fronts.setdefault(name, []):
                    fronts[name].append(block)
    ambiguous = {agent: blocks for agent, blocks in fronts.items() if len(blocks) > 1}
    if ambiguous:
        agent, blocks = next(iter(ambiguous.items()))
        raise UsageError(
            f"Agent {agent!r} is behind several environment servers {blocks}; cannot group its rows"
        )
    return {agent: blocks[0] for agent, blocks in fronts.items()}


def _configuration_error(exc: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(part) for part in error['loc'])} ({error['msg']})" for error in exc.errors()
    )
    return f"invalid configuration: {problems}."


def build_options(args: argparse.Namespace, extras: Sequence[str]) -> tuple[Any, AggregateConfig]:
    """Flags + config files + overrides -> (AggregateOptions, validated AggregateConfig)."""
    from gymflow.aggregate import AggregateOptions, ReduceSettings, ScoreSpec

    merged = load_gym_config(args.config, split_overrides(extras), command_keys=_CONFIG_KEYS)
    values = {key: merged[key] for key in _CONFIG_KEYS if key in merged}
    if args.no_health_check:
        values["disable_health_check"] = True
    if args.health_check_workers is not None:
        values["health_check_workers"] = args.health_check_workers
    if args.health_check_ignore is not None:
        values["health_check_ignored_checks"] = args.health_check_ignore
    if args.server_metrics:
        values["server_metrics"] = True
    try:
        config = AggregateConfig.model_validate(values)
    except ValidationError as exc:
        raise UsageError(_configuration_error(exc)) from None
    if args.workers is not None and args.workers < 1:
        raise UsageError("argument --workers: must be at least 1")
    pass_majority = config.pass_majority
    options = AggregateOptions(
        input_glob=args.input_glob,
        output=args.output,
        merge_shards=config.merge_shards,
        settings=ReduceSettings(
            count_failure_classes_as_zero=tuple(config.count_failure_classes_as_zero),
            count_missing_rollouts_as_zero=config.count_missing_rollouts_as_zero,
            pass_majority=None
            if pass_majority is None
            else ScoreSpec(pass_majority.score_field, pass_majority.answer_key),
        ),
        agent_environments=agent_environments(merged),
        config_files=tuple(args.config),
        health_check=not config.disable_health_check,
        health_check_workers=config.health_check_workers,
        health_check_ignored=config.health_check_ignored_checks,
        use_cache=not args.no_cache,
        workers=args.workers,
        server_metrics=config.server_metrics,
        server_config=merged if config.server_metrics else {},
    )
    return options, config


def _echo(line: str) -> None:
    print(line, flush=True)


def run(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: Sequence[str]) -> int:
    try:
        settings = load_config()
        storage.configure(settings.storage.options)
        options, _ = build_options(args, extras)
    except UsageError as exc:
        parser.error(str(exc))
    except GymflowError as exc:  # storage unreachable, credentials refused, unreadable config
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    configure_logging(args.verbose)
    try:
        bar = _progress(options)
        try:
            if args.direct:
                from gymflow.pipeline import DirectSteps, aggregate_then_health

                aggregate_then_health(options, DirectSteps(bar), _echo)
            else:
                _run_flow(settings, options, args.verbose, bar)
        finally:
            if bar is not None:
                bar.close()
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


def _progress(options: Any) -> ProgressBar | None:
    """A bar over the shards' bytes, on a terminal only."""
    from gymflow.aggregate import select_shards

    try:
        shards = select_shards(options.input_glob, options.output)
    except GymflowError:
        return None  # the command itself reports it
    return progress_bar(sum(storage.size(shard) for shard in shards), "aggregate")


def _run_flow(settings: GymflowConfig, options: Any, verbose: bool, bar: ProgressBar | None) -> None:
    from gymflow.flows import _environment

    _environment.prepare(settings.prefect, verbose)
    from prefect.task_runners import ThreadPoolTaskRunner

    from gymflow.flows._runtime import run_flow
    from gymflow.flows.aggregate import aggregate_command
    from gymflow.health import default_workers

    # The command flow only composes subflows, each on the configured runner.
    outcome = run_flow(
        aggregate_command,
        ThreadPoolTaskRunner(max_workers=1),
        options=options,
        step_runner=settings.runner,
        workers=options.health_check_workers or default_workers(),
        storage_options=storage.current_options(),
        progress=bar,
    )
    for line in outcome.console_lines:
        _echo(line)

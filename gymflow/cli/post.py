"""``gymflow eval post RUN``: everything that follows an evaluation, in one command.

Aggregate the run's shards (when it has any), join raw evidence (when rows carry capture but no
``ng_trajectory``), health-check, and reverify (when the config enables it); each step is skipped
when its inputs are absent or its provenance says its reports are up to date. The sequence lives
in :mod:`gymflow.pipeline`; this module turns flags and config into its options and prints.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gymflow import storage
from gymflow.cli.logs import configure_logging
from gymflow.errors import GymflowError, UsageError
from gymflow.pipeline import HealthStep, PipelineSummary, PostOptions


class PostSection(BaseModel):
    """The ``post`` block of the config (all optional)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    shards: str = Field(default="shards/*.jsonl", description="shard glob, relative to the run")
    rollouts: str = Field(default="rollouts.jsonl", description="the run's (merged) rollouts file")
    capture_dir: str = Field(default="model-calls", description="CaptureStore directory for the join")
    health_check_workers: int | None = Field(default=None, ge=1)
    health_check_ignore: tuple[str, ...] = ()


class ReverifySection(BaseModel):
    """The ``reverify`` block: the step runs only with ``enabled: true``."""

    model_config = ConfigDict(frozen=True, extra="allow")
    enabled: bool = False
    inputs: str = Field(default="rollouts_materialized_inputs.jsonl", description="relative to the run")
    output: str = Field(default="rollouts_reverified.jsonl", description="relative to the run")


def register(eval_commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = eval_commands.add_parser(
        "post",
        help="aggregate, join, health-check and (when configured) reverify a finished run",
        description="Run every post-evaluation step whose inputs a run has: aggregate its shards, "
        "join raw evidence, health-check, and reverify when the config sets reverify.enabled=true. "
        "Steps whose reports are up to date are skipped. Config keys may be overridden with "
        "++key=value (e.g. ++post.shards='part-*.jsonl', ++reverify.enabled=true).",
    )
    parser.add_argument("run", metavar="RUN", help="run directory or prefix, local or any fsspec URL")
    parser.add_argument(
        "--config", action="append", default=[], metavar="PATH", help="Gym config YAML (repeatable)"
    )
    parser.add_argument("--direct", action="store_true", help="run in-process, without Prefect")
    parser.add_argument("--no-cache", action="store_true", help="redo every step even if up to date")
    parser.add_argument("-v", "--verbose", action="store_true", help="show Prefect's and gymflow's logs")
    parser.set_defaults(handler=partial(run, parser))


def _section(model: type[BaseModel], config: Mapping[str, Any], name: str) -> Any:
    raw = config.get(name) or {}
    if not isinstance(raw, Mapping):
        raise UsageError(f"invalid configuration: {name} must be a mapping")
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        problems = "; ".join(
            f"{name}.{'.'.join(str(p) for p in error['loc'])} ({error['msg']})" for error in exc.errors()
        )
        raise UsageError(f"invalid configuration: {problems}.") from None


def build_options(
    run_dir: str, config_files: Sequence[str], overrides: Sequence[str], use_cache: bool
) -> PostOptions:
    """Flags, config files and overrides -> validated :class:`PostOptions` (also used by the
    deployments, which receive the same three things as parameters)."""
    from gymflow.aggregate import AggregateOptions
    from gymflow.cli.aggregate import agent_environments
    from gymflow.cli.gym_config import load_gym_config
    from gymflow.health import normalize_ignored

    config = load_gym_config(list(config_files), list(overrides), command_keys=("post", "reverify"))
    post: PostSection = _section(PostSection, config, "post")
    reverify: ReverifySection = _section(ReverifySection, config, "reverify")
    gym_config = {key: value for key, value in config.items() if key not in ("post", "reverify")}
    if not storage.exists(run_dir):
        raise UsageError(f"Run directory not found: {run_dir}")
    aggregate = AggregateOptions(
        input_glob="",
        output="",
        agent_environments=agent_environments(gym_config),
        config_files=tuple(config_files),
        use_cache=use_cache,
    )
    return PostOptions(
        run=run_dir,
        shards=post.shards,
        rollouts=post.rollouts,
        capture_dir=post.capture_dir,
        health=HealthStep(
            post.health_check_workers, tuple(normalize_ignored(list(post.health_check_ignore)))
        ),
        aggregate=aggregate,
        reverify=_reverify_options(run_dir, post, reverify, config) if reverify.enabled else None,
        gym_config=gym_config,
        use_cache=use_cache,
    )


def _reverify_options(
    run_dir: str, post: PostSection, section: ReverifySection, config: Mapping[str, Any]
) -> Any:
    """The reverify step's options: the run's rollouts and materialized inputs, resuming into one
    output, so a rerun after a judge outage verifies only what failed."""
    from gymflow.reverify import options_from_config

    extra = {
        key: value
        for key, value in section.model_dump().items()
        if key not in ("enabled", "inputs", "output")
    }
    return options_from_config(
        {
            **extra,
            "materialized_inputs_jsonl_fpath": storage.resolve_under(run_dir, section.inputs),
            "rollouts_jsonl_fpath": storage.resolve_under(run_dir, post.rollouts),
            "output_jsonl_fpath": storage.resolve_under(run_dir, section.output),
            "resume_from_cache": True,
        }
    )


def _echo(line: str) -> None:
    print(line, flush=True)


def run(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: Sequence[str]) -> int:
    from gymflow.cli.config import load_config

    flags = [item for item in extras if item.startswith("-")]
    if flags:
        parser.error(f"unrecognized arguments: {' '.join(flags)}")
    try:
        settings = load_config()
        storage.configure(settings.storage.options)
        options = build_options(args.run, args.config, extras, not args.no_cache)
    except UsageError as exc:
        parser.error(str(exc))
    configure_logging(args.verbose)
    try:
        if args.direct:
            from gymflow.pipeline import DirectSteps, run_post

            summary = run_post(options, DirectSteps(), _echo)
            url = None
        else:
            summary, url = _run_flow(settings, options, args.verbose)
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    _print_summary(summary, url)
    return 0


def _print_summary(summary: PipelineSummary, flow_run_url: str | None) -> None:
    for line in summary.lines():
        _echo(line)
    if flow_run_url:
        _echo(f"  flow run: {flow_run_url}")


def _run_flow(settings: Any, options: PostOptions, verbose: bool) -> tuple[PipelineSummary, str | None]:
    from gymflow.flows import _environment

    _environment.prepare(settings.prefect, verbose)
    from prefect.task_runners import ThreadPoolTaskRunner

    from gymflow.flows._runtime import run_flow
    from gymflow.flows.post import post_flow
    from gymflow.health import default_workers

    # The post flow only composes subflows, each on the configured runner.
    result = run_flow(
        post_flow,
        ThreadPoolTaskRunner(max_workers=1),
        options=options,
        step_runner=settings.runner,
        workers=options.health.workers or default_workers(),
        storage_options=storage.current_options(),
    )
    for line in result.console_lines:
        _echo(line)
    return result.summary, result.flow_run_url

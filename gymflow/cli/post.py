"""``gymflow eval post RUN``: everything that follows an evaluation, in one command.

Aggregate the run's shards (when it has any), join raw evidence (when rows carry capture but no
``ng_trajectory``), health-check, and reverify (when the config enables it); each step is skipped
when its inputs are absent or its provenance says its reports are up to date. The sequence lives
in :mod:`gymflow.pipeline`; this module turns flags and config into its options and prints.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from contextlib import suppress
from functools import partial
from typing import TYPE_CHECKING, Any

from gymflow import storage
from gymflow.cli.logs import configure_logging
from gymflow.cli.setup import configure_storage, flags_given
from gymflow.conf.compose import run_context
from gymflow.conf.options import compose_post, post_options
from gymflow.errors import GymflowError, UsageError

if TYPE_CHECKING:  # the pipeline (every command's core) is imported when post runs, not by the parser
    from gymflow.pipeline import PipelineSummary, PostOptions
    from gymflow.run_context import RunContext

# flag destination -> key of config/post.yaml
_FLAGS = {"config": "config_paths", "direct": "direct", "no_cache": "no_cache", "verbose": "verbose"}


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
    parser.add_argument("--config", action="append", metavar="PATH", help="Gym config YAML (repeatable)")
    parser.add_argument("--direct", action="store_true", default=None, help="run in-process, without Prefect")
    parser.add_argument(
        "--no-cache", action="store_true", default=None, help="redo every step even if up to date"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", default=None, help="show Prefect's and gymflow's logs"
    )
    parser.set_defaults(handler=partial(run, parser))


def _echo(line: str) -> None:
    print(line, flush=True)


def run(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: Sequence[str]) -> int:
    flags = [item for item in extras if item.startswith("-")]
    if flags:
        parser.error(f"unrecognized arguments: {' '.join(flags)}")
    try:
        composed, config = compose_post(flags_given(args, _FLAGS), extras)
        settings = composed.settings
        configure_storage(settings)
        options = post_options(args.run, composed, config)
    except UsageError as exc:
        parser.error(str(exc))
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    configure_logging(config.verbose)
    try:
        ctx = run_context(composed)
        if config.direct:
            from gymflow.pipeline import direct_runner, run_post

            summary = run_post(options, direct_runner(ctx), _echo)
            url = None
        else:
            summary, url = _run_flow(settings, options, ctx, config.verbose)
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


def _run_flow(
    settings: Any, options: PostOptions, ctx: RunContext, verbose: bool
) -> tuple[PipelineSummary, str | None]:
    hashes: list[str] = []
    if storage.is_local(options.run):  # the local inputs hash while Prefect is imported
        with suppress(GymflowError):  # a bad pattern is reported by the run itself
            hashes = storage.glob(options.path(options.shards)) or [options.path(options.rollouts)]
    from gymflow.cli import orchestrated
    from gymflow.parallel import default_workers

    workers = options.health.workers or default_workers()
    result = orchestrated.run(
        settings,
        verbose,
        "post:post_flow",
        ctx,
        workers,
        link=False,
        hashes=hashes,
        options=options,
        echo=_echo,
    )
    return result.summary, result.flow_run_url

"""``gymflow eval join RUN_DIR``: project model-call capture and agent observations into
``ng_trajectory`` and ``ng_perf`` (evidence spec §1), as NeMo Gym 0.7.0's collection does, offline.

Exit status: 0 success, 1 at least one row error (a malformed rollout id; the row is written
unchanged), 2 usage or storage error, or an input line that is not a JSON object (nothing written).
"""

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
from gymflow.conf.overrides import split_overrides
from gymflow.config import JoinConfig
from gymflow.errors import GymflowError, UsageError

if TYPE_CHECKING:
    pass

USAGE_EXIT = 2

# flag destination -> key of config/join.yaml
_FLAGS = {
    "rollouts": "rollouts_file",
    "capture_dir": "capture_dir",
    "no_capture": "no_capture",
    "output": "output",
    "no_perf": "no_perf",
    "summary": "summary",
    "json": "json",
    "workers": "workers",
    "verbose": "verbose",
    "direct": "direct",
    "no_cache": "no_cache",
}


def register(eval_commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = eval_commands.add_parser(
        "join",
        help="join captured model calls and agent observations into ng_trajectory and ng_perf",
        description="Join a run directory's CaptureStore (model-calls/) with the agent observations of its "
        "rollouts, writing <stem>_joined.jsonl next to the rollouts file (the input is never edited). "
        "Run it before health-check.",
    )
    parser.add_argument(
        "run_dir", metavar="RUN_DIR", help="the run directory (local path or URL such as s3://...)"
    )
    parser.add_argument(
        "--rollouts-file",
        "--rollouts",
        dest="rollouts",
        default=None,
        metavar="PATH",
        help="rollouts JSONL; relative paths resolve under RUN_DIR (default: rollouts.jsonl)",
    )
    capture = parser.add_mutually_exclusive_group()
    capture.add_argument(
        "--capture-dir",
        default=None,
        metavar="PATH|URL",
        help="CaptureStore directory; relative paths resolve under RUN_DIR (default: model-calls)",
    )
    capture.add_argument(
        "--no-capture",
        action="store_true",
        default=None,
        help="do not read captured calls; project what the rows carry",
    )
    parser.add_argument(
        "--output",
        default=None,
        metavar="PATH",
        help="joined rollouts; relative paths resolve under RUN_DIR "
        "(default: <rollouts stem>_joined.jsonl beside the rollouts file)",
    )
    parser.add_argument(
        "--no-perf", action="store_true", default=None, help="leave ng_perf as it is (observability disabled)"
    )
    parser.add_argument(
        "--summary",
        default=None,
        metavar="PATH",
        help="also write the summary JSON to PATH; relative paths resolve under RUN_DIR, like --output",
    )
    parser.add_argument(
        "--json", action="store_true", default=None, help="print the summary as one JSON line"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="--direct: worker processes; Prefect: parallel tasks (default min(CPUs, 8))",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", default=None, help="show Prefect's and gymflow's logs"
    )
    parser.add_argument("--direct", action="store_true", default=None, help="run in-process, without Prefect")
    parser.add_argument(
        "--no-cache", action="store_true", default=None, help="rejoin even if the output is up to date"
    )
    parser.set_defaults(handler=partial(run, parser))


def run(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: Sequence[str]) -> int:
    from gymflow.join import resolve_settings, run_join, summary_paragraph
    from gymflow.parallel import default_workers

    try:
        composed = compose("join", flags=flags_given(args, _FLAGS), overrides=split_overrides(extras))
        cfg = composed.validate(JoinConfig)
    except UsageError as exc:
        parser.error(str(exc))
    except GymflowError as exc:  # an unreadable $GYMFLOW_CONFIG
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return USAGE_EXIT
    configure_logging(cfg.verbose)
    try:
        config = composed.settings
        configure_storage(config)
        if not storage.isdir(args.run_dir):
            parser.error(f"Run directory not found: {args.run_dir}")
        settings = resolve_settings(
            args.run_dir,
            cfg.rollouts_file,
            cfg.capture_dir,
            cfg.output,
            no_capture=cfg.no_capture,
            perf=not cfg.no_perf,
        )
        if not storage.isfile(settings.rollouts):
            parser.error(f"Rollout JSONL not found: {settings.rollouts}")
        if cfg.workers is not None and cfg.workers < 1:
            parser.error("workers must be at least 1")
    except UsageError as exc:
        parser.error(str(exc))
    except GymflowError as exc:  # storage unreachable, credentials refused
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return USAGE_EXIT
    try:
        ctx = run_context(composed)
        workers = cfg.workers or default_workers()
        bar = progress_bar(storage.size(settings.rollouts), "join")
        try:
            if cfg.direct:
                result = run_join(settings, ctx, use_cache=not cfg.no_cache, workers=workers, progress=bar)
            else:
                from gymflow.cli import orchestrated

                result = orchestrated.run(
                    config,
                    cfg.verbose,
                    "join:join_flow",
                    ctx,
                    workers,
                    settings=settings,
                    use_cache=not cfg.no_cache,
                    progress=bar,
                )
        finally:
            if bar is not None:
                bar.close()
    except GymflowError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return USAGE_EXIT
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if result.up_to_date:
        print(
            f"Joined rollouts are up to date (provenance: {result.record_url}); nothing recomputed. "
            "Use --no-cache to rejoin.",
            file=sys.stderr,
        )
        print(f"Joined rollouts: {settings.output}")
        return 0
    summary = result.summary
    if cfg.summary:
        summary_url = storage.resolve_under(args.run_dir, cfg.summary)
        storage.write_atomic(summary_url, json.dumps(summary, indent=2).encode() + b"\n")
    if cfg.json_:
        print(json.dumps(summary, ensure_ascii=False, separators=(",", ":")))
    else:
        print(summary_paragraph(summary))
        print(f"Joined rollouts: {settings.output}")
        print(f"Provenance: {result.record_url}")
    for error in result.errors:
        print(f"row error: {error}", file=sys.stderr)
    return 1 if summary["row_errors"] else 0

"""``gymflow eval reverify``: re-score stored rollouts through a resources server's ``/verify``
(spec ``reverify.md``)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from gymflow.cli.logs import configure_logging
from gymflow.cli.progress import row_progress
from gymflow.cli.setup import configure_storage, flags_given
from gymflow.conf.compose import Composed, compose, run_context
from gymflow.conf.options import reverify_options
from gymflow.conf.overrides import split_overrides
from gymflow.config import GymflowConfig, RunnerConfig
from gymflow.errors import GymflowError, UsageError
from gymflow.run_context import RunContext

# flag destination -> key of config/reverify.yaml (reverify.md §1)
_FLAGS = {
    "config": "config_paths",
    "direct": "direct",
    "verbose": "verbose",
    "input_format": "input_format",
    "inputs": "materialized_inputs_jsonl_fpath",
    "rollouts": "rollouts_jsonl_fpath",
    "atif_manifest": "atif_manifest_jsonl_fpath",
    "output": "output_jsonl_fpath",
    "concurrency": "num_samples_in_parallel",
    "limit": "limit",
    "force": "force",
    "overwrite": "overwrite",
    "resume": "resume_from_cache",
    "disable_aggregation": "disable_aggregation",
    "judge_failed_only": "judge_failed_only",
    "append": "append",
    "verify_timeout": "verify_timeout_s",
    "max_attempts": "verify_max_attempts",
    "server_metrics": "server_metrics",
    "local_metrics": "local_metrics",
    "allow_outside_manifest": "allow_outside_manifest",
    "search_dir": "search_dirs",
    "reuse_server": "reuse_server",
}

# NeMo Gym 0.7.0's component selectors that name a config file: flag -> (parent directory, configs
# directory inside the component, default flavor; None: the component's own name).
_SELECTORS = {
    "environment": ("environments", "", "config"),
    "resources_server": ("resources_servers", "configs", None),
}

# 0.7.0's flags that gymflow has no such thing for: one line each, why.
_REFUSED = {
    "benchmark": "--benchmark is not supported: gymflow re-verifies stored rollouts of any benchmark "
    "without composing its config (benchmark configs chain others through NeMo Gym's config_paths and "
    "_inherit_from); give the benchmark's resources server with --resources-server or --config",
    "model_type": "--model-type is not supported: gymflow serves no policy model (reverify re-scores "
    "stored responses) and starts resources servers only; a judge model they call must already run, "
    "its block given with --config",
}


def _flag(parser: argparse.ArgumentParser, *names: str, help: str) -> None:
    parser.add_argument(*names, action="store_const", const=True, default=None, help=help)


def register(eval_commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = eval_commands.add_parser(
        "reverify",
        help="re-score stored rollouts through a resources server's /verify",
        description="Replay stored rollouts (or Relay ATIF trajectories) through a resources server's "
        "/verify endpoint to recompute rewards, without model inference. Config keys and Gym server "
        "settings may also be given as Hydra-style overrides (key=value, +key=value, ++a.b=value).",
    )
    parser.add_argument("--config", action="append", metavar="PATH", help="Gym config YAML (repeatable)")
    parser.add_argument("--input-format", metavar="gym|atif", help="input format (default gym)")
    parser.add_argument("--inputs", metavar="PATH", help="materialized inputs JSONL")
    parser.add_argument("--rollouts", metavar="PATH", help="rollouts JSONL (gym input)")
    parser.add_argument("--atif-manifest", metavar="PATH", help="ATIF manifest JSONL (atif input)")
    parser.add_argument("--output", "-o", metavar="PATH", help="re-verified rollouts JSONL")
    parser.add_argument("--concurrency", metavar="N", help="requests in flight (default 32)")
    parser.add_argument("--limit", metavar="N", help="verify only the first N joined rows")
    parser.add_argument("--verify-timeout", metavar="S", help="per-request timeout in seconds (default 300)")
    parser.add_argument("--max-attempts", metavar="N", help="attempts per request (default 4)")
    _flag(
        parser, "--force", help="run against servers reporting unsupported/unknown (output prefixed unsafe_)"
    )
    _flag(parser, "--overwrite", help="delete an existing output and its sidecar first")
    _flag(parser, "--resume", help="continue from an existing output")
    _flag(parser, "--disable-aggregation", help="do not write the aggregate-metrics file")
    _flag(parser, "--judge-failed-only", help="re-verify only the run's judge failures")
    _flag(parser, "--append", help="with --judge-failed-only: add to an existing output")
    _flag(parser, "--server-metrics", help="aggregate metrics from the resources server (the default)")
    _flag(parser, "--local-metrics", help="compute aggregate metrics locally, without the resources server")
    _flag(parser, "--allow-outside-manifest", help="ATIF: allow trajectories outside the manifest directory")
    _flag(parser, "--reuse-server", help="use a server already running at a configured port as it runs")
    parser.add_argument(
        "--environment",
        action="append",
        metavar="NAME",
        help="load environments/NAME/config.yaml (NAME/FLAVOR: FLAVOR.yaml); repeatable",
    )
    parser.add_argument(
        "--resources-server",
        action="append",
        metavar="NAME",
        help="load resources_servers/NAME/configs/NAME.yaml (NAME/FLAVOR: FLAVOR.yaml); repeatable",
    )
    parser.add_argument(
        "--search-dir",
        action="append",
        metavar="DIR",
        help="extra root searched first for --environment/--resources-server configs and servers; repeatable",
    )
    for refused in ("--benchmark", "--model-type"):
        parser.add_argument(refused, action="append", metavar="NAME", help=argparse.SUPPRESS)
    _flag(parser, "--direct", help="run in-process, without Prefect")
    _flag(parser, "-v", "--verbose", help="show Prefect's and gymflow's logs")
    parser.set_defaults(handler=partial(run, parser))


def build_options(args: argparse.Namespace, extras: Sequence[str]) -> tuple[Any, Mapping[str, Any], Composed]:
    """Flags + ``--config`` files + overrides -> (ReverifyOptions, the frozen Gym config, the
    composed config). ``--environment``/``--resources-server`` add the config files they name
    (after the ``--config`` ones, as 0.7.0 merges them), found under the search roots."""
    from gymflow.reverify import CONFIG_KEYS

    for dest, line in _REFUSED.items():
        if getattr(args, dest, None):
            raise UsageError(line)
    flags = flags_given(args, _FLAGS)
    overrides = split_overrides(extras)
    composed = compose("reverify", flags=flags, overrides=overrides, gym_files=True)
    if any(getattr(args, dest, None) for dest in _SELECTORS):
        from gymflow.reverify.launch import search_roots

        roots = search_roots(composed.data.get("search_dirs") or ())
        named = [
            _selected_config(dest, value, roots) for dest in _SELECTORS for value in getattr(args, dest) or ()
        ]
        paths = [str(path) for path in composed.data.get("config_paths") or ()]
        flags["config_paths"] = [*paths, *(path for path in named if path not in paths)]
        composed = compose("reverify", flags=flags, overrides=overrides, gym_files=True)
    values = {key: composed.data.get(key) for key in CONFIG_KEYS}
    return reverify_options(composed, values), composed.gym_config(), composed


def _selected_config(dest: str, value: str, roots: Sequence[Path]) -> str:
    """The config file ``--environment``/``--resources-server`` VALUE names (``NAME`` or
    ``NAME/FLAVOR``), from the first root that holds it."""
    parent, configs, default = _SELECTORS[dest]
    name, _, flavor = str(value).partition("/")
    relative = Path(parent, name, configs, f"{flavor or default or name}.yaml")
    candidates = [relative]
    if dest == "environment" and flavor:
        candidates.insert(0, Path(parent, value, "config.yaml"))
    flag = "--" + dest.replace("_", "-")
    for root in roots:
        for candidate in candidates:
            path = root / candidate
            if path.is_file():
                _refuse_chained(flag, value, path)
                return str(path)
    where = ", ".join(str(root) for root in roots)
    raise UsageError(f"{flag} {value}: no config {relative} under {where} (add a root with --search-dir)")


def _refuse_chained(flag: str, value: str, path: Path) -> None:
    """A config that pulls in others (``config_paths``) or inherits blocks (``_inherit_from``)
    needs NeMo Gym's composition, which gymflow does not do: refused rather than half read."""
    import yaml

    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return  # composition reads it again and names the problem
    if not isinstance(loaded, Mapping):
        return
    chained = "config_paths" in loaded or any(
        isinstance(block, Mapping) and "_inherit_from" in block for block in loaded.values()
    )
    if chained:
        raise UsageError(
            f"{flag} {value}: {path} composes other configs (NeMo Gym's config_paths or _inherit_from), "
            "which gymflow does not follow; give the composed resources-server blocks with --config"
        )


def _echo(line: str) -> None:
    print(line, flush=True)


def _warn(line: str) -> None:
    print(f"Warning: {line}", file=sys.stderr, flush=True)


def run(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: Sequence[str]) -> int:
    try:
        options, gym_config, composed = build_options(args, extras)
        settings = composed.settings
        configure_storage(settings)
    except UsageError as exc:
        parser.error(str(exc))
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    verbose = bool(composed.data.get("verbose"))
    configure_logging(verbose)
    try:
        ctx = run_context(composed)
        if composed.data.get("direct"):
            _run_direct(options, gym_config, ctx)
        else:
            _run_flow(settings, options, gym_config, ctx, verbose)
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        from gymflow import lifeline
        from gymflow.cli import interrupt

        print(interrupt.message(signal.SIGINT, [], lifeline.kept()), file=sys.stderr)
        return 130
    return 0


@contextmanager
def _keyboard_interrupt() -> Iterator[None]:
    """Ctrl-C as ``KeyboardInterrupt`` while the run is in-process: the core then flushes and puts
    the output and stops the servers it launched, and the output stays resumable (the CLI's generic
    handler would exit at once, saying nothing was written)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _run_direct(options: Any, gym_config: Mapping[str, Any], ctx: RunContext) -> None:
    from gymflow.reverify import run_reverify

    bar = row_progress("Collecting reverification results")
    try:
        with _keyboard_interrupt():
            run_reverify(options, gym_config, echo=_echo, progress=bar, ctx=ctx, warn=_warn)
    finally:
        if bar is not None:
            bar.close()


def _run_flow(
    settings: GymflowConfig, options: Any, gym_config: Mapping[str, Any], ctx: RunContext, verbose: bool
) -> None:
    from gymflow.cli import orchestrated

    bar = row_progress("Collecting reverification results")
    try:
        with _keyboard_interrupt():
            # Every step of reverify runs in this process (one batch at a time: the concurrency
            # bound lives inside it, and its rows are recorded here as they complete), so no Dask
            # cluster is started for it.
            here = replace(ctx, runner=RunnerConfig())
            orchestrated.run(
                settings,
                verbose,
                "reverify:reverify_flow",
                here,
                1,
                hashes=options.input_files(),
                options=options,
                gym_config=dict(gym_config),
                echo=_echo,
                progress=bar,
                warn=_warn,
            )
    finally:
        if bar is not None:
            bar.close()

"""``gymflow ui``: the local Prefect server that orchestrated commands use, and its UI's URL."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial

from gymflow.errors import GymflowError, UsageError


def register(groups: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = groups.add_parser(
        "ui",
        help="start (or find) the local Prefect server and print its UI's URL",
        description="Orchestrated commands start a local Prefect server for $PREFECT_HOME on first "
        "use (127.0.0.1, port $PREFECT_SERVER_API_PORT or 4200; a free port when 4200 serves "
        "another home) and reuse it. This prints its UI's URL, starting it if needed; --stop "
        "stops it. With PREFECT_API_URL set, that server is used instead.",
    )
    parser.add_argument(
        "--stop",
        action="store_true",
        default=None,
        help="stop the local server gymflow started for this PREFECT_HOME (never another)",
    )
    parser.set_defaults(handler=partial(run, parser))


def run(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: Sequence[str]) -> int:
    from gymflow.cli.setup import prepare_prefect
    from gymflow.conf.compose import compose
    from gymflow.conf.overrides import split_overrides
    from gymflow.config import UiConfig

    try:
        composed = compose(
            "ui", flags={"stop": args.stop} if args.stop else {}, overrides=split_overrides(extras)
        )
        config = composed.validate(UiConfig)
    except UsageError as exc:
        parser.error(str(exc))
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    settings = composed.settings
    prepare_prefect(settings, verbose=False)
    from gymflow.flows import _server

    try:
        if config.stop:
            stopped = _server.stop()
            print("Stopped the local Prefect server." if stopped else "No local Prefect server was running.")
            return 0
        _, started = _server.ensure(settings.prefect.startup_timeout_seconds)
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    state = "started" if started else "running"
    print(f"Prefect UI ({state}): {_server.base_url()}")
    print("Stop it with: gymflow ui --stop")
    return 0

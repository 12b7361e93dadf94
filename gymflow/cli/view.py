"""``gymflow view RUN [--port P]``: serve a run's reports as web pages on 127.0.0.1 until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence
from functools import partial
from types import FrameType
from typing import TYPE_CHECKING

from gymflow.errors import GymflowError, UsageError
from gymflow.view._urls import DEFAULT_PORT

if TYPE_CHECKING:
    from gymflow.view import ViewServer


def register(groups: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = groups.add_parser(
        "view",
        help="serve a run's reports as web pages on 127.0.0.1 (overview, rollouts, provenance, ...)",
        description="Read a run's reports (local or any fsspec URL), index its rollouts, and serve "
        f"them on 127.0.0.1 (port {DEFAULT_PORT} unless --port or view.port says otherwise; the "
        "Prefect artifacts link to that port). Ctrl-C stops it. `eval post` also writes "
        "RUN/report.html, the same pages in one file that needs no server.",
    )
    parser.add_argument("run", metavar="RUN", help="run directory or prefix, local or any fsspec URL")
    parser.add_argument(
        "--port", type=int, default=None, help=f"port on 127.0.0.1 (default {DEFAULT_PORT}; 0: a free one)"
    )
    parser.set_defaults(handler=partial(run, parser))


def run(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: Sequence[str]) -> int:
    from gymflow.cli.setup import configure_storage
    from gymflow.conf.compose import compose
    from gymflow.conf.overrides import split_overrides
    from gymflow.config import ViewConfig
    from gymflow.view import ViewServer, load_run

    try:
        flags = {"port": args.port} if args.port is not None else {}
        composed = compose("view", flags=flags, overrides=split_overrides(extras))
        config = composed.validate(ViewConfig)
    except UsageError as exc:
        parser.error(str(exc))
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    configure_storage(composed.settings)
    started = time.perf_counter()
    try:
        reports = load_run(args.run)
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    try:
        server = ViewServer(reports, config.port)
    except OSError as exc:
        print(
            f"Error: cannot listen on 127.0.0.1:{config.port} ({exc.strerror or exc}); "
            "pass --port P (0 picks a free port)",
            file=sys.stderr,
        )
        return 1
    rows = len(reports.index) if reports.index is not None else 0
    print(
        f"Indexed {rows} rollout(s) of {reports.run} in {time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    print(f"gymflow view: {server.url}", flush=True)
    print("Stop it with Ctrl-C.", file=sys.stderr, flush=True)
    return _serve_until_signal(server)


def _serve_until_signal(server: ViewServer) -> int:
    """Serve from a thread until SIGINT or SIGTERM (Ctrl-C), then shut down: exit 0, one line."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, on_signal)
    server.start()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
        for sig, old in previous.items():
            signal.signal(sig, old)
    print("Stopped gymflow view.", file=sys.stderr)
    return 0

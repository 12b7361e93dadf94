"""Ctrl-C and SIGTERM: one line, the run's locks released, its children stopped, exit 130 (143).

While a command runs, SIGINT and SIGTERM are handled here instead of by Python's default
``KeyboardInterrupt``: the handler prints one line (``Interrupted; nothing was written``, or the
complete files the run kept and what the files it appends to hold so far, and how to resume),
silences this process's other output, releases the run locks, runs the registered cleanups
(:func:`gymflow.lifeline.add_cleanup`), stops the worker processes and exits at once, well within
5 seconds, without a traceback. Every file gymflow writes is written atomically or row by row, so
nothing half-written is left; the provenance record is written last, so a rerun of the same
command redoes whatever the record does not cover.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType

from gymflow import lifeline, locking, storage

Handler = Callable[[argparse.Namespace, Sequence[str]], int]

CLEANUP_DEADLINE_S = 3.0
"""Time left to locks, cleanups and children before the process exits regardless."""

EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}


def message(signum: int, written: Sequence[str], kept: Sequence[lifeline.Kept] = ()) -> str:
    """The one line printed for an interrupted run that completed ``written`` files and keeps
    what ``kept`` describes in files it appends to (:func:`gymflow.lifeline.add_kept`)."""
    what = "Interrupted" if signum == signal.SIGINT else "Terminated"
    files = ", ".join(dict.fromkeys(written))
    if kept:
        held = " and ".join(entry for entry, _ in kept)
        hints = " ".join(dict.fromkeys(hint for _, hint in kept))
        also = f"; also {files} (complete)" if files else ""
        return f"{what}; kept {held}{also} (the run did not finish). {hints}"
    if not written:
        return f"{what}; nothing was written. Run the same command again to start over."
    return (
        f"{what}; kept {files} (complete, but the run did not finish). "
        "Run the same command again to resume; it redoes what no provenance record covers."
    )


def _finish(signum: int, written: Sequence[str]) -> None:
    """Print the line, clean up within the deadline and exit (never returns)."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    try:
        sys.stderr.write(message(signum, written, lifeline.kept()) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    # From here on, nothing this process prints (threads retrying a closed connection, Prefect's
    # crash reports) reaches the user: the line above is the whole message.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    except OSError:
        pass

    def cleanup() -> None:
        locking.release_all()
        lifeline.run_cleanups(CLEANUP_DEADLINE_S / 2)
        lifeline.stop_children(grace=0.5)

    worker = threading.Thread(target=cleanup, name="gymflow-interrupt", daemon=True)
    worker.start()
    worker.join(CLEANUP_DEADLINE_S)
    os._exit(EXIT_STATUS.get(signal.Signals(signum), 130))


def run(handler: Handler, args: argparse.Namespace, extras: Sequence[str]) -> int:
    """Run a command's handler with the interruption behaviour of this module."""
    if threading.current_thread() is not threading.main_thread():
        return handler(args, extras)
    written: list[str] = []
    remove_observer = storage.add_write_observer(written.append)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        _finish(signum, written)

    previous = {sig: signal.getsignal(sig) for sig in EXIT_STATUS}
    for sig in EXIT_STATUS:
        signal.signal(sig, on_signal)
    try:
        return handler(args, extras)
    except KeyboardInterrupt:  # raised before the handler was installed, or by library code
        _finish(signal.SIGINT, written)
        raise  # pragma: no cover - _finish exits
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        remove_observer()
        lifeline.clear_kept()

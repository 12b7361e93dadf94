"""Child processes that never outlive the run that started them.

* :func:`worker_init` is the initializer of every process pool gymflow starts: it makes the
  worker ignore Ctrl-C (the parent decides; no traceback per worker) and starts
  a thread that ends the worker as soon as its parent is gone (``kill -9`` of the parent included).
  multiprocessing's resource tracker then ends by itself (its pipe closes with the last of them);
  no process of its own watches the tree (a watchdog process cost 14 MB of every pool's run).
* :func:`stop_children`: an interrupted run stops its descendants; the local Prefect server, in a
  session of its own, is meant to outlive commands and is left alone.
* :func:`add_cleanup` / :func:`run_cleanups`: what an interrupted run must stop before it exits
  (the CLI's signal handler runs them within a deadline).
* :func:`add_kept` / :func:`kept`: what an interrupted run keeps so far in files it appends to
  (which no storage write observer sees until they are complete), for the CLI's interrupt line.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from contextlib import suppress

__all__ = [
    "Kept",
    "add_cleanup",
    "add_kept",
    "alive",
    "clear_kept",
    "kept",
    "run_cleanups",
    "stop_children",
    "watch_parent",
    "worker_init",
]

PARENT_POLL_S = 0.2


def _table() -> dict[int, tuple[int, bytes, bytes]]:
    """Every process's (parent pid, start time, session), from /proc (Linux)."""
    out: dict[int, tuple[int, bytes, bytes]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        out[int(name)] = (int(fields[1]), fields[19], fields[3])
    return out


def _descendants(root: int) -> dict[int, bytes]:
    """``root``'s descendants in its session (pid: start time). One in a session of its own
    (start_new_session) is meant to outlive us (the local Prefect server gymflow keeps running):
    it and its subtree are left alone."""
    procs = _table()
    session = procs.get(root, (0, b"", None))[2]
    found: dict[int, bytes] = {}
    frontier = [root]
    while frontier:
        current = frontier.pop()
        for pid, (ppid, start, sid) in procs.items():
            if ppid == current and pid not in found and sid == session:
                found[pid] = start
                frontier.append(pid)
    return found


def _running(pid: int, start: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == start and fields[0] != b"Z"


def _stop(known: dict[int, bytes], grace: float) -> None:
    for pid, start in known.items():
        if _running(pid, start):
            with suppress(OSError):
                os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end and any(_running(p, s) for p, s in known.items()):
        time.sleep(0.05)
    for pid, start in known.items():
        if _running(pid, start):
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)


_cleanups: list[Callable[[], None]] = []
_lock = threading.Lock()


def watch_parent(parent: int | None = None, interval: float = PARENT_POLL_S) -> None:
    """End this process (exit status 1) as soon as ``parent`` (the pid of the process that started
    it; by default its parent now) dies: at once where the parent can be waited on through a pid
    file descriptor (Linux), else within ``interval`` seconds. A worker passes its creator's pid:
    read here, after the creator died, the parent would be the process that adopted it, and the
    worker would wait for work forever."""
    expected = os.getppid() if parent is None else parent

    def loop() -> None:
        handle = _pidfd(expected)
        if handle is not None and os.getppid() == expected:  # opened while it still was the parent
            # Readable once the parent has exited. A worker still writing an output when its command
            # is killed stops at once, not up to ``interval`` later with that output renamed into place.
            select.select([handle], [], [])
        while os.getppid() == expected:
            time.sleep(interval)
        os._exit(1)

    threading.Thread(target=loop, name="gymflow-parent-watch", daemon=True).start()


def _pidfd(pid: int) -> int | None:
    """A file descriptor that becomes readable when ``pid`` exits; None where there is none (not
    Linux 5.3 or later, or ``pid`` already gone)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def worker_init(parent: int | None = None) -> None:
    """Initializer of gymflow's pool workers (see the module docstring).

    ``parent`` is the pid of the process that created the pool (see :func:`worker_initargs`): a
    worker that starts after its parent already died exits at once.
    """
    if parent is not None and os.getppid() != parent:
        os._exit(1)
    # What a forked worker inherited is never collected here (its garbage is its parent's to
    # finalize: an unreachable file's buffer would be written twice), and later collections skip
    # it. Freezing moves the whole heap at once, touching no object. (Forked with collection off.)
    gc.freeze()
    gc.enable()
    with suppress(ValueError):  # not the main thread of the worker: nothing to change
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # A forked worker inherits the CLI's handler, which would stop the run's processes.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # Started with SIGINT blocked (gymflow.parallel): now that it is ignored, a pending one is dropped.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    watch_parent(parent)


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts: it cannot be signalled)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def worker_initargs() -> tuple[int]:
    """``initargs`` for :func:`worker_init`: this process's pid (a worker's storage options come
    with each call, in its run context: :func:`gymflow.executor.in_context`)."""
    return (os.getpid(),)


def add_cleanup(callback: Callable[[], None]) -> Callable[[], None]:
    """Register ``callback`` for :func:`run_cleanups`; returns a function that unregisters it."""
    with _lock:
        _cleanups.append(callback)

    def remove() -> None:
        with _lock, suppress(ValueError):
            _cleanups.remove(callback)

    return remove


Kept = tuple[str, str]
"""(what is kept, how to continue), e.g. ``("32 verified rows in 'out.jsonl'", "Run the same command
with --resume to continue.")``."""

_kept: dict[int, Callable[[], Kept | None]] = {}
_kept_lock = threading.Lock()  # for changes only: kept() runs in signal handlers and takes no lock


def add_kept(describe: Callable[[], Kept | None]) -> Callable[[], None]:
    """Register ``describe`` for :func:`kept` (it returns None while nothing is kept); returns a
    function that unregisters it. Describers must be quick and must not raise: the CLI calls them
    from its signal handler."""
    with _kept_lock:
        _kept[id(describe)] = describe

    def remove() -> None:
        with _kept_lock:
            if _kept.get(id(describe)) is describe:
                del _kept[id(describe)]

    return remove


def kept() -> list[Kept]:
    """What the registered describers say is kept, oldest first."""
    describers = tuple(_kept.values())  # one C-level copy: safe against concurrent changes
    out: list[Kept] = []
    for describe in describers:
        with suppress(Exception):
            entry = describe()
            if entry is not None:
                out.append(entry)
    return out


def clear_kept() -> None:
    """Forget every describer (the end of a command: what it kept is no longer news)."""
    with _kept_lock:
        _kept.clear()


def run_cleanups(deadline: float) -> None:
    """Run the registered cleanups (newest first) on a helper thread, for at most ``deadline`` s."""
    with _lock:
        callbacks = list(reversed(_cleanups))
        _cleanups.clear()

    def run() -> None:
        for callback in callbacks:
            with suppress(Exception):
                callback()

    thread = threading.Thread(target=run, name="gymflow-cleanup", daemon=True)
    thread.start()
    thread.join(max(deadline, 0.0))


def stop_children(grace: float = 1.0) -> None:
    """Terminate every descendant of this process (then kill those still alive after ``grace``)."""
    with suppress(OSError):
        _stop(_descendants(os.getpid()), grace)

"""The one process-pool helper: run a function over work items in core-only worker processes
(``spawn``; they die with their parent, :mod:`gymflow.lifeline`), results in item order, and the
same work serially when a pool cannot start or breaks (with a warning), so outputs never depend
on whether the pool ran.
"""

from __future__ import annotations

import pickle
import signal
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing import get_context
from typing import Any, TypeVar

from gymflow import lifeline

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["map_ordered", "pool", "submit"]


@contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Hold SIGINT back in this thread while it starts processes: a child inherits the blocked
    signal and ignores it once its initializer runs (:func:`gymflow.lifeline.worker_init`). A
    Ctrl-C that reached a child still starting would kill it mid-start with Python's "Fatal
    Python error" on the terminal; here it reaches only this process, when the block ends."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` core-only processes that exit with this one."""
    lifeline.ensure_watchdog()
    with _ctrl_c_held():
        return ProcessPoolExecutor(
            max_workers=workers,
            mp_context=get_context("spawn"),
            initializer=lifeline.worker_init,
            initargs=lifeline.worker_initargs(),
        )


def submit(executor: Executor, function: Callable[..., R], *args: Any) -> Future[R]:
    """``executor.submit`` with Ctrl-C held back while it may start a worker process."""
    with _ctrl_c_held():
        return executor.submit(function, *args)


def map_ordered(
    function: Callable[[T], R],
    items: Sequence[T],
    workers: int,
    *,
    what: str,
    done: Callable[[T, R], None] | None = None,
) -> list[R]:
    """``[function(item) for item in items]``, in up to ``workers`` processes when there is more
    than one item; ``done(item, result)`` is called in item order as results arrive. ``what``
    names the work in the fallback warning ("reading shards", ...). ``function`` and the items
    must pickle."""

    results: list[R] = []

    def serially() -> list[R]:
        for item in items[len(results) :]:  # after a broken pool: only what it did not finish
            result = function(item)
            if done is not None:
                done(item, result)
            results.append(result)
        return results

    count = min(workers, len(items))
    if count <= 1:
        return serially()
    try:
        executor = pool(count)
    except (OSError, ValueError, NotImplementedError, ImportError) as exc:
        warnings.warn(f"Process pool unavailable ({exc}); {what} serially.", RuntimeWarning, stacklevel=2)
        return serially()
    try:
        with executor:
            futures = [submit(executor, function, item) for item in items]
            for item, future in zip(items, futures, strict=True):
                result = future.result()
                if done is not None:
                    done(item, result)
                results.append(result)
            return results
    except (BrokenProcessPool, pickle.PicklingError, OSError) as exc:
        warnings.warn(f"Process pool failed ({exc}); {what} serially.", RuntimeWarning, stacklevel=2)
        return serially()

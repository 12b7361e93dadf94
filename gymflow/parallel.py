"""The one process-pool helper: run a function over work items in core-only worker processes
(``spawn``; they die with their parent, :mod:`gymflow.lifeline`), results in item order, and the
same work serially when a pool cannot start or breaks (with a warning), so outputs never depend
on whether the pool ran.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import TypeVar

from gymflow import lifeline

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["map_ordered", "pool"]


def pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` core-only processes that exit with this one."""
    lifeline.ensure_watchdog()
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=get_context("spawn"),
        initializer=lifeline.worker_init,
        initargs=lifeline.worker_initargs(),
    )


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
            futures = [executor.submit(function, item) for item in items]
            for item, future in zip(items, futures, strict=True):
                result = future.result()
                if done is not None:
                    done(item, result)
                results.append(result)
            return results
    except (BrokenProcessPool, pickle.PicklingError, OSError) as exc:
        warnings.warn(f"Process pool failed ({exc}); {what} serially.", RuntimeWarning, stacklevel=2)
        return serially()

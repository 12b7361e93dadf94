"""The cyclic garbage collector, paused around loops that allocate many short-lived objects, and
memory handed back to the system once a step is over.

Parsing a rollout line makes thousands of dicts and lists that form no cycles and die with the
row (reference counting frees them). With the collector on, every few hundred allocations start a
collection that walks the young objects again, and the older ones at intervals: time spent on
nothing the run can free. Code inside :func:`paused_gc` must not build cycles it expects to be
freed before the block ends (they are collected after it).
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache

__all__ = ["frozen_after", "paused_gc", "release_memory"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """The ``with`` block runs with the cyclic collector off (it is turned back on after, if it
    was on; in threads, the first block to pause it turns it back on)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def frozen_after() -> Iterator[None]:
    """For the command line, around imports and set-up whose objects live as long as the command:
    the ``with`` block runs with the collector paused, and what is alive after it is frozen
    (``gc.freeze``), so the command's collections do not walk it again (``gymflow.cli.main``
    unfreezes it when the command ends). Importing Prefect builds ~100,000 such objects: the full
    collections walking them cost an orchestrated re-verify of 20,000 rows 0.23 s, one of them a
    0.1 s stall of its verify loop; under 0.05 s after freezing."""
    with paused_gc():
        yield
        # Frozen before the collector is back on: on again first, the next allocation would start a
        # collection of everything the block made (0.05 s after importing Prefect).
        gc.freeze()


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None on a C library without it)."""
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None


def release_memory() -> None:
    """After a step: glibc's ``malloc_trim``, which returns the heap pages the step freed to the
    system (under a millisecond). Without it a process keeps them: after aggregating 100,000 rows,
    78 MB where 65 MB is in use. A full collection would free a few MB more but costs 60 ms in a
    process that has imported Prefect; workers collect (:mod:`gymflow.parallel`)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)

"""The cyclic garbage collector, paused around loops that allocate many short-lived objects.

Parsing a rollout line makes thousands of dicts and lists that form no cycles and die with the
row (reference counting frees them). With the collector on, every few hundred allocations start a
collection that walks the young objects again, and the older ones at intervals: time spent on
nothing the run can free. Code inside :func:`paused_gc` must not build cycles it expects to be
freed before the block ends (they are collected after it).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc"]


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

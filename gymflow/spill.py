"""Sorting more items than memory should hold: sorted runs spilled to a local directory, merged.

Items of up to :data:`RUN_ITEMS` are sorted in memory and nothing is written. Beyond that, each
run of :data:`RUN_ITEMS` items is sorted and pickled to a file of the caller's directory in
batches of :data:`BATCH`, and the runs are merged lazily: the merge holds one batch per run.
Equal items keep their input order (each run is sorted stably and the merge prefers earlier runs).
"""

from __future__ import annotations

import heapq
import os
import pickle
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, TypeVar

__all__ = ["BATCH", "RUN_ITEMS", "sorted_spilled"]

RUN_ITEMS = 200_000
BATCH = 4_096


class _Ordered(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


T = TypeVar("T", bound=_Ordered)


def _write_run(items: list[T], path: str) -> None:
    items.sort()
    with open(path, "wb", buffering=1 << 20) as handle:
        for start in range(0, len(items), BATCH):
            pickle.dump(items[start : start + BATCH], handle, protocol=pickle.HIGHEST_PROTOCOL)


def _read_run(path: str) -> Iterator[Any]:
    with open(path, "rb", buffering=1 << 20) as handle:
        while True:
            try:
                batch = pickle.load(handle)
            except EOFError:
                return
            yield from batch


def sorted_spilled(items: Iterable[T], directory: str) -> Iterator[T]:
    """``items`` in sorted order, spilling sorted runs into ``directory`` (which the caller
    creates and removes) when there are more than :data:`RUN_ITEMS`."""
    run: list[T] = []
    paths: list[str] = []
    for item in items:
        run.append(item)
        if len(run) >= RUN_ITEMS:
            path = os.path.join(directory, f"run-{len(paths)}.pickle")
            _write_run(run, path)
            paths.append(path)
            run = []
    run.sort()
    if not paths:
        yield from run
        return
    yield from heapq.merge(*(_read_run(path) for path in paths), run)

"""Items kept in local files instead of memory: pickled batches, and sorting by spilled runs.

A spill file is a sequence of pickled lists (:func:`dump_batches`, or :class:`BatchWriter` one item
at a time), read back one list at a time
(:func:`load_batches`, :func:`read_batches`), so a reader holds one batch. :func:`sorted_spilled`
sorts more items than memory should hold: up to :data:`RUN_ITEMS` are sorted in memory and nothing
is written; beyond that, each run of :data:`RUN_ITEMS` items is sorted and spilled to a file of
the caller's directory, and the runs are merged lazily (one batch per run held). Equal items keep
their input order (each run is sorted stably and the merge prefers earlier runs).

Batches held in memory instead (a result that crosses processes or is cached: a run's rows packed
as bytes) are compressed (:func:`pack_batches`, :func:`packed`, :func:`unpack_batches`): zlib at
its fastest level keeps a quarter of the pickles' size or less, for about 5 ms a megabyte.
"""

from __future__ import annotations

import heapq
import io
import os
import pickle
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, BinaryIO, Protocol, TypeVar

__all__ = [
    "BATCH",
    "RUN_ITEMS",
    "BatchWriter",
    "dump_batches",
    "load_batches",
    "pack_batches",
    "packed",
    "read_batches",
    "sorted_spilled",
    "unpack_batches",
]

RUN_ITEMS = 50_000
BATCH = 4_096


class _Ordered(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


T = TypeVar("T", bound=_Ordered)


def dump_batches(items: Sequence[Any], handle: BinaryIO, batch: int | None = None) -> None:
    """Append ``items`` to ``handle`` as pickled lists of ``batch`` items (:data:`BATCH`)."""
    size = BATCH if batch is None else batch
    for start in range(0, len(items), size):
        pickle.dump(items[start : start + size], handle, protocol=pickle.HIGHEST_PROTOCOL)


def packed(pickled: bytes) -> bytes:
    """Pickled batches (what :func:`dump_batches` wrote to a ``BytesIO``) as they are held."""
    return zlib.compress(pickled, 1)


def pack_batches(items: Sequence[Any], batch: int | None = None) -> bytes:
    """``items`` as batches held in memory (:func:`unpack_batches` reads them)."""
    handle = io.BytesIO()
    dump_batches(items, handle, batch)
    return packed(handle.getvalue())


def unpack_batches(data: bytes) -> Iterator[Any]:
    """The items of batches :func:`pack_batches` (or :func:`packed`) made."""
    return load_batches(io.BytesIO(zlib.decompress(data)))


class BatchWriter:
    """Items appended one at a time to the local file ``path``, pickled ``batch`` at a time."""

    def __init__(self, path: str, batch: int | None = None) -> None:
        self.path = path
        self._size = BATCH if batch is None else batch
        self._handle: BinaryIO = open(path, "wb", buffering=1 << 20)  # noqa: SIM115 - closed by close()
        self._batch: list[Any] = []
        self.count = 0

    def add(self, item: Any) -> None:
        self._batch.append(item)
        self.count += 1
        if len(self._batch) >= self._size:
            self._flush()

    def _flush(self) -> None:
        if self._batch:
            pickle.dump(self._batch, self._handle, protocol=pickle.HIGHEST_PROTOCOL)
            self._batch = []

    def close(self) -> None:
        self._flush()
        self._handle.close()

    def abandon(self) -> None:
        """Close without writing what is pending (the file is being thrown away)."""
        self._batch = []
        self._handle.close()


def load_batches(handle: BinaryIO) -> Iterator[Any]:
    """The items of the pickled lists in ``handle``, one list read at a time."""
    while True:
        try:
            batch = pickle.load(handle)
        except EOFError:
            return
        yield from batch


def read_batches(path: str) -> Iterator[Any]:
    """:func:`load_batches` of the local file ``path`` (a default buffer: many may be open at once)."""
    with open(path, "rb") as handle:
        yield from load_batches(handle)


def _write_run(items: list[T], path: str) -> None:
    items.sort()
    with open(path, "wb", buffering=1 << 20) as handle:
        dump_batches(items, handle)


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
    yield from heapq.merge(*(read_batches(path) for path in paths), run)

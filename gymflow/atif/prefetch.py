"""Trajectory files read ahead of their turn on object stores, handed over in manifest order.

Every entry's outcome (its resolved path and bytes, or the error resolving or reading it raised) is
delivered in manifest order, so the first failing entry is still the one reported; reading ahead
only issues reads, never writes. Local files are read in turn, without threads.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from functools import partial

from gymflow import threads
from gymflow.atif.manifest import ManifestEntry

Fetched = tuple[str, bytes]
Fetch = Callable[[ManifestEntry], Fetched]


def fetched_in_order(
    entries: Iterable[ManifestEntry], fetch: Fetch, *, workers: int, window: int = 32
) -> Iterator[tuple[ManifestEntry, Callable[[], Fetched]]]:
    """``(entry, outcome)`` per entry, in order; calling ``outcome()`` returns or raises ``fetch(entry)``."""
    if workers < 1:
        for entry in entries:
            yield entry, partial(fetch, entry)
        return
    pending: deque[tuple[ManifestEntry, Future[Fetched]]] = deque()
    pool = threads.executor(workers, "gymflow-atif-read")
    try:
        source = iter(entries)
        for entry in source:
            pending.append((entry, pool.submit(fetch, entry)))
            if len(pending) >= window:
                break
        while pending:
            entry, future = pending.popleft()
            following = next(source, None)
            if following is not None:
                pending.append((following, pool.submit(fetch, following)))
            yield entry, future.result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)

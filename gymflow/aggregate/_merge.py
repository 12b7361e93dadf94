"""Writing the merged rollouts file (aggregate.md §1.3): all rows sorted by (task, rollout).

Rows are copied from the shards' bytes (the local spool for remote shards) in sorted order, one
row at a time, so memory does not depend on the file size. A row already in compact JSON is copied
verbatim; any other row is re-serialized compactly. The file is replaced atomically.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from gymflow import storage
from gymflow.aggregate._scan import ScanRow, ShardScan
from gymflow.jsonline import dumps_exact, loads_exact
from gymflow.provenance import FileDigest

__all__ = ["merged_lines", "sorted_rows", "write_merged"]

_BATCH = 4 * 2**20


def sorted_rows(scans: Sequence[ShardScan]) -> list[tuple[ShardScan, ScanRow]]:
    """Every loaded row in merge order: (task, rollout), then shard order, then line order."""
    pairs = [(scan, row) for scan in scans for row in scan.rows]
    pairs.sort(key=lambda pair: (pair[1].facts.task, pair[1].facts.rollout, pair[0].index, pair[1].line))
    return pairs


def _os_path(url: str) -> str:
    return url[len("file://") :] if url.startswith("file://") else url


def merged_lines(scans: Sequence[ShardScan]) -> Iterator[bytes]:
    """The merged file's bytes, in batches of a few MB (rows read with ``pread``: memory-mapping
    the shards would count their pages in the process's resident memory)."""
    handles: dict[int, int] = {}
    try:
        for scan in scans:
            handles[scan.index] = os.open(_os_path(scan.source), os.O_RDONLY)
        batch: list[bytes] = []
        size = 0
        for scan, row in sorted_rows(scans):
            data = os.pread(handles[scan.index], row.length, row.offset)
            if row.compact:
                line = data if data.endswith(b"\n") else data + b"\n"
            else:
                line = _compact(_parse(data)) + b"\n"
            batch.append(line)
            size += len(line)
            if size >= _BATCH:
                yield b"".join(batch)
                batch, size = [], 0
        if batch:
            yield b"".join(batch)
    finally:
        for handle in handles.values():
            os.close(handle)


def _compact(value: object) -> bytes:
    return dumps_exact(value)


def _parse(data: bytes) -> object:
    # The scan accepted this row, so it reads exactly (integers of any size stay integers).
    return loads_exact(data.strip(b" \t\n\r"))[0]


def write_merged(scans: Sequence[ShardScan], output: str) -> FileDigest:
    """Write all rows of ``scans`` to ``output`` in merge order, atomically; return its digest."""
    digest = hashlib.sha256()
    size = 0
    # Hash on a helper thread while this one writes: both release the GIL on large buffers.
    hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gymflow-merge-hash")
    hashing: list[Future[None]] = []

    def hashed() -> Iterator[bytes]:
        nonlocal size
        for chunk in merged_lines(scans):
            hashing.append(hasher.submit(digest.update, chunk))
            if len(hashing) > 4:
                hashing.pop(0).result()
            size += len(chunk)
            yield chunk

    try:
        storage.write_atomic_lines(output, hashed())
        for future in hashing:
            future.result()
    finally:
        hasher.shutdown(wait=True)
    return FileDigest(storage.to_uri(output), digest.hexdigest(), size)

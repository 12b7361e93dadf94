"""Writing the merged rollouts file (aggregate.md §1.3): all rows sorted by (task, rollout).

Rows are copied from the shards' bytes (the local spool for remote shards) in sorted order, one
row at a time, so memory does not depend on the file size. A row already in compact JSON is copied
verbatim; any other row is re-serialized compactly. The file is replaced atomically.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import cast

from gymflow import provenance, storage, threads
from gymflow.aggregate._scan import ScanRow, ShardScan
from gymflow.errors import InputError
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


class _Batches:
    """Fills reusable buffers with rows in merge order (on the reader thread: ``pread`` into
    the buffer releases the GIL, and no per-row bytes object is made for verbatim rows)."""

    def __init__(self, order: Sequence[tuple[ShardScan, ScanRow]], handles: dict[int, int]) -> None:
        self.order = order
        self.handles = handles
        self.free: list[bytearray] = []

    def fill(self, start: int) -> tuple[bytes | bytearray, int, int]:
        """(buffer, bytes used, next row) for the rows from ``start`` on; a row larger than a
        whole buffer comes alone, as its own bytes."""
        buffer = self.free.pop() if self.free else bytearray(_BATCH)
        view = memoryview(buffer)
        used = 0
        index = start
        with view:
            while index < len(self.order):
                scan, row = self.order[index]
                line = None if row.compact else _compact(_parse(self._read(scan, row))) + b"\n"
                need = row.length + 1 if line is None else len(line)
                if used + need > _BATCH:
                    if used == 0:  # a row larger than a buffer: on its own
                        self.free.append(buffer)
                        data = self._read(scan, row) if line is None else line
                        return (data if data.endswith(b"\n") else data + b"\n"), -1, index + 1
                    break
                if line is None:
                    self._read_into(scan, row, view[used : used + row.length])
                    used += row.length
                    if buffer[used - 1] != 0x0A:  # the shard's last line, without its newline
                        buffer[used] = 0x0A
                        used += 1
                else:
                    view[used : used + need] = line
                    used += need
                index += 1
        return buffer, used, index

    def _read(self, scan: ShardScan, row: ScanRow) -> bytes:
        data = bytearray(row.length)
        self._read_into(scan, row, memoryview(data))
        return bytes(data)

    def _read_into(self, scan: ShardScan, row: ScanRow, target: memoryview) -> None:
        done = 0
        while done < row.length:
            count = os.preadv(self.handles[scan.index], [target[done:]], row.offset + done)
            if count == 0:
                raise InputError(f"{scan.url!r} changed while it was being aggregated (line {row.line})")
            done += count


def merged_lines(scans: Sequence[ShardScan]) -> Iterator[bytes | bytearray | memoryview]:
    """The merged file's bytes, in batches of a few MB, the next batch read ahead on a helper
    thread while this one is consumed. A batch is valid until the next one is asked for (its
    buffer is reused). Rows are read with ``pread``: memory-mapping the shards would count their
    pages in the process's resident memory."""
    handles: dict[int, int] = {}
    reader = threads.executor(1, "gymflow-merge-read")
    try:
        for scan in scans:
            handles[scan.index] = os.open(_os_path(scan.source), os.O_RDONLY)
        batches = _Batches(sorted_rows(scans), handles)
        pending = reader.submit(batches.fill, 0) if batches.order else None
        while pending is not None:
            buffer, used, stop = pending.result()
            pending = reader.submit(batches.fill, stop) if stop < len(batches.order) else None
            if used < 0:
                yield buffer
                continue
            with memoryview(buffer)[:used] as chunk:
                yield chunk
            batches.free.append(cast(bytearray, buffer))  # consumed: the next fill may reuse it
    finally:
        reader.shutdown(wait=True, cancel_futures=True)
        for handle in handles.values():
            os.close(handle)


def _compact(value: object) -> bytes:
    return dumps_exact(value)


def _parse(data: bytes) -> object:
    # The scan accepted this row, so it reads exactly (integers of any size stay integers).
    return loads_exact(data.strip(b" \t\n\r"))[0]


def write_merged(scans: Sequence[ShardScan], output: str) -> FileDigest:
    """Write all rows of ``scans`` to ``output`` in merge order, atomically; return its digest
    (hashed by the writer while it writes)."""
    # The batches are bytes-like (memoryviews of reused buffers), which the writer and the hash
    # take as they take bytes.
    sha256, size = storage.write_atomic_lines(output, cast(Iterator[bytes], merged_lines(scans)))
    merged = FileDigest(storage.to_uri(output), sha256, size)
    provenance.remember(output, merged)  # the health check that follows need not hash it again
    return merged

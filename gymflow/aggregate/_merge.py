"""Writing the merged rollouts file (aggregate.md §1.3): all rows sorted by (task, rollout).

Rows are copied from the shards' bytes (the local spool for remote shards) in sorted order
(:func:`gymflow.aggregate._spill.merge_order`, taken as they are written), so memory depends
neither on the file size nor on the number of rows. A row already in compact JSON is copied verbatim; any
other row is re-serialized compactly. The file is replaced atomically.

Rows that lie next to each other in one shard and are copied verbatim form a *run*, read as one
span. A reader thread fills reusable buffers with runs (one ``pread`` each) and re-serialized
rows. For a local output, a run of at least :data:`_COPY_MIN` bytes is instead copied by the
kernel (:func:`gymflow.storage.copy_range`: ``copy_file_range``, else ``sendfile``), never
through Python (per-run kernel copies of short runs cost more than they save), and the SHA-256
is computed on another helper thread while each buffer is written. Any other output (an object
store) gets the buffers through :func:`merged_lines`.
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

from gymflow import storage, threads
from gymflow.aggregate._scan import ScanRow, ShardScan
from gymflow.aggregate._spill import merge_order
from gymflow.errors import InputError
from gymflow.jsonline import dumps_exact, loads_exact
from gymflow.provenance import FileDigest

__all__ = ["merged_lines", "write_merged"]

_BATCH = 4 * 2**20
_COPY_MIN = 256 * 2**10
"""Spans at least this long are copied by the kernel; shorter ones through a buffer."""


def _os_path(url: str) -> str:
    return url[len("file://") :] if url.startswith("file://") else url


@dataclass(frozen=True, slots=True)
class Span:
    """Unchanged bytes of one shard: ``length`` bytes from ``offset``, then a newline if
    ``newline`` (the shard's last line, without its own)."""

    scan: ShardScan
    offset: int
    length: int
    newline: bool


Batch = tuple[bytearray | bytes | Span, int, bool]
"""(buffer, bytes used, whether rows remain); bytes used is -1 for a lone piece (a row larger
than a buffer, or a span for the kernel to copy)."""


class _Batches:
    """Fills reusable buffers with rows in merge order (on the reader thread: ``pread`` into
    the buffer releases the GIL, and no per-row bytes object is made for verbatim rows). With
    ``copy_min``, a run of verbatim rows at least that long comes alone, as a :class:`Span`.
    Rows are taken from ``order`` as they are written; only a short look-ahead is held."""

    def __init__(
        self,
        scans: Sequence[ShardScan],
        order: Iterable[ScanRow],
        handles: dict[int, int],
        copy_min: int | None = None,
    ) -> None:
        self.scans = {scan.index: scan for scan in scans}
        self._rows = iter(order)
        self._ahead: deque[ScanRow] = deque()
        self.handles = handles
        self.copy_min = copy_min
        self.free: list[bytearray] = []

    def peek(self, index: int = 0) -> ScanRow | None:
        """The ``index``-th row not yet taken (None past the last)."""
        while len(self._ahead) <= index:
            row = next(self._rows, None)
            if row is None:
                return None
            self._ahead.append(row)
        return self._ahead[index]

    def _take(self) -> None:
        if not self._ahead:
            self.peek()
        self._ahead.popleft()

    def _continues(self, row: ScanRow, end: int, following: ScanRow | None) -> bool:
        return (
            following is not None
            and following.shard == row.shard
            and following.compact
            and following.offset == end
        )

    def _probe(self, stop_at: int) -> int:
        """Bytes of the run of verbatim rows ahead (adjacent in one shard), counted while shorter
        than ``stop_at``; nothing is taken."""
        row = self.peek()
        assert row is not None
        end = row.offset + row.length
        index = 1
        while end - row.offset < stop_at and self._continues(row, end, following := self.peek(index)):
            assert following is not None
            end += following.length
            index += 1
        return end - row.offset

    def _take_run(self, budget: int | None = None) -> tuple[int, int]:
        """Take the run of verbatim rows ahead: (rows, bytes), at most ``budget`` bytes (no row
        at all if the first is longer)."""
        row = self.peek()
        assert row is not None
        if budget is not None and row.length > budget:
            return 0, 0
        self._take()
        end = row.offset + row.length
        rows = 1
        while self._continues(row, end, following := self.peek()):
            assert following is not None
            if budget is not None and end + following.length - row.offset > budget:
                break
            self._take()
            end += following.length
            rows += 1
        return rows, end - row.offset

    def fill(self) -> Batch:
        """The next batch."""
        buffer = self.free.pop() if self.free else bytearray(_BATCH)
        used = 0
        with memoryview(buffer) as view:
            while (row := self.peek()) is not None:
                scan = self.scans[row.shard]
                if row.compact:
                    if self.copy_min is not None and self._probe(self.copy_min) >= self.copy_min:
                        if used:
                            break  # the span comes next, on its own
                        _, length = self._take_run()
                        self.free.append(buffer)
                        at_end = row.offset + length >= scan.nbytes
                        newline = at_end and _read_byte(self.handles, scan, row.offset + length - 1) != b"\n"
                        return Span(scan, row.offset, length, newline), -1, self.peek() is not None
                    # The longest run that fits (a byte kept for a missing last newline).
                    rows, length = self._take_run(budget=_BATCH - used - 1)
                    if not rows:
                        if used:
                            break
                        # a row larger than a buffer: on its own
                        self._take()
                        self.free.append(buffer)
                        data = _read(self.handles, scan, row)
                        return (data if data.endswith(b"\n") else data + b"\n"), -1, self.peek() is not None
                    _read_into(
                        self.handles[scan.index], scan, row.offset, view[used : used + length], row.line
                    )
                    used += length
                    if buffer[used - 1] != 0x0A:  # the shard's last line, without its newline
                        buffer[used] = 0x0A
                        used += 1
                    continue
                line = _compact(_parse(_read(self.handles, scan, row))) + b"\n"
                if used + len(line) > _BATCH:
                    if used:
                        break
                    self._take()
                    self.free.append(buffer)
                    return line, -1, self.peek() is not None
                self._take()
                view[used : used + len(line)] = line
                used += len(line)
        return buffer, used, self.peek() is not None


def _read(handles: dict[int, int], scan: ShardScan, row: ScanRow) -> bytes:
    data = bytearray(row.length)
    _read_into(handles[scan.index], scan, row.offset, memoryview(data), row.line)
    return bytes(data)


def _read_byte(handles: dict[int, int], scan: ShardScan, offset: int) -> bytes:
    return os.pread(handles[scan.index], 1, offset)


def _read_into(handle: int, scan: ShardScan, offset: int, target: memoryview, line: int | None) -> None:
    done = 0
    while done < len(target):
        count = os.preadv(handle, [target[done:]], offset + done)
        if count == 0:
            where = f" (line {line})" if line is not None else ""
            raise InputError(f"{scan.url!r} changed while it was being aggregated{where}")
        done += count


@contextmanager
def _batches(
    scans: Sequence[ShardScan], order: Iterable[ScanRow] | None, copy_min: int | None
) -> Iterator[Iterator[tuple[Batch, _Batches]]]:
    """The batches of the merged file, each filled on a reader thread while the one before is
    consumed; a buffer goes back to ``free`` once consumed."""
    handles: dict[int, int] = {}
    reader = threads.executor(1, "gymflow-merge-read")
    try:
        for scan in scans:
            handles[scan.index] = os.open(_os_path(scan.source), os.O_RDONLY)
        batches = _Batches(scans, merge_order(scans) if order is None else order, handles, copy_min)

        def each() -> Iterator[tuple[Batch, _Batches]]:
            pending = reader.submit(batches.fill) if reader.submit(batches.peek).result() else None
            while pending is not None:
                batch = pending.result()
                pending = reader.submit(batches.fill) if batch[2] else None
                yield batch, batches

        yield each()
    finally:
        reader.shutdown(wait=True, cancel_futures=True)
        for handle in handles.values():
            os.close(handle)


def merged_lines(
    scans: Sequence[ShardScan], order: Iterable[ScanRow] | None = None
) -> Iterator[bytes | bytearray | memoryview]:
    """The merged file's bytes, in batches of a few MB, the next batch read ahead on a helper
    thread while this one is consumed. A batch is valid until the next one is asked for (its
    buffer is reused). Rows are read with ``pread``: memory-mapping the shards would count their
    pages in the process's resident memory."""
    with _batches(scans, order, None) as each:
        for (buffer, used, _), batches in each:
            assert not isinstance(buffer, Span)
            if used < 0:
                yield buffer
                continue
            with memoryview(buffer)[:used] as chunk:
                yield chunk
            batches.free.append(cast(bytearray, buffer))  # consumed: the next fill may reuse it


def _write_local(scans: Sequence[ShardScan], order: Iterable[ScanRow] | None, output: str) -> tuple[str, int]:
    """Write the merged file to the local ``output``: buffers written while a helper thread
    hashes them, long runs copied by the kernel (and hashed from the shard)."""
    digest = hashlib.sha256()
    scratch = bytearray(_BATCH)

    def hash_span(handles: dict[int, int], span: Span) -> None:
        offset, length = span.offset, span.length
        with memoryview(scratch) as view:
            while length > 0:
                count = min(length, _BATCH)
                _read_into(handles[span.scan.index], span.scan, offset, view[:count], None)
                digest.update(view[:count])
                offset += count
                length -= count
        if span.newline:
            digest.update(b"\n")

    def write(target: int) -> tuple[str, int]:
        size = 0
        with _batches(scans, order, _COPY_MIN) as each, threads.executor(1, "gymflow-merge-hash") as hasher:
            hashed: Future[None] | None = None
            for (piece, used, _), batches in each:
                if isinstance(piece, Span):
                    # Hashed from the shard on the hasher thread (its jobs run in order, one at
                    # a time, so they share one scratch buffer).
                    try:
                        storage.copy_range(
                            batches.handles[piece.scan.index], target, piece.offset, piece.length
                        )
                    except EOFError:
                        raise InputError(
                            f"{piece.scan.url!r} changed while it was being aggregated"
                        ) from None
                    if piece.newline:
                        storage.write_all(target, b"\n")
                    hashed = hasher.submit(hash_span, batches.handles, piece)
                    size += piece.length + piece.newline
                    continue
                chunk = memoryview(piece)[: len(piece) if used < 0 else used]
                with chunk:
                    hashed = hasher.submit(digest.update, chunk)
                    try:
                        storage.write_all(target, chunk)
                    finally:  # before the buffer is refilled or released, even when a write fails
                        hashed.result()
                    hashed = None
                    size += len(chunk)
                if used >= 0:
                    batches.free.append(cast(bytearray, piece))
            if hashed is not None:
                hashed.result()
        return digest.hexdigest(), size

    return storage.write_atomic_local(output, write)


def _compact(value: object) -> bytes:
    return dumps_exact(value)


def _parse(data: bytes) -> object:
    # The scan accepted this row, so it reads exactly (integers of any size stay integers).
    return loads_exact(data.strip(b" \t\n\r"))[0]


def write_merged(
    scans: Sequence[ShardScan], output: str, order: Iterable[ScanRow] | None = None
) -> FileDigest:
    """Write all rows of ``scans`` to ``output`` in merge order, atomically; return its digest
    (hashed while it is written)."""
    if storage.is_local(output):
        sha256, size = _write_local(scans, order, output)
    else:
        # The batches are bytes-like (memoryviews of reused buffers), which the writer and the
        # hash take as they take bytes.
        sha256, size = storage.write_atomic_lines(output, cast(Iterator[bytes], merged_lines(scans, order)))
    return FileDigest(storage.to_uri(output), sha256, size)

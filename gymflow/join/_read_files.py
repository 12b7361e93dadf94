"""The capture files a join's rows read, kept on local scratch as the byte ranges report them,
then sorted by URI, a file read twice counted once (as last read). The provenance record lists
them and the cache key covers them one at a time, so the parent of a join of a million capture
files does not hold their digests (about 1.3 KB each, with the record built whole).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from gymflow.provenance import FileDigest
from gymflow.spill import BatchWriter, read_batches, sorted_spilled

__all__ = ["ReadFiles"]


class ReadFiles:
    """Digests added as ranges finish (:meth:`add`), then sorted once (:meth:`sort`) and read
    back in URI order as often as needed (iterating). Files live in ``directory``, which the
    caller creates and removes."""

    def __init__(self, directory: str) -> None:
        self._directory = directory
        self._arrived = BatchWriter(os.path.join(directory, "arrived.pickle"))
        self._sorted: str | None = None
        self.count = 0
        """Digests added, a file read twice counted twice."""

    def __enter__(self) -> ReadFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._sorted is None:
            self._arrived.abandon()  # left by an error: its directory goes with it

    def add(self, digests: Iterable[FileDigest]) -> None:
        for digest in digests:
            self._arrived.add((digest.uri, self.count, digest.sha256, digest.bytes))
            self.count += 1

    def sort(self) -> None:
        """Sort what was added (after the last :meth:`add`)."""
        self._arrived.close()
        writer = BatchWriter(os.path.join(self._directory, "sorted.pickle"))
        try:
            last: tuple[str, int, str, int] | None = None
            for item in sorted_spilled(read_batches(self._arrived.path), self._directory):
                if last is not None and last[0] != item[0]:
                    writer.add((last[0], last[2], last[3]))
                last = item
            if last is not None:
                writer.add((last[0], last[2], last[3]))
        finally:
            writer.close()
        os.unlink(self._arrived.path)
        self._sorted = writer.path

    def _rows(self) -> Iterator[tuple[str, str, int]]:
        if self._sorted is None:
            raise RuntimeError("ReadFiles.sort() first")
        return read_batches(self._sorted)

    def __iter__(self) -> Iterator[FileDigest]:
        return (FileDigest(uri, sha, size) for uri, sha, size in self._rows())

    def uris(self) -> Iterator[str]:
        """The URIs, in order."""
        return (uri for uri, _, _ in self._rows())

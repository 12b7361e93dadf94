"""The rows a resources server's ``/aggregate_metrics`` receives at the end of a run, kept on
local scratch as they are gathered (reverify.md §4 point 6): the run holds each row's span, not
the row, so its memory does not grow with the rows it verifies."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gymflow import scratch
from gymflow.aggregate._server import MetricsBody
from gymflow.jsonline import dumps_exact

__all__ = ["SentRows", "Span"]

Span = tuple[int, int]
"""A row's (offset, length) in the scratch file."""


class SentRows:
    """An append-only scratch file of rows as compact JSON; :meth:`close` removes it."""

    def __init__(self) -> None:
        fd, self._path = scratch.scratch_file("sent", ".jsonl")
        self._handle = os.fdopen(fd, "w+b")
        self._size = 0

    def add(self, row: Mapping[str, Any]) -> Span:
        data = dumps_exact(row)
        self._handle.write(data)
        span = (self._size, len(data))
        self._size += len(data)
        return span

    def rows(self, spans: Sequence[Span]) -> Iterator[bytes]:
        """The rows at ``spans``, in that order."""
        self._handle.flush()
        fd = self._handle.fileno()
        for offset, length in spans:
            yield os.pread(fd, length, offset)

    def body(self, spans: Sequence[Span]) -> MetricsBody:
        """The POST body of the rows at ``spans``, in that order."""
        return MetricsBody(lambda: self.rows(spans), len(spans), sum(length for _, length in spans))

    def close(self) -> None:
        self._handle.close()
        scratch.discard(self._path)

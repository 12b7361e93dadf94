"""Appending completed rows in key order, so the end of a run has nothing to sort.

A fresh run sends its rows in key order (:meth:`~gymflow.reverify._plan.ReverifyPlan.sources`);
with ``--concurrency`` requests in flight they complete almost in that order. :class:`KeyOrder`
holds a completed row until every row before it in key order has completed, then releases it,
so the output and sidecar are appended sorted and ``finish`` finds them in order instead of
rewriting them (:func:`gymflow.reverify._finish._sort_file` checks, and rewrites what is not).

What it holds is bounded: :data:`HELD_PER_REQUEST` rows per request in flight (at least
:data:`HELD_ROWS_MIN`) and :data:`HELD_BYTES` of lines. A row that stays out longer (a retry
waiting out its backoff, a slow answer) fills the bound; then every held row is released in key
order, the order is given up and later rows are appended as they complete (``finish`` sorts, as
for any run that is not in order). A run that fails or is cancelled releases what it holds
(:meth:`~gymflow.reverify._plan.ReverifyPlan.abort`). Ctrl-C and SIGTERM stop the process at once
(:mod:`gymflow.cli.interrupt`), like ``kill -9``: the held rows, like the rows of the event loop's
current turn, are not in the files; ``--resume`` verifies them again (never twice in the output).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gymflow.reverify._collect import SortKey

__all__ = ["HELD_BYTES", "HELD_PER_REQUEST", "HELD_ROWS_MIN", "Entry", "KeyOrder"]

HELD_PER_REQUEST = 4
"""Completed rows held per request in flight (``--concurrency``)."""
HELD_ROWS_MIN = 64
HELD_BYTES = 8 << 20
"""At most this many bytes of held JSONL lines."""

Entry = tuple[str, dict[str, Any], bytes]
"""A completed row: its destination (``output``, ``sidecar``, ``none``), the row and its line."""


class KeyOrder:
    """Releases completed rows in the order of ``keys`` (the sort keys of the rows a run sends, in
    the order it sends them, ascending), ``concurrency`` requests in flight."""

    def __init__(self, keys: Iterable[SortKey], concurrency: int) -> None:
        self._keys = list(keys)
        self._limit = max(HELD_ROWS_MIN, HELD_PER_REQUEST * concurrency)
        self._next = 0
        self._held: dict[SortKey, list[Entry]] = {}
        self._rows = 0
        self._bytes = 0
        self.given_up = False

    def add(self, key: SortKey, entry: Entry) -> list[Entry]:
        """Take one completed row of sort key ``key``; the rows now due, in key order. When the
        bound is passed, every held row is due (in key order) and :attr:`given_up` is set."""
        held = self._held.get(key)
        if held is None:
            self._held[key] = [entry]
        else:
            held.append(entry)
        self._rows += 1
        self._bytes += len(entry[2])
        due = self._due()
        if self._rows > self._limit or self._bytes > HELD_BYTES:
            due.extend(self.release())
        return due

    def _due(self) -> list[Entry]:
        due: list[Entry] = []
        keys, held = self._keys, self._held
        while self._next < len(keys):
            entries = held.get(keys[self._next])
            if entries is None:
                break
            entry = entries.pop(0)
            if not entries:
                del held[keys[self._next]]
            due.append(entry)
            self._rows -= 1
            self._bytes -= len(entry[2])
            self._next += 1
        return due

    def release(self) -> list[Entry]:
        """Every held row, in key order, and the order given up (rows still to come are not held)."""
        due = [entry for key in sorted(self._held) for entry in self._held[key]]
        self._held.clear()
        self._rows = self._bytes = 0
        self.given_up = True
        return due

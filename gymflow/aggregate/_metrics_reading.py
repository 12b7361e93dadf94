"""An aggregate metrics file read back in bounded memory (the viewer's pages, the summaries of an
up-to-date run).

A metrics file (``rollouts_aggregate_metrics.json`` and its healthy-only sibling) holds one
entry per agent, and in each a ``group_level_metrics`` list with one object per task, a sample
rollout in each: about 500 bytes a rollout, 500 MB at a million. Readers need every key of an
entry but only the first few groups (the pages show :data:`GROUP_ROWS`; a summary none) and the
rollouts they cover, so only those groups are parsed and the rest are counted.

The files 0.7.0 and gymflow write are indented by two spaces (``json.dumps(indent=2)``, orjson's
``OPT_INDENT_2``). In such a file a raw newline is only ever whitespace between tokens (JSON
strings escape it), so a newline followed by N spaces and a bracket is a bracket at depth N/2:
the groups' list is found, its objects counted and its tail skipped with ``bytes.find`` and
``bytes.count`` over chunks, and what is kept is parsed as one small document. A file of any
other layout is parsed whole, as before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import orjson

from gymflow import storage
from gymflow.aggregate._metrics import TaskEntries
from gymflow.errors import InputError

__all__ = ["GROUP_ROWS", "MetricsFile", "covered", "read_metrics_file", "rollouts_covered"]

GROUP_ROWS = 1_000
"""Groups (tasks) of each entry the pages show; the rest are counted."""

_CHUNK = 1 << 20
_INDENTED = b"[\n  {\n"
_GROUPS_OPEN = b'\n    "group_level_metrics": [\n'
_GROUPS_CLOSE = b"\n    ]"
_GROUP_START = b"\n      {"
_ENTRY_START = b"\n  {"
"""An object entry of the file's list (depth 1)."""
_ROLLOUTS = re.compile(rb'\n        "num_rollouts": (-?[0-9][0-9.eE+-]*)[,\n]')
"""A group's ``num_rollouts`` (a key of an object at depth 4: eight spaces)."""
_HOLD = 64
"""Bytes at the end of a chunk held for the next: more than any pattern above spans."""


@dataclass(frozen=True)
class MetricsFile:
    """The entries of a metrics file (each group list cut to its first ``groups``), the number of
    groups each entry has in the file and the rollouts they cover, in entry order."""

    entries: list[dict[str, Any]]
    group_totals: list[int]
    rollouts: list[int]
    """The ``num_rollouts`` of every group of each entry, summed: the rollouts its statistics cover."""


class _Scanner:
    """Forward-only search over a file read in chunks."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle
        self._buffer = b""
        self._eof = False

    def _more(self) -> bool:
        chunk = b"" if self._eof else self._handle.read(_CHUNK)
        self._eof = not chunk
        self._buffer += chunk
        return bool(chunk)

    def until(self, pattern: bytes, *, leave: int = 0) -> tuple[bytes, bool]:
        """The bytes before the next ``pattern``, consumed with it but for its last ``leave`` bytes;
        or the rest of the file and False."""
        start = 0
        while (at := self._buffer.find(pattern, start)) < 0:
            start = max(0, len(self._buffer) - len(pattern) + 1)
            if not self._more():
                rest, self._buffer = self._buffer, b""
                return rest, False
        cut = at + len(pattern) - leave
        before, self._buffer = self._buffer[:at], self._buffer[cut:]
        return before, True

    def region(self, end: bytes, item: bytes, keep: int) -> tuple[bytes, int, int]:
        """Up to ``end`` (consumed, or to the end of the file): the bytes before its ``keep``-th
        ``item`` (counting from 0; all of them when there are fewer), how many ``item`` it holds and
        the sum of its groups' ``num_rollouts``. Only the kept bytes and one chunk are in memory."""
        kept: list[bytes] = []
        seen = rollouts = 0
        while True:
            at = self._buffer.find(end)
            while at < 0 and len(self._buffer) < 2 * _HOLD and self._more():
                at = self._buffer.find(end)
            # this round takes the bytes before ``cut``: up to ``end`` when it is here, else all but
            # the last _HOLD; an ``item`` or a ``num_rollouts`` that starts before ``cut`` lies
            # whole in the buffer
            if at >= 0:
                cut = reach = at
            elif self._eof:
                cut = reach = len(self._buffer)
            else:
                cut = len(self._buffer) - _HOLD
                reach = cut + len(item) - 1
            items = self._buffer.count(item, 0, reach)
            for found in _ROLLOUTS.finditer(self._buffer, 0, len(self._buffer) if at < 0 else at + 1):
                if found.start() >= cut:
                    break
                rollouts += int(orjson.loads(found.group(1)))
            if seen <= keep:
                stop = cut if seen + items <= keep else _nth(self._buffer, item, keep - seen)
                kept.append(self._buffer[:stop])
            seen += items
            if at >= 0 or self._eof:
                self._buffer = self._buffer[at + len(end) :] if at >= 0 else b""
                return b"".join(kept), seen, rollouts
            self._buffer = self._buffer[cut:]
            self._more()


def _nth(data: bytes, pattern: bytes, n: int) -> int:
    """Where the ``n``-th (from 0) occurrence of ``pattern`` in ``data`` starts."""
    at = -1
    for _ in range(n + 1):
        at = data.find(pattern, at + 1)
    return at


def _entries(value: Any) -> list[dict[str, Any]] | None:
    if not isinstance(value, list):
        return None
    return [entry for entry in value if isinstance(entry, dict)]


def _groups(entry: dict[str, Any]) -> list[Any] | None:
    groups = entry.get("group_level_metrics")
    return groups if isinstance(groups, list) else None


def rollouts_covered(entry: Mapping[str, Any]) -> int:
    """The scored rollouts behind an entry's statistics: its groups' ``num_rollouts``, summed."""
    groups = entry.get("group_level_metrics") or []
    if isinstance(groups, TaskEntries):  # made on demand: counted without making every task's object
        return groups.rollouts
    return sum(int(group.get("num_rollouts", 0)) for group in groups if isinstance(group, Mapping))


def covered(entries: Sequence[Mapping[str, Any]], rollouts: Sequence[int] | None) -> list[int]:
    """The rollouts each entry covers: ``rollouts`` when the entries were read back without their
    groups (:attr:`MetricsFile.rollouts`), else counted from their groups."""
    return list(rollouts) if rollouts is not None else [rollouts_covered(entry) for entry in entries]


def _parse_whole(data: bytes, keep: int) -> MetricsFile | None:
    try:
        entries = _entries(orjson.loads(data))
    except orjson.JSONDecodeError:
        return None
    if entries is None:
        return None
    totals, rollouts = [], []
    for entry in entries:
        groups = _groups(entry) or []
        totals.append(len(groups))
        rollouts.append(rollouts_covered(entry))
        if len(groups) > keep:
            entry["group_level_metrics"] = groups[:keep]
    return MetricsFile(entries, totals, rollouts)


def _parse_indented(handle: BinaryIO, keep: int) -> MetricsFile | None:
    scanner = _Scanner(handle)
    kept: list[bytes] = []
    counts: dict[int, tuple[int, int]] = {}
    objects = 0
    while True:
        # the opening line with its newline: a list that is not empty; the newline stays, so every
        # object of the list starts with _GROUP_START
        before, found = scanner.until(_GROUPS_OPEN, leave=1)
        kept.append(before)
        objects += before.count(_ENTRY_START)
        if not found:
            break
        groups, total, rollouts = scanner.region(_GROUPS_CLOSE, _GROUP_START, keep)
        # a cut list ends with the comma that separated its last kept object from the next one
        kept += [_GROUPS_OPEN[:-1], groups.rstrip(b","), _GROUPS_CLOSE]
        counts[objects - 1] = (total, rollouts)  # the list of the object entry opened last
    try:
        entries = _entries(orjson.loads(b"".join(kept)))
    except orjson.JSONDecodeError:
        return None
    if entries is None or len(entries) != objects:
        return None
    each = [counts.get(number, (0, 0)) for number in range(len(entries))]
    return MetricsFile(entries, [total for total, _ in each], [rollouts for _, rollouts in each])


def read_metrics_file(url: str, groups: int | None = None) -> MetricsFile | None:
    """The metrics file at ``url`` as :class:`MetricsFile`, each entry with its first ``groups``
    groups (:data:`GROUP_ROWS` by default); None when it is missing, is not JSON or is not a list."""
    groups = GROUP_ROWS if groups is None else groups
    if not storage.isfile(url):
        return None
    try:
        with storage.open_read(url) as handle:
            head = handle.read(len(_INDENTED))
            if head != _INDENTED:
                return _parse_whole(head + handle.read(), groups)
            handle.seek(0)
            found = _parse_indented(handle, groups)
            if found is not None:
                return found
            # not laid out as the writers lay it out after all (or not JSON): parsed whole
            handle.seek(0)
            return _parse_whole(handle.read(), groups)
    except InputError:
        return None

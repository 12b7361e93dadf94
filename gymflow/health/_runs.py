"""Sorted runs of rows: each byte range's rows, placed and in report order, ready to merge.

A run holds one :class:`Entry` per row: its report-order key, its ``rollout_verdicts.jsonl`` line
as written when no other row shares its identity, and the few facts the summary counts. Runs
built by pool workers live in local files, written and read in small batches, so the process
merging them holds one batch per run, never the rows.
"""

from __future__ import annotations

import heapq
import io
import json
import pickle
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, NamedTuple

import orjson

from gymflow._json_agreement import object_members
from gymflow.health._evaluate import IDENTITY_FIELDS, RowResult, read_identity
from gymflow.health._reading import is_blank, loads
from gymflow.health._vocabulary import CheckId, Finding, Identity, Verdict, VerdictRow
from gymflow.spill import dump_batches, pack_batches, packed, read_batches, unpack_batches

__all__ = [
    "Entry",
    "Placement",
    "SortedRun",
    "merge_entries",
    "needs_placement",
    "RowWriter",
    "read_spilled_rows",
    "row_key",
    "sort_rows",
    "unpack_rows",
    "verdict_key",
    "write_batches",
    "with_duplicates",
]

BATCH = 64
"""Entries (or rows) per pickle in a run file."""

SortKey = tuple[tuple[int, int | str], tuple[int, int | str], tuple[int, int | str]]

_json_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _encode(row: Any) -> str:
    """A verdict line: compact JSON, non-ASCII as is. orjson writes the json module's bytes for
    every value a verdict holds (no float; strings, integers, booleans, null, lists and objects);
    the json module takes what orjson refuses (an integer beyond 64 bits)."""
    try:
        return orjson.dumps(row).decode()
    except TypeError:
        return _json_encode(row)


class Placement(NamedTuple):
    """Where a range's rows stand: its input, that input's name, and the physical lines and rows
    of the input before the range."""

    source_index: int
    source_file: str
    line_offset: int
    ordinal_offset: int


class Entry(NamedTuple):
    """One placed row, as the merge and the summary need it."""

    key: SortKey
    """Report order: task, rollout, stage (integers before strings). Rows with equal keys are
    exactly the rows sharing an identity (``rollout_duplicate_identity``)."""
    line: str
    """The row's verdict line, without its newline."""
    verdict: Verdict
    unobserved: tuple[CheckId, ...]
    checks: tuple[CheckId, ...]
    """The check of each finding, in order."""
    task: Identity
    rollout: Identity
    policy_complete: bool
    successful_calls: int
    position: int
    """The row's number among the rows of its range: input order among equal keys."""


def _order(value: Identity | None) -> tuple[int, int | str]:
    if isinstance(value, int):
        return (0, value)
    return (1, "None" if value is None else value)


def row_key(line: bytes, line_number: int, ordinal: int, source_index: int = 0) -> SortKey | None:
    """The report-order key the row of one input line gets (:attr:`Entry.key`), without checking
    it: ``line_number`` is its physical line in input ``source_index``, ``ordinal`` the number of
    non-blank lines of the inputs before it. None for a blank line (no row)."""
    if is_blank(line):
        return None
    record = _identity_members(line)
    identity, invalid = read_identity(record) if isinstance(record, dict) else ({}, ["record"])
    if invalid:  # an unreadable row: its synthetic task (RowResult.place)
        return (
            _order(f"__unreadable_record__:input-{source_index}:line-{line_number}"),
            _order(0),
            _order(None),
        )
    task = identity["_ng_task_index"]
    rollout = identity["_ng_rollout_index"]
    return (
        _order(ordinal if task is None else task),
        _order(0 if rollout is None else rollout),
        _order(identity["stage_index"]),
    )


_IDENTITY = tuple(name.encode() for name in IDENTITY_FIELDS)


def _identity_members(line: bytes) -> Any:
    """The line's identity members as ``loads(line)`` holds them (None for a line that is not
    JSON): read from their slices when one strict pass in C vouches for the line
    (``object_members``), so a long rollout is not parsed whole for three small values."""
    found = object_members(line, _IDENTITY)
    if found is None:
        try:
            return loads(line)
        except orjson.JSONDecodeError:
            return None
    pairs = zip(IDENTITY_FIELDS, found, strict=True)
    return {name: orjson.loads(line[at]) for name, at in pairs if at is not None}


def verdict_key(row: Mapping[str, Any]) -> SortKey:
    """The report-order key of a ``rollout_verdicts.jsonl`` row (that of the row it judges)."""
    return (_order(row["_ng_task_index"]), _order(row["_ng_rollout_index"]), _order(row.get("stage_index")))


def _verdict(findings: Sequence[Finding], unobserved: Sequence[CheckId]) -> Verdict:
    if findings:
        return "unhealthy"
    return "unobserved" if unobserved else "healthy"


def needs_placement(row: RowResult) -> bool:
    """Whether a row's entry depends on the lines before its range (see :meth:`RowResult.place`):
    an unreadable row, or one without a task index."""
    return row.unreadable is not None or row.task is None


def entry(row: RowResult, position: int) -> Entry:
    """The entry of a placed row (or of one that needs no placement), ``position``-th of its range."""
    assert row.task is not None
    row_verdict = _verdict(row.findings, row.unobserved)
    out: VerdictRow = {
        "_ng_task_index": row.task,
        "_ng_rollout_index": row.rollout,
        "rollout_id": row.rollout_id,
        "verdict": row_verdict,
        "findings": row.findings,
        "unobserved": row.unobserved,
    }
    if row.stage is not None:
        out["stage_index"] = row.stage
    return Entry(
        (_order(row.task), _order(row.rollout), _order(row.stage)),
        _encode(out),
        row_verdict,
        row.unobserved,
        tuple(item["check"] for item in row.findings),
        row.task,
        row.rollout,
        row.policy_complete,
        row.successful_calls,
        position,
    )


def with_duplicates(item: Entry, count: int) -> Entry:
    """``item`` with the ``rollout_duplicate_identity`` finding appended (``count`` rows share its
    identity): its line re-encoded from the line itself, so no row has to be kept for it."""
    out = json.loads(item.line)
    out["findings"].append({"check": "rollout_duplicate_identity", "detail": {"duplicate_count": count}})
    out["verdict"] = "unhealthy"
    return item._replace(
        line=_encode(out), verdict="unhealthy", checks=(*item.checks, "rollout_duplicate_identity")
    )


@dataclass(frozen=True, slots=True)
class SortedRun:
    """A run held in memory (``held``), packed into bytes (``packed``, see :class:`RowWriter`) or
    in the local file ``path``."""

    held: list[Entry] | None = None
    path: str | None = None
    packed: bytes | None = None

    def entries(self) -> Iterator[Entry]:
        if self.held is not None:
            return iter(self.held)
        if self.packed is not None:
            return unpack_batches(self.packed)
        assert self.path is not None
        return read_batches(self.path)


def write_batches(items: Sequence[Any], path: str | None) -> bytes:
    """Write ``items`` to the local file ``path``, or (``path=None``) pack them into the bytes
    returned."""
    if path is None:
        return pack_batches(items, BATCH)
    with open(path, "wb") as handle:
        dump_batches(items, handle, BATCH)
    return b""


class RowWriter:
    """Writes rows, in batches, to a local file, or (``path=None``) packs them into bytes; the
    file is created with the first row."""

    def __init__(self, path: str | None) -> None:
        self._path = path
        self._handle: BinaryIO | None = io.BytesIO() if path is None else None
        self._batch: list[RowResult] = []
        self.packed = b""
        """The rows, once closed, when they were not written to a file (see :func:`unpack_rows`)."""

    def __enter__(self) -> RowWriter:
        return self

    def add(self, row: RowResult) -> None:
        self._batch.append(row)
        if len(self._batch) == BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._batch:
            if self._handle is None:
                assert self._path is not None
                self._handle = open(self._path, "wb")  # noqa: SIM115 - closed by __exit__
            pickle.dump(self._batch, self._handle, protocol=pickle.HIGHEST_PROTOCOL)
        self._batch = []

    def __exit__(self, *exc: object) -> None:
        if self._handle is None and not self._batch:
            return
        try:
            self._flush()
            if isinstance(self._handle, io.BytesIO):
                self.packed = packed(self._handle.getvalue())  # the module's function
        finally:
            assert self._handle is not None
            self._handle.close()


def read_spilled_rows(path: str) -> Iterator[RowResult]:
    """The rows a :class:`RowWriter` wrote to ``path``, one at a time."""
    return read_batches(path)


def unpack_rows(packed: bytes) -> Iterator[RowResult]:
    """The rows a :class:`RowWriter` packed, one at a time."""
    return unpack_batches(packed)


def sort_rows(rows: Iterable[RowResult], placement: Placement, spill: str | None = None) -> SortedRun:
    """Place range-local rows (see :meth:`RowResult.place`), sort their entries into report order
    (input order among equal keys) and keep the run in memory, or write it to ``spill``."""
    source, name, line_offset, ordinal_offset = placement
    entries = []
    for row in rows:
        position = row.ordinal
        row.place(source, name, line_offset, ordinal_offset)
        entries.append(entry(row, position))
    entries.sort(key=lambda item: (item.key, item.position))
    if spill is None:
        return SortedRun(held=entries)
    write_batches(entries, spill)
    return SortedRun(path=spill)


def merge_entries(runs: Sequence[tuple[Iterator[Entry], int]]) -> Iterator[tuple[Entry, int]]:
    """The entries of sorted runs, each with the ordinal of its range's first row, in one sorted
    stream, each with its ordinal (its range's plus its ``position``: the row's number among the
    input rows): by key, then input order.

    Runs of rows written in task order barely overlap, so each run is drained while its entries
    stay below the next run's head: one comparison per entry, the heap only where runs meet.
    """
    iterators = [entries for entries, _ in runs]
    offsets = [offset for _, offset in runs]
    heads: list[Entry | None] = [next(iterator, None) for iterator in iterators]
    heap = [
        (head.key, offsets[index] + head.position, index)
        for index, head in enumerate(heads)
        if head is not None
    ]
    heapq.heapify(heap)
    while heap:
        _, ordinal, index = heapq.heappop(heap)
        head = heads[index]
        assert head is not None
        yield head, ordinal
        offset = offsets[index]
        bound = heap[0] if heap else None
        for item in iterators[index]:
            place = (item.key, offset + item.position, index)
            if bound is None or place < bound:
                yield item, place[1]
                continue
            heads[index] = item
            heapq.heappush(heap, place)
            break

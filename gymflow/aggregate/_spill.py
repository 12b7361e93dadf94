"""Rows kept in local scratch files instead of memory, read back in the order they were written.

A shard's rows are sorted by key (task, rollout) and written as *runs* (a scan whose result is
cached, in Prefect's result store, keeps each run as the bytes such a file would hold: they
pickle as one string, not one object per field, and take a fraction of the rows' memory); the
reduce step merges every shard's runs into the merge order and keeps each group's facts, in that
order (:class:`GroupFacts`: in lists up to a bound on them all, beyond it in a :class:`GroupStore`
each), for the group's metrics to read as often as they need. A file holds pickled
batches of plain tuples (a row costs some tens of bytes there); reading keeps one batch.
"""

from __future__ import annotations

import heapq
import os
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from gymflow import scratch, spill
from gymflow.aggregate._rows import RowFacts, shared_names
from gymflow.aggregate._scan import ScanRow, ShardScan
from gymflow.spill import BatchWriter, pack_batches, read_batches, unpack_batches

__all__ = [
    "GroupFacts", "GroupStore", "merge_order", "pack_run", "read_run", "shard_rows", "sort_key", "spiller",
    "write_run",
]  # fmt: skip

_BATCH = 512


def _facts_tuple(facts: RowFacts) -> tuple[Any, ...]:
    return (
        facts.task, facts.rollout, facts.masked, facts.field_names, facts.field_values,
        facts.info_names, facts.info_values, facts.score, facts.answer,
    )  # fmt: skip


def _facts(item: tuple[Any, ...]) -> RowFacts:
    task, rollout, masked, field_names, field_values, info_names, info_values, score, answer = item
    # Names shared again across batches (the statistics compare layouts by identity).
    return RowFacts(
        task, rollout, masked, shared_names(field_names), field_values,
        shared_names(info_names), info_values, score, answer,
    )  # fmt: skip


def sort_key(row: ScanRow) -> tuple[int, int]:
    return (row.facts.task, row.facts.rollout)


def _run_item(row: ScanRow) -> tuple[Any, ...]:
    return (*_facts_tuple(row.facts), row.group, row.shard, row.place, row.compact)


def write_run(path: str, rows: list[ScanRow]) -> None:
    """Write ``rows`` (one shard's, in line order) to ``path`` sorted by key (stable)."""
    rows.sort(key=sort_key)
    writer = BatchWriter(path, _BATCH)
    try:
        for row in rows:
            writer.add(_run_item(row))
    finally:
        writer.close()


def pack_run(rows: list[ScanRow]) -> bytes:
    """``rows`` (one shard's, in line order) sorted by key (stable), as the bytes of a run file."""
    rows.sort(key=sort_key)
    return pack_batches([_run_item(row) for row in rows], _BATCH)


def read_run(run: str | bytes) -> Iterator[ScanRow]:
    """The rows of a run: a local file, or its bytes."""
    items = unpack_batches(run) if isinstance(run, bytes) else read_batches(run)
    for item in items:
        yield ScanRow.placed(_facts(item[:9]), item[9], item[10], item[11], item[12])


def spiller(directory: str) -> Callable[[list[ScanRow]], str]:
    """What :func:`~gymflow.aggregate._scan.scan_shard` hands its rows to: each call writes a
    new run in ``directory`` and returns its path."""

    def spill(rows: list[ScanRow]) -> str:
        handle, path = tempfile.mkstemp(prefix="run-", suffix=".rows", dir=directory)
        os.close(handle)
        write_run(path, rows)
        return path

    return spill


def _merged(sources: Iterable[Iterable[ScanRow]]) -> Iterator[ScanRow]:
    """Rows of sorted sources in key order; equal keys in source order (then their own)."""
    return heapq.merge(*sources, key=sort_key)


def shard_rows(scan: ShardScan) -> Iterator[ScanRow]:
    """A shard's rows in key order, equal keys in line order (its runs are in line order)."""
    if scan.runs:
        return _merged(read_run(run) for run in scan.runs)
    return iter(sorted(scan.rows, key=sort_key))


def merge_order(scans: Sequence[ShardScan]) -> Iterator[ScanRow]:
    """Every row in merge order: (task, rollout), then shard order, then line order (§1.3)."""
    return _merged(shard_rows(scan) for scan in scans)


def _release(writer: BatchWriter, path: str) -> None:
    writer.abandon()
    scratch.discard(path)


class GroupStore:
    """One group's facts in key order, in a scratch file removed once the store is let go."""

    def __init__(self) -> None:
        handle, path = scratch.scratch_file("aggregate", ".rows")
        os.close(handle)
        self._writer: BatchWriter | None = BatchWriter(path, _BATCH)
        self.path = path
        weakref.finalize(self, _release, self._writer, path)

    def append(self, facts: RowFacts) -> None:
        assert self._writer is not None
        self._writer.add(_facts_tuple(facts))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __iter__(self) -> Iterator[RowFacts]:
        self.close()
        return (_facts(item) for item in read_batches(self.path))


class GroupFacts:
    """Every group's facts, in key order, by group key: in lists while they number at most
    :data:`~gymflow.spill.RUN_ITEMS` in all (or the scans held their rows in memory), else each
    group in a :class:`GroupStore` (the lists held so far are written to theirs). A group's
    metrics read its facts three times: from a list, that costs nothing."""

    def __init__(self, spill: bool) -> None:
        self._spill = spill
        self._held = 0
        self.groups: dict[str, list[RowFacts] | GroupStore] = {}

    def append(self, key: str, facts: RowFacts) -> None:
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = GroupStore() if self._spill and self._held > spill.RUN_ITEMS else []
        if type(group) is list:
            self._held += 1
            if self._spill and self._held > spill.RUN_ITEMS:
                self._store_all()
                group = self.groups[key]
        group.append(facts)

    def _store_all(self) -> None:
        for key, held in self.groups.items():
            if type(held) is list:
                store = self.groups[key] = GroupStore()
                for facts in held:
                    store.append(facts)

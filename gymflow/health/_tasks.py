"""The summary's tasks in its key order, spilled to local files as they come: a run of a million
tasks holds a batch of them at a time, not their keys.

``quality_summary.json`` lists the integer tasks first, sorted by their text, then the text tasks,
sorted; a text task with an integer task's text takes that task's place (one JSON key, the text
task's entry). The merge of the sorted runs yields integer tasks in numeric order and text tasks
in text order: the first are sorted here in spilled runs of :data:`RUN_TASKS`, the second kept in
one file in the order they come.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator
from contextlib import suppress
from typing import BinaryIO

from gymflow import scratch
from gymflow.spill import dump_batches, read_batches

RUN_TASKS = 1 << 14
"""Integer tasks sorted in memory before a run of them is spilled."""
_BATCH = 128

Item = tuple[str, int]
"""A task's key in the summary and the index of its entry (entries are shared between tasks)."""


class TaskSpill:
    """Tasks added in the merge's order (:meth:`add`), read back in the summary's (:meth:`items`);
    :meth:`close` removes its files."""

    def __init__(self) -> None:
        self._ints: list[Item] = []
        self._texts: list[Item] = []
        self._int_runs: list[str] = []
        self._text_file: tuple[BinaryIO, str] | None = None

    def _new_file(self) -> tuple[BinaryIO, str]:
        fd, path = scratch.scratch_file("tasks", ".pickle")
        return os.fdopen(fd, "wb"), path

    def add(self, task: int | str, entry: int) -> None:
        if isinstance(task, int):
            self._ints.append((str(task), entry))
            if len(self._ints) == RUN_TASKS:
                self._spill_ints()
            return
        self._texts.append((task, entry))
        if len(self._texts) == RUN_TASKS:
            self._spill_texts()

    def _spill_ints(self) -> None:
        self._ints.sort()
        handle, path = self._new_file()
        self._int_runs.append(path)
        with handle:
            dump_batches(self._ints, handle, _BATCH)
        self._ints = []

    def _spill_texts(self) -> None:
        if self._text_file is None:
            self._text_file = self._new_file()
        dump_batches(self._texts, self._text_file[0], _BATCH)
        self._texts = []

    def _text_items(self) -> Iterator[Item]:
        if self._text_file is not None:
            yield from read_batches(self._text_file[1])
        yield from self._texts

    def items(self) -> Iterator[Item]:
        """Every task in the summary's order, a text task that shares an integer task's key in
        that task's place (call once, after the last :meth:`add`)."""
        if self._text_file is not None:
            self._text_file[0].close()
        self._ints.sort()
        ints = heapq.merge(*(read_batches(path) for path in self._int_runs), self._ints)
        texts = self._text_items()
        text = next(texts, None)
        replaced: set[str] = set()
        for key, entry in ints:
            while text is not None and text[0] < key:
                text = next(texts, None)
            if text is not None and text[0] == key:
                replaced.add(key)
                entry = text[1]
            yield key, entry
        for key, entry in self._text_items():
            if key not in replaced:
                yield key, entry

    def close(self) -> None:
        paths = list(self._int_runs)
        if self._text_file is not None:
            self._text_file[0].close()
            paths.append(self._text_file[1])
        for path in paths:
            with suppress(FileNotFoundError):
                os.unlink(path)

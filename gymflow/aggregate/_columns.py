"""A group's numeric fields as columns, gathered in one pass over its scored rows.

The statistics of a whole group (aggregate.md §3.3 over every scored row, §3.5 per repeat) need
every value of a field, but not the rows: :func:`survey` keeps each field's values as float64
(8 bytes a value; beyond :data:`CHUNK` values in an unnamed scratch file, written a chunk at a
time) and each row's rollout index, so a group's rows can be read once, in key order, from
wherever they are, and let go. The statistics then load one field at a time. The numbers are those
of :func:`gymflow.aggregate._stats.set_statistics` and of the per-repeat columns, bit for bit.
"""

from __future__ import annotations

import math
import os
import weakref
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from gymflow import scratch
from gymflow.aggregate._numbers import median, pairwise_sum
from gymflow.aggregate._rows import Number, RowFacts
from gymflow.aggregate._stats import emit_statistics, repeat_statistics

__all__ = ["Column", "RepeatBlock", "Survey", "column_statistics", "repeat_blocks", "survey"]

_EXACT = 2**53
"""Integers of at most this magnitude are exact as floats."""


CHUNK = 65_536
"""Values of a column held in memory before they go to its scratch file."""


@dataclass(slots=True, weakref_slot=True)
class Column:
    """One field's values in row order (as floats), and where they are when not in every row."""

    values: array[float] = field(default_factory=lambda: array("d"))
    """The values not yet written to ``spilled`` (all of them while there are few)."""
    count: int = 0
    positions: array[int] | None = None
    """The row (its place among the scored rows) of each value; None while every row has it."""
    raw: list[Number] | None = None
    """The values as they were, once one is an integer that a float cannot hold exactly."""
    spilled: BinaryIO | None = None
    """An unnamed scratch file of the values before ``values``."""

    def add(self, place: int, value: Number) -> None:
        if self.positions is None and place != self.count:
            self.positions = array("q", range(self.count))
        if self.positions is not None:
            self.positions.append(place)
        if self.raw is None and type(value) is int and not -_EXACT <= value <= _EXACT:
            self.raw = list(self.load())
        self.values.append(value)
        self.count += 1
        if self.raw is not None:
            self.raw.append(value)
        elif len(self.values) >= CHUNK:
            if self.spilled is None:
                self.spilled = _unnamed_scratch_file()
                weakref.finalize(self, self.spilled.close)
            self.values.tofile(self.spilled)
            self.values = array("d")

    def load(self) -> array[float]:
        """Every value, in row order."""
        if self.spilled is None:
            return self.values
        loaded = array("d")
        self.spilled.seek(0)
        for _ in range((self.count - len(self.values)) // CHUNK):
            loaded.fromfile(self.spilled, CHUNK)
        loaded.extend(self.values)
        return loaded


def _unnamed_scratch_file() -> BinaryIO:
    """A scratch file already unlinked: it goes with its handle, even when the process is killed."""
    fd, path = scratch.scratch_file("column")
    os.unlink(path)
    return os.fdopen(fd, "w+b")


@dataclass
class _Layout:
    names: tuple[str, ...]
    count: int = 0
    integers: list[bool] = field(default_factory=list)


@dataclass
class Survey:
    """What one pass over a group's scored rows (in key order) gathers."""

    rows: int = 0
    tasks: int = 0
    columns: dict[str, Column] = field(default_factory=dict)
    rollouts: list[int] = field(default_factory=list)
    """Each row's rollout index."""
    fields: list[str] = field(default_factory=list)
    """§3.2 field order (first appearance)."""
    integral: set[str] = field(default_factory=set)
    """Fields every row has as an integer (their max/min print as integers, §3.9)."""


def survey(scored: Iterable[RowFacts]) -> Survey:
    """Read ``scored`` (one group's scored rows, in key order) once."""
    out = Survey()
    layouts: dict[tuple[str, ...], _Layout] = {}
    columns = out.columns
    rollouts = out.rollouts
    place = 0
    task: int | None = None
    for row in scored:
        names = row.field_names
        layout = layouts.get(names)
        if layout is None:
            layout = layouts[names] = _Layout(names, 0, [True] * len(names))
        layout.count += 1
        integers = layout.integers
        for index, (name, value) in enumerate(zip(names, row.field_values, strict=True)):
            if integers[index] and type(value) is not int:
                integers[index] = False
            column = columns.get(name)
            if column is None:
                column = columns[name] = Column()
            column.add(place, value)
        rollouts.append(row.rollout)
        if place == 0 or row.task != task:
            out.tasks += 1
            task = row.task
        place += 1
    out.rows = place
    # Field order: by layout in order of first use, names in layout order; a field is integral
    # when every layout using it has it as an int in every row, and every row uses one.
    order: dict[str, bool] = {}
    counts: dict[str, int] = {}
    for layout in layouts.values():
        for name, flag in zip(layout.names, layout.integers, strict=True):
            order[name] = order.get(name, True) and flag
            counts[name] = counts.get(name, 0) + layout.count
    out.fields = list(order)
    out.integral = {name for name, flag in order.items() if flag and counts[name] == place}
    return out


def _filled(column: Column, values: array[float], rows: int) -> array[float]:
    """The column as a table column holds it: 0.0 in the rows without the field."""
    if column.positions is None:
        return values
    filled = array("d", bytes(8 * rows))
    for place, value in zip(column.positions, values, strict=True):
        filled[place] = value
    return filled


def _statistics(
    column: Column, rows: int, integral: bool
) -> tuple[float, Number, Number, float, float | None]:
    """mean, max, min, median, std (None below 2 values) of a column of at least 8 rows."""
    values = column.load()
    count = len(values)
    average = pairwise_sum(_filled(column, values, rows)) / count
    source: Iterable[Number] = values if column.raw is None else column.raw
    high: Number = max(source)
    low: Number = min(values if column.raw is None else column.raw)
    high, low = (int(high), int(low)) if integral else (float(high), float(low))
    middle_value = median(values)
    if count < 2:
        return average, high, low, middle_value, None
    squares = array("d", ((average - value) * (average - value) for value in values))
    if column.positions is not None:
        spread = array("d", bytes(8 * rows))
        for place, square in zip(column.positions, squares, strict=True):
            spread[place] = square
        squares = spread
    return average, high, low, middle_value, math.sqrt(pairwise_sum(squares) / (count - 1))


def column_statistics(gathered: Survey) -> dict[str, Any]:
    """§3.3 over the surveyed rows (at least 8): ``set_statistics`` of them, from the columns,
    one field loaded at a time."""
    results = [
        (name, _statistics(gathered.columns[name], gathered.rows, name in gathered.integral))
        for name in gathered.fields
    ]
    in_all = [name for name in gathered.fields if gathered.columns[name].count == gathered.rows]
    return emit_statistics(results, in_all)


RepeatBlock = tuple[str, dict[str, Any], list[str]]
"""One field's §3.5 columns in one repeat, with the warnings computing them gave."""


def repeat_blocks(gathered: Survey) -> dict[int, list[RepeatBlock]]:
    """Per rollout index, each field's §3.5 columns over the rows of that rollout. Takes the
    columns out of ``gathered`` one by one: a field's values are loaded, split by rollout and let
    go before the next field's."""
    out: dict[int, list[RepeatBlock]] = {}
    rollouts = gathered.rollouts
    for name in list(gathered.columns):
        column = gathered.columns.pop(name)
        values = column.load()
        places: Iterable[int] = range(len(values)) if column.positions is None else column.positions
        split: dict[int, array[float]] = {}
        for place, value in zip(places, values, strict=True):
            rollout = rollouts[place]
            part = split.get(rollout)
            if part is None:
                part = split[rollout] = array("d")
            part.append(value)
        del values, column
        for rollout, part in split.items():
            notes: list[str] = []
            out.setdefault(rollout, []).append((name, repeat_statistics(name, part, notes), notes))
    return out

"""A group's numeric fields as columns, gathered in one pass over its scored rows.

The statistics of a whole group (aggregate.md §3.3 over every scored row, §3.5 per repeat) need
every value of a field, but not the rows: :func:`survey` keeps each field's values as float64
(8 bytes a value; beyond :data:`CHUNK` values in an unnamed scratch file, written a chunk at a
time) and each row's rollout index, so a group's rows can be read once, in key order, from
wherever they are, and let go. The statistics then load one field at a time. The numbers are
numpy's over a table column of the rows (0.0 where a row lacks the field), bit for bit; any set of
8 rows or more takes them from here (:func:`gymflow.aggregate._stats.set_statistics` too).
"""

from __future__ import annotations

import math
import os
import weakref
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from gymflow import scratch
from gymflow._sums import squared_deviation_sum
from gymflow.aggregate._numbers import median, pairwise_sum
from gymflow.aggregate._rows import Number, RowFacts
from gymflow.aggregate._stats import emit_statistics, repeat_statistics

__all__ = ["Column", "RepeatBlock", "Survey", "column_statistics", "repeat_blocks", "survey"]

_EXACT = 2**53
"""Integers of at most this magnitude are exact as floats."""


CHUNK = 65_536
"""Values of a column held in memory before they go to its scratch file."""

RUN_ROWS = 4096
"""Rows of one layout gathered before their values go to the columns."""


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

    def extend(self, start: int, values: tuple[Number, ...]) -> None:
        """Add ``values``, those of the rows ``start``, ``start + 1``, ... (a run of consecutive
        rows that all have this field)."""
        if self.positions is None and start != self.count:
            self.positions = array("q", range(self.count))
        if self.positions is not None:
            self.positions.extend(range(start, start + len(values)))
        if self.raw is None and _inexact(values):
            self.raw = list(self.load())
        self.values.extend(values)
        self.count += len(values)
        if self.raw is not None:
            self.raw.extend(values)
        elif len(self.values) >= CHUNK:
            if self.spilled is None:
                self.spilled = _unnamed_scratch_file()
                weakref.finalize(self, self.spilled.close)
            held = self.values
            whole = len(held) - len(held) % CHUNK
            held[:whole].tofile(self.spilled)
            self.values = held[whole:]

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


def _inexact(values: tuple[Number, ...]) -> bool:
    """Whether ``values`` hold an integer a float cannot hold exactly. The bounds first (a NaN
    makes ``max`` or ``min`` answer NaN, which fails the test too, never hides a value)."""
    if -_EXACT <= min(values) and max(values) <= _EXACT:
        return False
    return any(type(value) is int and not -_EXACT <= value <= _EXACT for value in values)


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
    rollouts = out.rollouts
    place = 0
    task: int | None = None
    # Consecutive rows with the same fields form a run, whose values go to the columns a field at
    # a time (at most RUN_ROWS rows a run).
    names: tuple[str, ...] | None = None
    layout = _Layout(())
    run: list[tuple[Number, ...]] = []
    start = 0
    for row in scored:
        if row.field_names is not names or len(run) >= RUN_ROWS:
            if run:
                _take(layout, out.columns, start, run)
            names = row.field_names
            found = layouts.get(names)
            if found is None:
                found = layouts[names] = _Layout(names, 0, [True] * len(names))
            layout, run, start = found, [], place
        run.append(row.field_values)
        rollouts.append(row.rollout)
        if place == 0 or row.task != task:
            out.tasks += 1
            task = row.task
        place += 1
    if run:
        _take(layout, out.columns, start, run)
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


def _take(layout: _Layout, columns: dict[str, Column], start: int, run: list[tuple[Number, ...]]) -> None:
    """A run's values (rows ``start``, ``start + 1``, ... of ``layout``) into their columns."""
    layout.count += len(run)
    integers = layout.integers
    for index, (name, values) in enumerate(zip(layout.names, zip(*run, strict=True), strict=True)):
        if integers[index] and {*map(type, values)} != _INT:
            integers[index] = False
        column = columns.get(name)
        if column is None:
            column = columns[name] = Column()
        column.extend(start, values)


_INT = {int}


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
    if column.positions is None:
        spread = squared_deviation_sum(values, average)
    else:  # the squares in their rows, 0.0 in the others, summed in that order
        squares = array("d", bytes(8 * rows))
        for place, value in zip(column.positions, values, strict=True):
            squares[place] = (average - value) * (average - value)
        spread = pairwise_sum(squares)
    return average, high, low, middle_value, math.sqrt(spread / (count - 1))


def column_statistics(
    gathered: Survey, fields: Sequence[str] | None = None, integral: set[str] | None = None
) -> dict[str, Any]:
    """§3.3 over the surveyed rows (at least 8), from the columns, one field loaded at a time: of
    the surveyed fields, or of ``fields`` (those the rows have, in that order) with the integral
    fields ``integral`` (a task's rows, reported with its group's fields)."""
    names = gathered.fields if fields is None else [name for name in fields if name in gathered.columns]
    integers = gathered.integral if integral is None else integral
    results = [(name, _statistics(gathered.columns[name], gathered.rows, name in integers)) for name in names]
    in_all = [name for name in names if gathered.columns[name].count == gathered.rows]
    return emit_statistics(results, in_all)


RepeatBlock = tuple[str, dict[str, Any], list[str]]
"""One field's §3.5 columns in one repeat, with the warnings computing them gave."""


def repeat_blocks(gathered: Survey) -> dict[int, list[RepeatBlock]]:
    """Per rollout index, each field's §3.5 columns over the rows of that rollout. Takes the
    columns out of ``gathered`` one by one (and, when every row has every field, its rollout list):
    a field's values are loaded, split by rollout and let go before the next field's."""
    out: dict[int, list[RepeatBlock]] = {}
    rows = gathered.rows
    rollouts = gathered.rollouts
    # The rows of each rollout index (their places in row order), for the fields every row has;
    # the list of each row's rollout is kept only for a field some rows lack.
    places_of: dict[int, array[int]] = {}
    for place, rollout in enumerate(rollouts):
        places = places_of.get(rollout)
        if places is None:
            places = places_of[rollout] = array("q")
        places.append(place)
    if all(column.count == rows for column in gathered.columns.values()):
        rollouts.clear()
    for name in list(gathered.columns):
        column = gathered.columns.pop(name)
        values = column.load()
        split: dict[int, array[float]] = {}
        if column.count == rows:
            for rollout, places in places_of.items():
                split[rollout] = array("d", map(values.__getitem__, places))
        else:
            held: Iterable[int] = range(len(values)) if column.positions is None else column.positions
            for place, value in zip(held, values, strict=True):
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

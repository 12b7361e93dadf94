"""A group's numeric fields as columns, gathered in one pass over its scored rows.

The statistics of a whole group (aggregate.md §3.3 over every scored row, §3.5 per repeat) need
every value of a field, but not the rows: :func:`survey` keeps each field's values in a typed
array (8 bytes a value) and each row's rollout index, so a group's rows can be read once, in key
order, from wherever they are, and let go. The numbers are those of
:func:`gymflow.aggregate._stats.set_statistics` and of the per-repeat columns, bit for bit.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gymflow.aggregate._numbers import median, pairwise_sum
from gymflow.aggregate._rows import Number, RowFacts
from gymflow.aggregate._stats import emit_statistics

__all__ = ["Column", "Survey", "column_statistics", "repeat_columns", "survey"]

_EXACT = 2**53
"""Integers of at most this magnitude are exact as floats."""


@dataclass(slots=True)
class Column:
    """One field's values in row order (as floats), and where they are when not in every row."""

    values: array[float] = field(default_factory=lambda: array("d"))
    positions: array[int] | None = None
    """The row (its place among the scored rows) of each value; None while every row has it."""
    raw: list[Number] | None = None
    """The values as they were, once one is an integer that a float cannot hold exactly."""

    def add(self, place: int, value: Number) -> None:
        values = self.values
        if self.positions is None and place != len(values):
            self.positions = array("q", range(len(values)))
        if self.positions is not None:
            self.positions.append(place)
        if self.raw is None and type(value) is int and not -_EXACT <= value <= _EXACT:
            self.raw = list(values)
        values.append(value)
        if self.raw is not None:
            self.raw.append(value)


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


def _filled(column: Column, rows: int) -> array[float]:
    """The column as a table column holds it: 0.0 in the rows without the field."""
    if column.positions is None:
        return column.values
    filled = array("d", bytes(8 * rows))
    for place, value in zip(column.positions, column.values, strict=True):
        filled[place] = value
    return filled


def _statistics(
    column: Column, rows: int, integral: bool
) -> tuple[float, Number, Number, float, float | None]:
    """mean, max, min, median, std (None below 2 values) of a column of at least 8 rows."""
    values = column.values
    count = len(values)
    average = pairwise_sum(_filled(column, rows)) / count
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
    """§3.3 over the surveyed rows (at least 8): ``set_statistics`` of them, from the columns."""
    results = [
        (name, _statistics(gathered.columns[name], gathered.rows, name in gathered.integral))
        for name in gathered.fields
    ]
    in_all = [name for name in gathered.fields if len(gathered.columns[name].values) == gathered.rows]
    return emit_statistics(results, in_all)


def repeat_columns(gathered: Survey) -> dict[int, dict[str, array[float]]]:
    """Per rollout index, each field's values in the rows of that rollout (in row order). Takes
    the columns out of ``gathered`` one by one (a field's values are held once, not twice)."""
    out: dict[int, dict[str, array[float]]] = {}
    rollouts = gathered.rollouts
    for name in list(gathered.columns):
        column = gathered.columns.pop(name)
        places: Iterable[int] = range(len(column.values)) if column.positions is None else column.positions
        for place, value in zip(places, column.values, strict=True):
            rollout = rollouts[place]
            by_field = out.get(rollout)
            if by_field is None:
                by_field = out[rollout] = {}
            values = by_field.get(name)
            if values is None:
                values = by_field[name] = array("d")
            values.append(value)
    return out

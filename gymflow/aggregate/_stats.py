"""Statistics blocks of aggregate.md §3.3 (a row set), §3.5 (a repeat) and §3.6 (across repeats).

Pure functions over numbers; no I/O. Values follow numpy/pandas rounding (see ``_numbers``):
a row set is summed as a pandas column would be, with absent values filled by 0.0 in place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from gymflow._sums import small_statistics
from gymflow.aggregate._numbers import (
    mean,
    median,
    percentiles,
    sample_std,
    sequential_sum,
    t975,
)
from gymflow.aggregate._rows import RowFacts
from gymflow.ranks import at_ranks

__all__ = [
    "NON_PRIMARY_NAMES",
    "UniformPlan",
    "across_repeats",
    "emit_statistics",
    "is_primary_metric",
    "repeat_statistics",
    "set_statistics",
    "uniform_plan",
    "uniform_small_statistics",
    "zero_sem_warning",
]

Number = int | float


def _present(rows: Sequence[RowFacts], fields: Sequence[str]) -> dict[str, list[Number]]:
    """Per field, the values of the rows that have it, in row order."""
    columns: dict[str, list[Number]] = {name: [] for name in fields}
    for row in rows:
        for name, value in zip(row.field_names, row.field_values, strict=True):
            column = columns.get(name)
            if column is not None:
                column.append(value)
    return columns


_KEYS: dict[str, tuple[str, str, str, str, str]] = {}


def _keys(name: str) -> tuple[str, str, str, str, str]:
    keys = _KEYS.get(name)
    if keys is None:
        keys = (f"mean/{name}", f"max/{name}", f"min/{name}", f"median/{name}", f"std/{name}")
        _KEYS[name] = keys
    return keys


def _small_stats(
    values: Sequence[Number], integral: bool
) -> tuple[float, Number, Number, float, float | None]:
    """mean, max, min, median, std (None below 2 values) of fewer than 8 values: in C
    (:func:`gymflow._sums.small_statistics`), or by :func:`_small_stats_here` for the values it
    leaves (a NaN, an integer beyond 2**53), with the same result."""
    found = small_statistics(values, integral)
    return _small_stats_here(values, integral) if found is None else found


def _small_stats_here(
    values: Sequence[Number], integral: bool
) -> tuple[float, Number, Number, float, float | None]:
    """:func:`_small_stats` in Python.

    Below 8 values numpy's pairwise sum is a left-to-right loop, and the zeros a pandas column
    holds for rows without the field change nothing in it: summing the present values is exact.
    """
    floats = list(map(float, values))
    count = len(floats)
    average = sequential_sum(floats) / count
    high, low = max(values), min(values)
    if not integral:
        high, low = float(high), float(low)
    ordered = sorted(floats)
    middle = count // 2
    middle_value = ordered[middle] if count % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0
    if count < 2:
        return average, high, low, middle_value, None
    spread = sequential_sum([(average - value) * (average - value) for value in floats])
    return average, high, low, middle_value, math.sqrt(spread / (count - 1))


def set_statistics(rows: Sequence[RowFacts], fields: Sequence[str], integral: set[str]) -> dict[str, Any]:
    """§3.3: ``mean/``, ``max/``, ``min/``, ``median/``, ``std/`` (stat by stat) over a set of rows.

    Sums run over the column with 0.0 where a row lacks the field, as a pandas column reduces
    (numpy's pairwise summation): from typed columns for 8 rows or more
    (:func:`gymflow.aggregate._columns.column_statistics`); small sets (a task's rows) take an
    exact shortcut.
    """
    n = len(rows)
    if n >= 8:
        from gymflow.aggregate._columns import column_statistics, survey  # it builds on this module

        return column_statistics(survey(rows), fields, integral)
    results: list[tuple[str, tuple[float, Number, Number, float, float | None]]] = []
    in_all: list[str] = []
    layout = rows[0].field_names if rows else ()
    if all(row.field_names is layout for row in rows):
        # Every row has the same fields (the usual case): transpose in C.
        transposed = dict(zip(layout, zip(*(row.field_values for row in rows), strict=True), strict=True))
        for name in fields:
            picked = transposed.get(name)
            if picked is not None:
                results.append((name, _small_stats(picked, name in integral)))
                in_all.append(name)
    else:
        for name, values in _present(rows, fields).items():
            if values:
                results.append((name, _small_stats(values, name in integral)))
                if len(values) == n:
                    in_all.append(name)
    return emit_statistics(results, in_all)


Statistics = tuple[float, Number, Number, float, float | None]


def emit_statistics(results: Sequence[tuple[str, Statistics]], in_all: Sequence[str]) -> dict[str, Any]:
    """The §3.3 keys of (field, (mean, max, min, median, std)) pairs, stat by stat; ``in_all``:
    the fields every row has (they get ``std/`` 0.0 when no field has a std)."""
    any_std = any(stats[4] is not None for _, stats in results)
    out: dict[str, Any] = {}
    for position in range(4):
        for name, stats in results:
            out[_keys(name)[position]] = stats[position]
    for name, stats in results:
        if any_std:
            if stats[4] is not None:
                out[_keys(name)[4]] = stats[4]
        elif name in in_all:
            out[_keys(name)[4]] = 0.0
    return out


UniformPlan = list[tuple[int, bool, tuple[str, str, str, str, str]]]


def uniform_plan(layout: tuple[str, ...], fields: Sequence[str], integral: set[str]) -> UniformPlan:
    """For rows that all share ``layout``: (position, integral, keys) per field, in field order."""
    position = {name: index for index, name in enumerate(layout)}
    return [(position[name], name in integral, _keys(name)) for name in fields if name in position]


def uniform_small_statistics(rows: Sequence[RowFacts], plan: UniformPlan, out: dict[str, Any]) -> None:
    """:func:`set_statistics` for fewer than 8 rows that all share one layout (same result),
    added to ``out``."""
    columns = list(zip(*(row.field_values for row in rows), strict=True))
    stats = [(keys, _small_stats(columns[position], integral)) for position, integral, keys in plan]
    for index in range(4):
        for keys, values in stats:
            out[keys[index]] = values[index]
    for keys, values in stats:
        std = values[4]
        out[keys[4]] = 0.0 if std is None else std


def zero_sem_warning(count: int) -> str:
    return (
        f"Standard error is 0 (all {count} values are identical) -- confidence interval collapses "
        "to a single point rather than being computed."
    )


def _interval(average: float, sem: float, count: int, warnings: list[str]) -> tuple[float, float]:
    if sem == 0.0:
        warnings.append(zero_sem_warning(count))
        return average, average
    half = t975(count - 1) * sem
    return average - half, average + half


def repeat_statistics(name: str, values: Sequence[float], warnings: list[str]) -> dict[str, Any]:
    """§3.5 columns of one field in one repeat, over its n >= 1 values (an entry lists its fields
    sorted by name)."""
    out: dict[str, Any] = {}
    count = len(values)
    average = mean(values)
    std = sample_std(values) if count >= 2 else 0.0
    sem = std / math.sqrt(count)
    lowest, highest = at_ranks(values, [0, count - 1])
    p25, p75 = percentiles(values, [0.25, 0.75])
    out[f"mean/{name}"] = average
    out[f"median/{name}"] = median(values)
    out[f"std/{name}"] = std
    out[f"sem/{name}"] = sem
    out[f"min/{name}"] = lowest
    out[f"max/{name}"] = highest
    out[f"p25/{name}"] = p25
    out[f"p75/{name}"] = p75
    if count >= 2:
        low, high = _interval(average, sem, count, warnings)
        out[f"ci_low_95/{name}"] = low
        out[f"ci_high_95/{name}"] = high
    return out


NON_PRIMARY_NAMES = frozenset(
    {
        "_ng_task_index",
        "_ng_rollout_index",
        "_ng_attempt_index",
        "sample_count",
        "missing_count",
        "num_repeats",
        "token_usage_version",
    }
)
_NON_PRIMARY_PREFIXES = (
    "max/",
    "min/",
    "median/",
    "std/",
    "sem/",
    "se/",
    "p25/",
    "p75/",
    "ci_low_95/",
    "ci_high_95/",
    "histogram/",
)
_NON_PRIMARY_SUFFIXES = (
    "/max",
    "/min",
    "/median",
    "/p5",
    "/p25",
    "/p75",
    "/p95",
    "/ci_low_95",
    "/ci_high_95",
    "/ci_lower",
    "/ci_upper",
    "_ci_lower",
    "_ci_upper",
    "_ci95_lower",
    "_ci95_upper",
    "/_ng_attempt_index",
    "/std_dev_across_runs",
    "/std_err_across_runs",
    "/avg_sample_std_dev",
)


def is_primary_metric(name: str) -> bool:
    """§3.6: whether a repeat column gets ``*_across_repeats/`` aggregates."""
    return not (
        name in NON_PRIMARY_NAMES
        or name.startswith(_NON_PRIMARY_PREFIXES)
        or name.endswith(_NON_PRIMARY_SUFFIXES)
        or "_across_repeats/" in name
    )


def across_repeats(repeats: Sequence[dict[str, Any]], warnings: list[str]) -> dict[str, Any]:
    """§3.6: aggregates over the repeat objects of every numeric primary column."""
    columns: dict[str, list[float]] = {}
    for repeat in repeats:
        for name, value in repeat.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not is_primary_metric(name):
                continue
            columns.setdefault(name, []).append(float(value))
    out: dict[str, Any] = {}
    for name, values in columns.items():
        count = len(values)
        average = mean(values)
        std = sample_std(values) if count >= 2 else 0.0
        se = std / math.sqrt(count)
        out[f"mean_across_repeats/{name}"] = average
        out[f"median_across_repeats/{name}"] = median(values)
        out[f"std_across_repeats/{name}"] = std
        out[f"min_across_repeats/{name}"] = min(values)
        out[f"max_across_repeats/{name}"] = max(values)
        out[f"se_across_repeats/{name}"] = se
        if count >= 2:
            low, high = _interval(average, se, count, warnings)
            out[f"ci_low_95_across_repeats/{name}"] = low
            out[f"ci_high_95_across_repeats/{name}"] = high
    return out

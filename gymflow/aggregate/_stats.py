"""Statistics blocks of aggregate.md §3.3 (a row set), §3.5 (a repeat) and §3.6 (across repeats).

Pure functions over numbers; no I/O. Values follow numpy/pandas rounding (see ``_numbers``):
a row set is summed as a pandas column would be, with absent values filled by 0.0 in place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from gymflow.aggregate._numbers import mean, median, pairwise_sum, percentile, sample_std, t975
from gymflow.aggregate._rows import RowFacts

__all__ = [
    "NON_PRIMARY_NAMES",
    "across_repeats",
    "discover_fields",
    "is_primary_metric",
    "repeat_statistics",
    "set_statistics",
    "zero_sem_warning",
]

Number = int | float


def discover_fields(rows: Sequence[RowFacts]) -> tuple[list[str], set[str]]:
    """Numeric field names in order of first appearance, and those that stay integers.

    A field "stays an integer" when every row of the set has it as an int (bools already 0/1): the
    reference's column then keeps an integer dtype, so its max/min print as integers (§3.9).
    """
    order: dict[str, bool] = {}
    counts: dict[str, int] = {}
    for row in rows:
        for name, value in zip(row.field_names, row.field_values, strict=True):
            if name not in order:
                order[name] = True
                counts[name] = 0
            counts[name] += 1
            if not isinstance(value, int):
                order[name] = False
    integral = {name for name, flag in order.items() if flag and counts[name] == len(rows)}
    return list(order), integral


def _columns(rows: Sequence[RowFacts], fields: Sequence[str]) -> dict[str, list[Number | None]]:
    """Per field, its value in each row of the set (None where the row lacks it)."""
    columns: dict[str, list[Number | None]] = {name: [None] * len(rows) for name in fields}
    for index, row in enumerate(rows):
        for name, value in zip(row.field_names, row.field_values, strict=True):
            column = columns.get(name)
            if column is not None:
                column[index] = value
    return columns


def _present(rows: Sequence[RowFacts], fields: Sequence[str]) -> dict[str, list[Number]]:
    """Per field, the values of the rows that have it, in row order."""
    columns: dict[str, list[Number]] = {name: [] for name in fields}
    for row in rows:
        for name, value in zip(row.field_names, row.field_values, strict=True):
            column = columns.get(name)
            if column is not None:
                column.append(value)
    return columns


def _small_sum(values: Sequence[float]) -> float:
    total = 0.0
    for value in values:
        total += value
    return total


def set_statistics(rows: Sequence[RowFacts], fields: Sequence[str], integral: set[str]) -> dict[str, Any]:
    """§3.3: ``mean/``, ``max/``, ``min/``, ``median/``, ``std/`` (stat by stat) over a set of rows.

    Sums run over the column with 0.0 where a row lacks the field, as a pandas column reduces.
    Below 8 rows numpy's pairwise sum is a plain left-to-right loop, where adding those zeros
    changes nothing, so small sets (every task of a group) skip building the filled column.
    """
    n = len(rows)
    small = n < 8
    columns: dict[str, list[Number | None]] = {} if small else _columns(rows, fields)
    present_columns = _present(rows, fields) if small else {}
    means: dict[str, float] = {}
    maxima: dict[str, Number] = {}
    minima: dict[str, Number] = {}
    medians: dict[str, float] = {}
    stds: dict[str, float] = {}
    in_all: list[str] = []
    for name in fields:
        if small:
            present = present_columns[name]
            floats = [float(value) for value in present]
            count = len(present)
            if count == 0:
                continue
            average = _small_sum(floats) / count
        else:
            column = columns[name]
            present = [value for value in column if value is not None]
            count = len(present)
            if count == 0:
                continue
            filled = [0.0 if value is None else float(value) for value in column]
            average = pairwise_sum(filled) / count
            floats = [float(value) for value in present]
        if count == n:
            in_all.append(name)
        means[name] = average
        high, low = max(present), min(present)
        maxima[name] = high if name in integral else float(high)
        minima[name] = low if name in integral else float(low)
        medians[name] = median(floats)
        if count >= 2:
            if small:
                spread = _small_sum([(average - value) * (average - value) for value in floats])
            else:
                spread = pairwise_sum(
                    [
                        0.0 if raw is None else (average - value) * (average - value)
                        for raw, value in zip(column, filled, strict=True)
                    ]
                )
            stds[name] = math.sqrt(spread / (count - 1))
    if not stds:
        stds = {name: 0.0 for name in in_all}
    out: dict[str, Any] = {}
    for prefix, block in (
        ("mean", means),
        ("max", maxima),
        ("min", minima),
        ("median", medians),
        ("std", stds),
    ):
        for name, value in block.items():
            out[f"{prefix}/{name}"] = value
    return out


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


def repeat_statistics(values_by_field: dict[str, list[float]], warnings: list[str]) -> dict[str, Any]:
    """§3.5 columns of one repeat: per field (sorted by name) over its n >= 1 values."""
    out: dict[str, Any] = {}
    for name in sorted(values_by_field):
        values = values_by_field[name]
        count = len(values)
        if count == 0:
            continue
        average = mean(values)
        std = sample_std(values) if count >= 2 else 0.0
        sem = std / math.sqrt(count)
        ordered = sorted(values)
        out[f"mean/{name}"] = average
        out[f"median/{name}"] = median(values)
        out[f"std/{name}"] = std
        out[f"sem/{name}"] = sem
        out[f"min/{name}"] = ordered[0]
        out[f"max/{name}"] = ordered[-1]
        out[f"p25/{name}"] = percentile(ordered, 0.25)
        out[f"p75/{name}"] = percentile(ordered, 0.75)
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

"""Floating-point primitives with numpy's rounding behaviour.

NeMo Gym 0.7.0 computes its statistics with numpy/pandas. To equal its numbers to the last bit
without depending on numpy, sums use numpy's pairwise summation (blocks of 8 partial sums, split
at 128 elements; in C, :mod:`gymflow._sums`), the sample standard deviation is numpy's two-pass
formula, and percentiles use numpy's "linear" interpolation (shared with ``gymflow.perf_summary``).
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Callable, Iterable, Sequence

from gymflow import _sums, ranks
from gymflow.aggregate._tdist import T975
from gymflow.perf_summary import percentiles

__all__ = ["mean", "median", "pairwise_sum", "percentiles", "sample_std", "sequential_sum", "t975"]

_Z975 = 1.959963984540054


def _loop_sum(values: Iterable[float]) -> float:
    total = 0.0
    for value in values:
        total += value
    return total


# Left-to-right double addition, the rounding numpy's inner loops have. Python's ``sum`` does exactly
# that for floats up to 3.11 (in C, fast); from 3.12 on it compensates rounding errors, so use a loop.
sequential_sum: Callable[[Iterable[float]], float] = sum if sys.version_info < (3, 12) else _loop_sum


def _doubles(values: Sequence[float]) -> array[float]:
    return values if isinstance(values, array) and values.typecode == "d" else array("d", values)


def pairwise_sum(values: Sequence[float]) -> float:
    """Sum as ``numpy.sum`` does for a float64 array (same rounding; in C, :mod:`gymflow._sums`)."""
    return _sums.pairwise_sum(_doubles(values))


def mean(values: Sequence[float]) -> float:
    """``numpy.mean``: pairwise sum divided by the count."""
    return pairwise_sum(values) / len(values)


def median(values: Sequence[float]) -> float:
    """Middle value, or the mean of the two middle values for an even count (as ``numpy.median``)."""
    return float(ranks.median(values))


def sample_std(values: Sequence[float]) -> float:
    """Sample standard deviation (n - 1 denominator), numpy's two-pass formula; needs n >= 2."""
    doubles = _doubles(values)
    n = len(doubles)
    average = _sums.pairwise_sum(doubles) / n
    return math.sqrt(_sums.squared_deviation_sum(doubles, average) / (n - 1))


def t975(df: int) -> float:
    """0.975 quantile of Student's t with ``df`` >= 1 degrees of freedom (scipy's value up to df 1000)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(T975):
        return T975[df - 1]
    z = _Z975
    z2 = z * z
    g1 = (z2 * z + z) / 4
    g2 = ((5 * z2 + 16) * z2 + 3) * z / 96
    g3 = (((3 * z2 + 19) * z2 + 17) * z2 - 15) * z / 384
    g4 = ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) * z / 92160
    nu = float(df)
    return z + g1 / nu + g2 / nu**2 + g3 / nu**3 + g4 / nu**4

"""Sums of float64 buffers with numpy's rounding, and the statistics of a few values built on
them, in C (``_sums.c``)."""

from array import array
from collections.abc import Iterable

def pairwise_sum(values: array[float], /) -> float:
    """``numpy.add.reduce`` of a float64 ('d') buffer: 0.0 plus numpy's pairwise sum. TypeError
    for another item type."""

def squared_deviation_sum(values: array[float], center: float, /) -> float:
    """``numpy.add.reduce`` of ``(center - values) ** 2`` over a float64 ('d') buffer, each
    square rounded on its own."""

def small_statistics(
    values: Iterable[object], integral: bool, /
) -> tuple[float, int | float, int | float, float, float | None] | None:
    """``(mean, max, min, median, std)`` of 1 to 7 ints and floats (any iterable) as
    ``gymflow.aggregate._stats`` computes them (std None for one value; max and min as they are
    when ``integral``, else floats), or None for values it leaves to Python: another count or
    type, a NaN, an integer beyond 2**53."""

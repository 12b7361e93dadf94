"""Sums of float64 buffers with numpy's rounding, in C (``_sums.c``)."""

from array import array

def pairwise_sum(values: array[float], /) -> float:
    """``numpy.add.reduce`` of a float64 ('d') buffer: 0.0 plus numpy's pairwise sum. TypeError
    for another item type."""

def squared_deviation_sum(values: array[float], center: float, /) -> float:
    """``numpy.add.reduce`` of ``(center - values) ** 2`` over a float64 ('d') buffer, each
    square rounded on its own."""

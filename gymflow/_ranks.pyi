"""Order statistics of a numeric buffer, in C (``_ranks.c``)."""

from array import array
from typing import Any

def at_ranks(values: array[Any], ranks: tuple[int, ...], /) -> tuple[float | int, ...]:
    """``sorted(values)[rank]`` for each rank, for a buffer of float64 ('d') or int64 ('q')
    values (a zero keeps the sign ``sorted``'s stable order gives it). ValueError for a NaN,
    IndexError for a rank outside, TypeError for another item type."""

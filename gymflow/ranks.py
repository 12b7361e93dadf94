"""Order statistics: the values ``sorted(values)`` holds at a few ranks, without sorting.

A typed array of float64 or int64 values is read by a selection in C (:mod:`gymflow._ranks`:
a copy of 8 bytes a value, expected linear time) rather than sorted into a list of Python objects
(about 32 bytes a value, and n log n); anything else, and an array holding a NaN, is sorted as
before. Either way the answer is ``sorted``'s, value, type and sign of zero alike.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from gymflow import _ranks

__all__ = ["at_ranks", "median"]

Number = int | float


def at_ranks(values: Sequence[Number], ranks: Sequence[int]) -> list[Number]:
    """``[sorted(values)[rank] for rank in ranks]``, each rank in ``range(len(values))``."""
    if isinstance(values, array) and values.typecode in ("d", "q"):
        try:
            return list(_ranks.at_ranks(values, tuple(ranks)))
        except ValueError:  # a NaN: its place is wherever sorted's comparisons leave it
            pass
    ordered = sorted(values)
    return [ordered[rank] for rank in ranks]


def median(values: Sequence[Number]) -> Number:
    """``statistics.median``: the middle value (of its type), or the halved sum of the two middle
    ones (for floats, ``numpy.median`` too)."""
    middle = len(values) // 2
    if len(values) % 2:
        return at_ranks(values, [middle])[0]
    low, high = at_ranks(values, [middle - 1, middle])
    return (low + high) / 2

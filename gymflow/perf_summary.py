"""`perf_summary`: the efficiency block of an aggregate-metrics entry (evidence.md §10, aggregate.md §3.8).

One implementation, shared by `eval aggregate` (one summary per group) and `eval join` (one summary
over all output rows). Two ways in:

* :func:`perf_summary` takes one item per row -- the row's ``ng_perf`` object, or ``None`` when the row
  has none (or it is not an object) -- and returns the summary dict, or ``None`` when there are no rows
  or no row has an ``ng_perf`` object::

      perf_summary([{"num_turns": 2, "completion_tokens": 30}, None])
      # {"overall_observability_coverage": 0.5, "token_observability_coverage": 0.0, ...}

* :class:`PerfAccumulator` does the same incrementally (``add`` per row, ``merge`` partial
  accumulators of shards, ``result()`` at the end). It keeps only the numbers the summary needs, never
  the records, so memory does not grow with payload size.

Rules (NeMo Gym 0.7.0): a value is numeric when it is an int or a float, booleans included; key order
is coverage, then for each token field with a value ``mean_``/``median_``/``total_``, then the
``num_turns`` statistics (``std`` is the population standard deviation), then tokens per turn (rows
with numeric ``completion_tokens`` and ``num_turns`` > 0), then latency percentiles (linear
interpolation at position q·(n − 1), as numpy's default). Keys without data are absent.
"""

from __future__ import annotations

import math
import statistics
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeGuard

from gymflow.ranks import at_ranks, median

__all__ = ["TOKEN_FIELDS", "Column", "PerfAccumulator", "percentiles", "perf_summary"]

TOKEN_FIELDS: tuple[str, ...] = (
    "prompt_tokens",
    "cached_prompt_tokens",
    "completion_tokens",
    "reasoning_tokens",
)

Number = int | float


def _is_number(value: object) -> TypeGuard[int | float]:
    # bool is an int subclass: counted as a number, as the reference does.
    return isinstance(value, int | float)


def percentiles(values: Sequence[Number], quantiles: Sequence[float]) -> list[float]:
    """Linear-interpolation percentile at position ``q * (n - 1)`` of ``values``, for each ``q``.

    Bit-compatible with ``numpy.percentile(values, 100 * q)`` (its default "linear" method, including
    numpy's two-sided interpolation formula).
    """
    n = len(values)
    if n == 0:
        raise ValueError("percentile of no values")
    places = []
    for q in quantiles:
        position = (n - 1) * q
        below = math.floor(position)
        places.append((min(below, n - 1), min(below + 1, n - 1), position - below))
    found = at_ranks(values, [rank for below, above, _ in places for rank in (below, above)])
    out = []
    for index, (_, _, gamma) in enumerate(places):
        lower, upper = float(found[2 * index]), float(found[2 * index + 1])
        diff = upper - lower
        out.append(upper - diff * (1 - gamma) if gamma >= 0.5 else lower + diff * gamma)
    return out


class Column:
    """The numbers of one statistic in the order added, 8 bytes each while they are all floats
    or all 64-bit integers (``array``), a list of the values themselves once they mix types (or
    hold a boolean or a larger integer); read back, every value is the one added, of its type."""

    __slots__ = ("values", "_kind")

    def __init__(self) -> None:
        self.values: array[Any] | list[Number] = array("d")
        self._kind: type | None = None
        """The type every value has while they are in an array (None: empty, or a list)."""

    def append(self, value: Number) -> None:
        if type(value) is self._kind:
            try:
                self.values.append(value)
                return
            except OverflowError:  # an integer beyond 64 bits
                pass
        values = self.values
        if isinstance(values, array):
            kind = type(value)
            if not values and (kind is float or (kind is int and -(2**63) <= value < 2**63)):
                values = self.values = array("d" if kind is float else "q")
                self._kind = kind
            else:
                values = self.values = list(values)
                self._kind = None
        values.append(value)

    def extend(self, other: Column) -> None:
        values, more = self.values, other.values
        if not more:
            return
        if not values:
            self.values = array(more.typecode, more) if isinstance(more, array) else list(more)
            self._kind = other._kind
        elif isinstance(values, list):
            values.extend(more)
        elif isinstance(more, array) and more.typecode == values.typecode:
            values.extend(more)
        else:
            self.values = [*values, *more]
            self._kind = None

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Number]:
        return iter(self.values)


class PerfAccumulator:
    """Incremental ``perf_summary``: ``add`` one row's ``ng_perf`` (or None), ``merge`` partials.
    Each statistic's numbers are kept in a :class:`Column` (a million rows' seven numbers: 56 MB,
    not about 220 MB of Python objects)."""

    __slots__ = ("_rows", "_records", "_token_observed", "_tokens", "_turns", "_per_turn", "_latency")

    def __init__(self) -> None:
        self._rows = 0
        self._records = 0
        self._token_observed = 0
        self._tokens: dict[str, Column] = {name: Column() for name in TOKEN_FIELDS}
        self._turns = Column()
        self._per_turn = Column()
        self._latency = Column()

    def add(self, ng_perf: object) -> None:
        """Count one row; ``ng_perf`` is its ``ng_perf`` value (anything but a mapping counts as absent)."""
        self._rows += 1
        if not isinstance(ng_perf, Mapping):
            return
        self._records += 1
        coverage = ng_perf.get("token_observability_coverage")
        if _is_number(coverage) and coverage > 0:
            self._token_observed += 1
        for name in TOKEN_FIELDS:
            value = ng_perf.get(name)
            if _is_number(value):
                self._tokens[name].append(value)
        turns = ng_perf.get("num_turns")
        if _is_number(turns):
            self._turns.append(turns)
            completion = ng_perf.get("completion_tokens")
            if turns > 0 and _is_number(completion):
                self._per_turn.append(completion / turns)
        latency = ng_perf.get("total_latency_ms")
        if _is_number(latency):
            self._latency.append(latency)

    def merge(self, other: PerfAccumulator) -> None:
        """Append another accumulator's rows after this one's (order matters only for ties in sums)."""
        self._rows += other._rows
        self._records += other._records
        self._token_observed += other._token_observed
        for name in TOKEN_FIELDS:
            self._tokens[name].extend(other._tokens[name])
        self._turns.extend(other._turns)
        self._per_turn.extend(other._per_turn)
        self._latency.extend(other._latency)

    @property
    def rows(self) -> int:
        return self._rows

    def result(self) -> dict[str, Any] | None:
        """The summary dict, or None when no row was added or none had an ``ng_perf`` object."""
        if self._rows == 0 or self._records == 0:
            return None
        out: dict[str, Any] = {
            "overall_observability_coverage": self._records / self._rows,
            "token_observability_coverage": self._token_observed / self._rows,
        }
        for name, values in self._tokens.items():
            if values:
                out[f"mean_{name}"] = statistics.fmean(values)
                out[f"median_{name}"] = median(values.values)
                out[f"total_{name}"] = sum(values)
        if self._turns:
            turns = self._turns
            lowest, highest = at_ranks(turns.values, [0, len(turns) - 1])
            out["mean_num_turns"] = statistics.fmean(turns)
            out["median_num_turns"] = median(turns.values)
            out["std_num_turns"] = float(statistics.pstdev(turns))
            out["min_num_turns"] = lowest
            out["p90_num_turns"] = percentiles(turns.values, [0.9])[0]
            out["max_num_turns"] = highest
        if self._per_turn:
            out["mean_tokens_per_turn"] = statistics.fmean(self._per_turn)
            out["median_tokens_per_turn"] = median(self._per_turn.values)
        if self._latency:
            p50, p90, p99 = percentiles(self._latency.values, [0.5, 0.9, 0.99])
            out["total_latency_p50_ms"] = p50
            out["total_latency_p90_ms"] = p90
            out["total_latency_p99_ms"] = p99
            out["total_latency_mean_ms"] = statistics.fmean(self._latency)
        return out


def perf_summary(ng_perfs: Iterable[object]) -> dict[str, Any] | None:
    """Summarise the ``ng_perf`` objects of a group of rows: one item per row, None for a row without.

    Returns None when there are no rows or no item is a mapping (evidence.md §10).
    """
    accumulator = PerfAccumulator()
    for item in ng_perfs:
        accumulator.add(item)
    return accumulator.result()

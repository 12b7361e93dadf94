"""The perf summary's number columns: compact while their values share a type, and the summary
the same, value for value and type for type, as over plain lists of the values added."""

from __future__ import annotations

import pickle
import random
import statistics
from array import array
from typing import Any

from gymflow.perf_summary import TOKEN_FIELDS, Column, PerfAccumulator, percentiles


def _column(*values: Any) -> Column:
    column = Column()
    for value in values:
        column.append(value)
    return column


def test_a_column_keeps_each_value_and_its_type() -> None:
    floats = _column(1.5, -0.0, 2.0).values
    assert isinstance(floats, array) and floats.typecode == "d"
    ints = _column(3, -(2**63), 2**63 - 1).values
    assert isinstance(ints, array) and ints.typecode == "q"
    for values in [(1, 2.5), (2.5, 1), (True, 1), (1, 2**63), (2**70,), (1.0, False)]:
        column = _column(*values)
        assert isinstance(column.values, list)
        assert [(type(v), v) for v in column] == [(type(v), v) for v in values]
    assert [repr(v) for v in _column(-0.0, float("inf"))] == ["-0.0", "inf"]


def test_extending_columns_keeps_order_and_types() -> None:
    cases = [((1, 2), (3,)), ((1.5,), (2.5,)), ((1,), (2.5,)), ((), (True,)), ((2.5,), ()), ((), ())]
    for first, second in cases:
        merged = _column(*first)
        merged.extend(_column(*second))
        assert [(type(v), v) for v in merged] == [(type(v), v) for v in (*first, *second)]
    copy = pickle.loads(pickle.dumps(_column(1, 2)))
    assert list(copy) == [1, 2]


def _reference(items: list[Any]) -> dict[str, Any] | None:
    """The summary over plain lists, as the accumulator computed it before its columns."""
    records = [item for item in items if isinstance(item, dict)]
    if not items or not records:
        return None

    def numbers(name: str) -> list[Any]:
        return [r[name] for r in records if isinstance(r.get(name), int | float)]

    out: dict[str, Any] = {
        "overall_observability_coverage": len(records) / len(items),
        "token_observability_coverage": sum(
            1
            for r in records
            if isinstance(r.get("token_observability_coverage"), int | float)
            and r["token_observability_coverage"] > 0
        )
        / len(items),
    }
    for name in TOKEN_FIELDS:
        values = numbers(name)
        if values:
            out[f"mean_{name}"] = statistics.fmean(values)
            out[f"median_{name}"] = statistics.median(values)
            out[f"total_{name}"] = sum(values)
    turns = numbers("num_turns")
    if turns:
        ordered = sorted(turns)
        out |= {
            "mean_num_turns": statistics.fmean(turns),
            "median_num_turns": statistics.median(turns),
            "std_num_turns": float(statistics.pstdev(turns)),
            "min_num_turns": ordered[0],
            "p90_num_turns": percentiles(turns, [0.9])[0],
            "max_num_turns": ordered[-1],
        }
    per_turn = [
        r["completion_tokens"] / r["num_turns"]
        for r in records
        if isinstance(r.get("num_turns"), int | float)
        and r["num_turns"] > 0
        and isinstance(r.get("completion_tokens"), int | float)
    ]
    if per_turn:
        out["mean_tokens_per_turn"] = statistics.fmean(per_turn)
        out["median_tokens_per_turn"] = statistics.median(per_turn)
    latency = numbers("total_latency_ms")
    if latency:
        out |= {
            "total_latency_p50_ms": percentiles(latency, [0.5])[0],
            "total_latency_p90_ms": percentiles(latency, [0.9])[0],
            "total_latency_p99_ms": percentiles(latency, [0.99])[0],
            "total_latency_mean_ms": statistics.fmean(latency),
        }
    return out


def _value(rng: random.Random, kind: str) -> Any:
    return {
        "int": rng.randrange(0, 5000),
        "float": rng.uniform(0, 5000),
        "big": 2**64 + rng.randrange(10),
        "bool": rng.random() < 0.5,
        "none": None,
    }[kind]


def test_summaries_equal_those_over_plain_lists_in_bytes() -> None:
    rng = random.Random(7)
    fields = [*TOKEN_FIELDS, "num_turns", "total_latency_ms", "token_observability_coverage"]
    for _ in range(200):
        kinds = rng.sample(["int", "float", "big", "bool", "none"], k=rng.randint(1, 3))
        items: list[Any] = [
            None if rng.random() < 0.1 else {name: _value(rng, rng.choice(kinds)) for name in fields}
            for _ in range(rng.randint(0, 30))
        ]
        parts = [PerfAccumulator() for _ in range(3)]
        for index, item in enumerate(items):
            parts[index * 3 // max(len(items), 1)].add(item)
        merged = PerfAccumulator()
        for part in parts:
            merged.merge(pickle.loads(pickle.dumps(part)))  # as a worker's partial arrives
        expected = _reference(items)
        got = merged.result()
        # Same keys in the same order, each value of the same type and, by repr, the same bits.
        assert got is None if expected is None else got is not None
        if got is not None and expected is not None:
            assert [(k, type(v), repr(v)) for k, v in got.items()] == [
                (k, type(v), repr(v)) for k, v in expected.items()
            ]

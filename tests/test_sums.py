"""``gymflow._sums``: numpy's float64 sums, bit for bit (the aggregate statistics rest on them)."""

from __future__ import annotations

import math
import random
from array import array

import numpy as np  # a test dependency: missing numpy fails, it does not skip
import pytest

from gymflow import _sums
from gymflow.aggregate._numbers import pairwise_sum, sample_std
from gymflow.aggregate._stats import _small_stats_here

SIZES = [0, 1, 2, 7, 8, 9, 15, 16, 17, 120, 127, 128, 129, 136, 255, 256, 257, 1000, 1031, 4097]


def _values(rng: random.Random, n: int) -> list[float]:
    pool = [0.0, -0.0, 1.0, -1.0, 1e16, -1e16, 1e-300, 5e-324, 1e300, 3.0]
    return [
        rng.choice(pool) if rng.random() < 0.3 else rng.uniform(-1, 1) * 10 ** rng.randint(-8, 12)
        for _ in range(n)
    ]


def _same(got: float, expected: float) -> bool:
    return got == expected and math.copysign(1, got) == math.copysign(1, expected)


def test_sums_equal_numpy_to_the_last_bit() -> None:
    """Sizes around the 8-value runs and the 128-value blocks; values whose order of addition
    shows (1e16 beside small ones), signed zeros, subnormals, squares beyond the float range."""
    rng = random.Random(3)
    with np.errstate(over="ignore", invalid="ignore"):
        _compare(rng)


def _compare(rng: random.Random) -> None:
    for _ in range(40):
        for n in SIZES:
            values = _values(rng, n)
            column = np.array(values, dtype=np.float64)
            expected = float(np.add.reduce(column))
            assert _same(_sums.pairwise_sum(array("d", values)), expected)
            assert _same(pairwise_sum(values), expected)  # a list is read as float64
            if n:
                center = expected / n
                deviations = column - center
                squares = float(np.add.reduce(deviations * deviations))
                assert _same(_sums.squared_deviation_sum(array("d", values), center), squares)
            if n >= 2:
                assert sample_std(values) == float(np.std(column, ddof=1))


def test_all_negative_zeros_sum_to_positive_zero() -> None:
    for n in (1, 8, 64, 300):
        assert _same(_sums.pairwise_sum(array("d", [-0.0] * n)), float(np.sum(np.full(n, -0.0))))


def test_only_float64_buffers_are_read() -> None:
    with pytest.raises(TypeError, match="float64"):
        _sums.pairwise_sum(array("q", [1, 2]))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="float64"):
        _sums.squared_deviation_sum(array("f", [1.0]), 0.0)
    with pytest.raises(TypeError):
        _sums.pairwise_sum([1.0, 2.0])  # type: ignore[arg-type]


def _number(rng: random.Random) -> int | float:
    pick = rng.random()
    if pick < 0.25:
        return rng.choice([0.0, -0.0, 1.0, -1.0, 0.5, math.inf, -math.inf, 1e308, -1e308, 5e-324, 1e16])
    if pick < 0.45:
        return rng.choice([0, 1, -1, 3, True, False, 2**53, -(2**53), 2**53 - 1, 10**12])
    if pick < 0.5:
        return rng.choice([2**53 + 1, -(2**53) - 1, 2**64, math.nan])  # left to Python
    if pick < 0.75:
        return rng.randint(-1000, 1000)
    return rng.uniform(-1, 1) * 10 ** rng.randint(-8, 12)


def _identical(got: object, expected: object) -> bool:
    if isinstance(expected, float) and isinstance(got, float):
        return (math.isnan(got) and math.isnan(expected)) or _same(got, expected)
    return type(got) is type(expected) and got == expected


def test_small_statistics_equal_the_python_ones() -> None:
    """mean, max, min, median and std of 1 to 7 values: the same values, types and signs as the
    Python computation (ties between an int and a float, signed zeros, infinities, their NaN
    results); None only for what it leaves to Python (NaN, integers beyond 2**53, sizes)."""
    rng = random.Random(11)
    declined = computed = 0
    for _ in range(20_000):
        values: list[int | float] = [_number(rng) for _ in range(rng.randint(0, 9))]
        integral = rng.random() < 0.5
        given = tuple(values) if rng.random() < 0.5 else values
        found = _sums.small_statistics(given, integral)
        leaves = not 1 <= len(values) <= 7 or any(
            (type(v) is float and math.isnan(v)) or (type(v) is int and abs(v) > 2**53) for v in values
        )
        if leaves:
            assert found is None, values
            declined += 1
            continue
        expected = _small_stats_here(values, integral)
        assert found is not None and len(found) == 5, values
        assert all(_identical(g, e) for g, e in zip(found, expected, strict=True)), (values, found, expected)
        computed += 1
    assert declined > 1000 and computed > 10_000
    assert _sums.small_statistics(("1",), False) is None
    assert _sums.small_statistics(iter([2, 1.0]), True) == (1.5, 2, 1.0, 1.5, 0.7071067811865476)

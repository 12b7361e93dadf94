"""``gymflow._sums``: numpy's float64 sums, bit for bit (the aggregate statistics rest on them)."""

from __future__ import annotations

import math
import random
from array import array

import numpy as np  # a test dependency: missing numpy fails, it does not skip
import pytest

from gymflow import _sums
from gymflow.aggregate._numbers import pairwise_sum, sample_std

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

"""``gymflow.ranks.at_ranks``: exactly ``sorted(values)[rank]``, by a selection in C for typed arrays."""

from __future__ import annotations

import math
import random
from array import array

import pytest

from gymflow import _ranks
from gymflow.ranks import at_ranks


def _same(got: list[int | float], expected: list[int | float]) -> bool:
    return all(
        type(a) is type(b)
        and a == b
        and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b))
        for a, b in zip(got, expected, strict=True)
    )


def test_a_selection_equals_sorted_value_type_and_sign_of_zero() -> None:
    rng = random.Random(7)
    floats = [0.0, -0.0, 1.0, -1.0, 0.5, 1e300, -1e-300, 5e-324, math.inf, -math.inf]
    integers = [0, 1, -1, 2**63 - 1, -(2**63), 7]
    for _ in range(2_000):
        n = rng.randint(1, 400)
        typecode = rng.choice("dq")
        pool = floats if typecode == "d" else integers
        values = [
            rng.choice(pool)
            if rng.random() < 0.6
            else (rng.uniform(-5, 5) if typecode == "d" else rng.randint(-9, 9))
            for _ in range(n)
        ]
        ranks = [rng.randrange(n) for _ in range(rng.randint(1, 6))]
        ordered = sorted(values)
        assert _same(at_ranks(array(typecode, values), ranks), [ordered[rank] for rank in ranks])


def test_ordered_reversed_and_equal_inputs_are_selected_too() -> None:
    n = 200_001
    for values in (list(range(n)), list(range(n, 0, -1)), [3] * n, [i % 3 for i in range(n)]):
        ranks = [0, n // 4, n // 2, n - 1]
        ordered = sorted(values)
        assert at_ranks(array("q", values), ranks) == [ordered[rank] for rank in ranks]
        assert at_ranks(array("d", map(float, values)), ranks) == [float(ordered[rank]) for rank in ranks]


def test_other_sequences_and_a_nan_are_sorted_as_python_sorts() -> None:
    nan = float("nan")
    with_nan = [2.0, nan, 1.0, 0.0]
    assert _same(at_ranks(array("d", with_nan), [0, 3]), [sorted(with_nan)[0], sorted(with_nan)[3]])
    mixed = [True, 2**70, 0.5, -3]
    assert at_ranks(mixed, [0, 1, 2, 3]) == sorted(mixed)
    assert at_ranks(array("i", [3, 1, 2]), [1]) == [2]  # not 8-byte items: sorted


def test_the_c_function_refuses_what_it_cannot_answer() -> None:
    with pytest.raises(ValueError, match="NaN"):
        _ranks.at_ranks(array("d", [1.0, float("nan")]), (0,))
    with pytest.raises(IndexError):
        _ranks.at_ranks(array("d", [1.0]), (1,))
    with pytest.raises(TypeError):
        _ranks.at_ranks(array("i", [1]), (0,))

"""reverify.md §3.1 and §3.9 point 6: the strict parser's messages and exactness."""

from __future__ import annotations

import json

import pytest

from gymflow.atif.strict_json import loads


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"x": NaN}', "non-JSON numeric constant 'NaN'"),
        ("[Infinity]", "non-JSON numeric constant 'Infinity'"),
        ("[-Infinity]", "non-JSON numeric constant '-Infinity'"),
        ("[1e999]", "JSON number '1e999' exceeds the finite float range"),
        ("[1e-400]", "JSON number '1e-400' underflows the finite float range"),
        ("[-2.5e-400]", "JSON number '-2.5e-400' underflows the finite float range"),
        (
            "[3.141592653589793238]",
            "JSON number '3.141592653589793238' cannot be represented without precision loss",
        ),
        ('{"a": 1, "a": 2}', "duplicate object key 'a'"),
        ('{"o": {"b": 1, "b": 1}}', "duplicate object key 'b'"),
        ('["\\ud800"]', "lone surrogate in a JSON string"),
        ('{"\\udfff": 1}', "lone surrogate in a JSON string"),
    ],
)
def test_rejected(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        loads(text)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("text", "value"), [("0e-400", 0.0), ("0.000e-999", 0.0), ("-0.0", -0.0), ("0.1", 0.1)]
)
def test_zero_and_exact_floats_are_fine(text: str, value: float) -> None:
    assert loads(text) == value


def test_big_integers_are_exact() -> None:
    big = "1" + "0" * 40
    assert loads(f"[{big}]") == [10**40]
    huge = "7" * 5000
    assert loads(f"[{huge}]")[0] % 10 == 7


def test_surrogate_pairs_decode() -> None:
    assert loads('["\\ud83d\\ude00"]') == ["\U0001f600"]


def test_encodings_like_json_loads_bytes() -> None:
    assert loads(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}
    assert loads('{"a": "é"}'.encode("utf-16")) == {"a": "é"}
    assert loads('{"a": "é"}'.encode("utf-32")) == {"a": "é"}
    with pytest.raises(ValueError) as caught:
        loads(b'{"a": \xff}')
    assert str(caught.value) == "'utf-8' codec can't decode byte 0xff in position 6: invalid start byte"


def test_syntax_errors_are_value_errors() -> None:
    with pytest.raises(json.JSONDecodeError):
        loads("{")

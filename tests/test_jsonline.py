"""gymflow.jsonline: the strict exact reading, its fast long-digit test and its shallow reading.

The property tests mutate generated lines (flipped and inserted bytes, truncation, invalid UTF-8,
escapes, huge and tiny numbers, changed types, duplicate keys, deep nesting) and assert, line by
line, that :func:`loads_shallow` never accepts a line :func:`loads_exact` refuses and, when it
answers, gives the same keys in the same order and the same values, types included.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from gymflow.jsonline import (
    BOM,
    LONG_DIGITS,
    LineError,
    Raw,
    decode_raw,
    has_long_digits,
    loads_exact,
    loads_shallow,
    needs_exact_reading,
)
from tests.fuzz_lines import SEED, lines, typed
from tests.integer_edges import orjson_inexact, texts


def _exact(line: bytes) -> Any:
    try:
        return loads_exact(line)[0]
    except LineError:
        return LineError


def test_shallow_reading_agrees_with_the_exact_reading_line_by_line() -> None:
    shallow_answers = exact_objects = 0
    for line in lines(6000, SEED):
        exact = _exact(line)
        top = loads_shallow(line)
        if isinstance(exact, dict):
            exact_objects += 1
        if top is None:
            continue
        shallow_answers += 1
        assert isinstance(exact, dict), line
        assert list(top) == list(exact), line
        for key, value in top.items():
            decoded = decode_raw(value) if isinstance(value, Raw) else value
            assert typed(decoded) == typed(exact[key]), (line, key)
    # The fast reading must answer for most readable lines (else it would be a no-op).
    assert shallow_answers >= 0.9 * exact_objects > 1000


@pytest.mark.parametrize(
    ("line", "readable"),
    [
        (b'{"a":1e400}', False),
        (b'{"a":[1,{"b":-1.8e308}]}', False),
        (b'{"a":' + b"1" * 400 + b"}", False),
        (b'{"a":"\xff"}', False),
        (b'{"\xc0\xaf":1}', False),
        (b'{"a":"\\ud800"}', False),
        (BOM + b'{"a":1}', False),
        (b'{"a":"a\x00b"}', False),
        (b'{"a":NaN}', False),
        (b"[1]", False),
        (b'{"a":' + b"[" * 1025 + b"]" * 1025 + b"}", False),
        (b'{"id":"rs_3e462c","t":1e-05,"big":123456789012345678901234567890}\n', True),
        (b'{"a":' + b"1" * 150 + b"e99}", True),
        (b'{"huge":1.7976931348623157e+308,"n":[-1.7976931348623158E+308],"m":1e-400,"s":"1e999"}', True),
        (b'{"a":[1.7976931348623159e+308]}', False),
        (b'{"a":{"b":-1E+0309}}', False),
        (b'{"a":1.5e+300,"b":[2e999]}', False),
    ],
)
def test_shallow_reading_refuses_what_the_strict_rule_refuses(line: bytes, readable: bool) -> None:
    top = loads_shallow(line)
    assert (top is not None) is readable
    assert isinstance(_exact(line), dict) is readable
    if top is not None:
        assert top["big"] == 123456789012345678901234567890 if "big" in top else True


def test_shallow_reading_leaves_strings_and_containers_undecoded() -> None:
    top = loads_shallow(b'{"n":-3,"f":2.5,"t":true,"z":null,"s":"x","o":{"u":1},"l":[2]}')
    assert top is not None
    assert {key: value for key, value in top.items() if not isinstance(value, Raw)} == {
        "n": -3, "f": 2.5, "t": True, "z": None,
    }  # fmt: skip
    assert [decode_raw(top[key]) for key in ("s", "o", "l")] == ["x", {"u": 1}, [2]]


def test_has_long_digits_is_the_regex_answer() -> None:
    rng = random.Random(SEED)
    alphabet = b"0123456789" * 3 + b"a,.-e \x00\xff"
    for _ in range(4000):
        data = bytes(rng.choice(alphabet) for _ in range(rng.randrange(60)))
        assert has_long_digits(data) is (LONG_DIGITS.search(data) is not None), data
    assert has_long_digits(b"x" + b"7" * 20) and has_long_digits(b"[-" + b"7" * 19)
    assert not has_long_digits(b"x" + b"7" * 19) and not has_long_digits(b"7" * 18 + b"." + b"7" * 18)
    # A positive 19-digit integer is exact in orjson; what the test lets through, orjson reads exactly.
    for text in (b"9999999999999999999", b"-999999999999999999", b"18446744073709551615"[:19]):
        assert not has_long_digits(text) and type(orjson.loads(text)) is int
    for text in (b"18446744073709551616", b"-9223372036854775809"):
        assert has_long_digits(text) and type(orjson.loads(text)) is float


def test_needs_exact_reading_is_true_wherever_orjson_loses_an_integer() -> None:
    for data in texts(random.Random(SEED), 4000):
        needed = needs_exact_reading(data)
        assert needed or not orjson_inexact(data), data
        assert not needed or has_long_digits(data), data
    # Within orjson's 64-bit ranges, in strings or not: no exact reading.
    for text in (b"18446744073709551615", b"-9223372036854775808", b'"18446744073709551615"', b"7" * 19):
        assert not needs_exact_reading(text) and not orjson_inexact(text)
    for text in (b"18446744073709551616", b"-9223372036854775809", b"[" + b"1" * 21 + b"]", b"-" + b"1" * 20):
        assert needs_exact_reading(text) and orjson_inexact(text)
    assert needs_exact_reading(b'"x18446744073709551616"')  # strings count too: over-approximated

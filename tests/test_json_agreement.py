"""``msgspec_agrees``: where it says yes, msgspec's typed decoding agrees with ``orjson.loads``.

Each rule on its edge, then the property over random texts built to reach every rule (huge and
edge numbers, escapes and surrogates, raw UTF-8 valid and not, control bytes, deep nesting) and
then damaged at random: wherever the check says yes, msgspec accepts a text exactly when orjson
does, both for the field it decodes and the one it skips, with values of equal types and bits.
"""

from __future__ import annotations

import math
import random
from typing import Any

import msgspec
import orjson
import pytest

from gymflow._json_agreement import msgspec_agrees, object_members
from tests import fuzz_lines
from tests.integer_edges import orjson_inexact, texts

_INVALID_UTF8 = [b"\xff", b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82"]


class _OneField(msgspec.Struct):
    a: Any = None


def _nested(depth: int) -> bytes:
    return b'{"a": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


@pytest.mark.parametrize(
    ("text", "agrees"),
    [
        (b'{"a": 1, "b": [true, false, null, "x"]}', True),
        (b"", True),
        ('{"a": "ü €𝄞"}'.encode(), True),
        (b'{"a": "\\ud834\\udd1e \\u00fc \\n"}', True),
        (b'{"a": "\\ud834"}', False),  # a high surrogate alone
        (b'{"a": "\\ud834\\u0041"}', False),  # followed by no low one
        (b'{"a": "\\udd1e"}', False),  # a low surrogate alone
        (b'{"b": "\xff", "a": 1}', False),  # msgspec does not check a skipped string's UTF-8
        (b'{"b": "\xc0\xaf"}', False),  # overlong
        (b'{"b": "\xe0\x80\xaf"}', False),  # overlong
        (b'{"b": "\xed\xa0\x80"}', False),  # a surrogate in UTF-8
        (b'{"b": "\xf4\x90\x80\x80"}', False),  # beyond U+10FFFF
        (b'{"b": "\xe2\x82"}', False),  # cut short
        (b'{"b": "x\x01"}', False),  # a control byte
        (b'{"b": "\\x"}', False),  # an unknown escape (both refuse it)
        (b'{"b": "\\/\\b\\f\\r\\t\\"\\\\"}', True),
        (b'{"a": 999999999999999999}', True),  # 18 digits
        (b'{"a": 9223372036854775807}', True),
        (b'{"a": -9223372036854775808}', True),  # the least int64: an int in both
        (b'{"a": -9223372036854775809}', False),  # orjson: a float; msgspec: an int
        (b'{"a": 18446744073709551615}', True),  # the largest uint64: an int in both
        (b'{"a": 18446744073709551616}', False),
        (b'{"a": 123456789012345678901234567890}', False),
        (b'{"a": 1.7976931348623157e308}', True),  # the largest double
        (b'{"a": 1.7976931348623159e308}', False),  # overflows (orjson refuses, skipped or not)
        (b'{"b": 1e400, "a": 1}', False),
        (b'{"a": 1e-400}', True),  # underflows to 0.0 in both
        (b'{"a": 5e-324}', True),
        (b'{"a": ' + b"9" * 200 + b".5}", True),  # below 1e200: finite, not parsed
        (b'{"a": ' + b"9" * 400 + b".5}", False),  # too long to check
        (_nested(200), True),
        (_nested(201), False),
    ],
)
def test_each_rule_on_its_edge(text: bytes, agrees: bool) -> None:
    assert msgspec_agrees(text) is agrees


@pytest.mark.parametrize(
    ("text", "agrees"),
    [
        (b'{"a": -9223372036854775809}', True),
        (b'{"a": 123456789012345678901234567890}', True),
        (b'{"a": ' + b"9" * 200 + b"}", True),
        (b'{"a": ' + b"9" * 201 + b"}", False),  # the exact rule refuses what no float holds
        (b'{"a": 1e400}', False),
        (b'{"b": "\xff"}', False),
    ],
)
def test_wide_integers_agree_with_a_reader_that_keeps_them(text: bytes, agrees: bool) -> None:
    assert msgspec_agrees(text, True) is agrees


def test_it_takes_any_bytes_like_value() -> None:
    assert msgspec_agrees(bytearray(b'{"a": 1}')) and msgspec_agrees(memoryview(b'{"a": 1}'))
    with pytest.raises(TypeError):
        msgspec_agrees("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        msgspec_agrees(b"{}", True, True)  # type: ignore[call-arg]


def _number(rng: random.Random) -> str:
    sign = rng.choice(["", "-"])
    digits = "".join(rng.choice("0123456789") for _ in range(rng.choice([1, 3, 17, 18, 19, 20, 21, 40])))
    digits = digits.lstrip("0") or "0"
    kind = rng.randrange(4)
    if kind == 0:
        return sign + digits
    if kind == 1:
        return sign + rng.choice(["9223372036854775807", "9223372036854775808", "18446744073709551615"])
    fraction = "." + str(rng.randrange(10**6)) if rng.random() < 0.5 else ""
    exponent = f"e{rng.choice(['', '+', '-'])}{rng.choice([0, 5, 99, 100, 290, 307, 308, 309, 330, 400])}"
    return sign + digits[:3] + fraction + (exponent if kind == 3 else "")


def _string(rng: random.Random) -> bytes:
    parts: list[bytes] = []
    for _ in range(rng.randrange(6)):
        kind = rng.randrange(7)
        if kind == 0:
            parts.append(rng.choice([b"plain", b"with space", b"0123"]))
        elif kind == 1:
            parts.append(rng.choice([b"\\n", b'\\"', b"\\\\", b"\\/", b"\\u00e9", b"\\x"]))
        elif kind == 2:  # surrogate escapes, paired or not
            high, low = rng.randrange(0xD800, 0xDC00), rng.randrange(0xDC00, 0xE000)
            escapes = [f"\\u{high:04x}\\u{low:04x}", f"\\u{high:04x}", f"\\u{low:04x}"]
            parts.append(rng.choice(escapes).encode())
        elif kind == 3:  # valid UTF-8 of any width
            parts.append(chr(rng.choice([0xE9, 0x20AC, 0x1D11E, rng.randrange(0x80, 0xD800)])).encode())
        elif kind == 4:  # invalid UTF-8
            parts.append(rng.choice(_INVALID_UTF8))
        elif kind == 5:
            parts.append(bytes([rng.randrange(0x20)]))
        else:
            parts.append(b"x" * rng.randrange(1, 40))
    return b'"' + b"".join(parts) + b'"'


def _value(rng: random.Random, depth: int = 0) -> bytes:
    kind = rng.randrange(6 if depth < 4 else 3)
    if kind == 0:
        return _number(rng).encode()
    if kind == 1:
        return _string(rng)
    if kind == 2:
        return rng.choice([b"true", b"false", b"null"])
    if kind == 3:
        return b"[" + b", ".join(_value(rng, depth + 1) for _ in range(rng.randrange(4))) + b"]"
    if kind == 4:
        items = (_string(rng) + b": " + _value(rng, depth + 1) for _ in range(rng.randrange(4)))
        return b"{" + b", ".join(items) + b"}"
    levels = rng.choice([150, 199, 200, 201, 260])
    return b"[" * levels + _value(rng, 4) + b"]" * levels


def _damaged(text: bytes, rng: random.Random) -> bytes:
    if rng.random() < 0.7 or not text:
        return text
    position = rng.randrange(len(text))
    kind = rng.randrange(3)
    if kind == 0:
        return text[:position] + bytes([text[position] ^ (1 << rng.randrange(8))]) + text[position + 1 :]
    if kind == 1:
        return text[:position] + text[position + 1 :]
    return text[:position] + bytes([rng.randrange(256)]) + text[position:]


def _decoded(decode: Any, text: bytes) -> tuple[bool, Any]:
    try:
        return True, decode(text)
    except (orjson.JSONDecodeError, msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return False, None


def _same(left: Any, right: Any) -> bool:
    """Equal values of equal types; floats bit for bit (-0.0 is not 0.0)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, float):
        return math.copysign(1.0, left) == math.copysign(1.0, right) and left == right
    if isinstance(left, list):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict):
        return list(left) == list(right) and all(_same(left[key], right[key]) for key in left)
    return bool(left == right)


def test_where_it_agrees_msgspec_and_orjson_agree() -> None:
    rng = random.Random(20261207)
    decode = msgspec.json.Decoder(_OneField).decode
    seen = {"agrees": 0, "agrees and readable": 0, "refused but readable": 0}
    for _ in range(20_000):
        decoded, skipped = _value(rng), _value(rng)
        order = [b'"a": ' + decoded, b'"b": ' + skipped]
        rng.shuffle(order)
        text = _damaged(b"{" + b", ".join(order) + b"}", rng)
        readable, value = _decoded(orjson.loads, text)
        if not msgspec_agrees(text):
            seen["refused but readable"] += readable
            continue
        seen["agrees"] += 1
        typed_ok, typed = _decoded(decode, text)
        assert typed_ok == readable, text[:300]
        if readable:
            seen["agrees and readable"] += 1
            assert isinstance(value, dict)
            assert _same(typed.a, value.get("a")), text[:300]
    # Every side of the property is reached.
    assert seen["agrees and readable"] > 2_000 and seen["agrees"] - seen["agrees and readable"] > 500, seen
    assert seen["refused but readable"] > 500, seen


def test_it_refuses_wherever_orjson_loses_an_integer() -> None:
    """The join's use: a row orjson read is read exactly again where the check says no."""
    for data in texts(random.Random(20261207), 4000):
        assert not (msgspec_agrees(data) and orjson_inexact(data)), data
    # Within orjson's 64-bit ranges, in strings or not, the check says yes.
    for text in (b"18446744073709551615", b"-9223372036854775808", b'"18446744073709551616"', b"7" * 19):
        assert msgspec_agrees(text) and not orjson_inexact(text)
    for text in (b"18446744073709551616", b"-9223372036854775809", b"[" + b"1" * 21 + b"]", b"-" + b"1" * 20):
        assert not msgspec_agrees(text) and orjson_inexact(text)


_NAMES = (b"a", b"b", b"_ng_task_index", b"response", "\u03b2-gamma0".encode())


def _members_agree(text: bytes, names: tuple[bytes, ...], seen: dict[str, int]) -> None:
    """object_members' contract on one text: where it answers, orjson reads an object whose
    members are exactly the values of the slices it gives."""
    readable, value = _decoded(orjson.loads, text)
    found = object_members(text, names)
    if found is None:
        seen["declined but an object"] += readable and isinstance(value, dict)
        # Only a doubt declines: an object msgspec_agrees passes, spelled without escapes, is answered.
        assert not (readable and isinstance(value, dict) and msgspec_agrees(text) and b"\\" not in text), text
        return
    seen["answered"] += 1
    assert readable and isinstance(value, dict), text[:300]
    assert msgspec_agrees(text), text[:300]
    for name, where in zip(names, found, strict=True):
        key = name.decode()
        assert (where is None) == (key not in value), (name, text[:300])
        if where is not None:
            assert _same(orjson.loads(text[where]), value[key]), (name, text[:300])
            seen["members found"] += 1


def test_object_members_finds_what_orjson_reads_or_declines() -> None:
    rng = random.Random(20261208)
    seen = {"answered": 0, "members found": 0, "declined but an object": 0}
    for _ in range(20_000):
        members = [_string(rng) + b": " + _value(rng) for _ in range(rng.randrange(4))]
        members += [b'"' + rng.choice(_NAMES) + b'": ' + _value(rng) for _ in range(rng.randrange(3))]
        rng.shuffle(members)
        space = rng.choice([b"", b" ", b"\n\t ", b"\r\n"])
        text = _damaged(space + b"{" + (b"," + space).join(members) + b"}" + space, rng)
        _members_agree(text, _NAMES, seen)
    for line in fuzz_lines.lines(3000, seed=20261208):
        _members_agree(line, _NAMES, seen)
    # Every side is reached: answers with and without the members, and objects left to the exact reader.
    assert seen["answered"] > 2_500 and seen["members found"] > 1_500, seen
    assert seen["declined but an object"] > 500, seen


@pytest.mark.parametrize(
    ("text", "found"),
    [
        (b'{"a": 1, "b": [2, {"a": 3}], "a": "last"}', (b'"last"', b'[2, {"a": 3}]')),  # the last wins
        (b' {"b":{}}\r\n', (None, b"{}")),
        (b"{}", (None, None)),
        (b'{"\\u0061": 1}', None),  # a top-level key spelled with an escape
        (b'{"c": "\\u0061"}', (None, None)),  # escapes deeper are read
        (b'[{"a": 1}]', None),
        (b'{"a": 1} {"a": 2}', None),
        (b'{"a": 01}', None),
        (b'{"a": 1,}', None),
        (b'{"a": [1 2]}', None),
        (b'{"a": "\\x"}', None),
        (b'{"a": tru}', None),
        (b'{"a": 1.}', None),
        (b'{"a": 1e400}', None),
        (b'{"a": 18446744073709551616}', None),
        (b'{"a": "\\ud800"}', None),
        (b'{"a": 1}\x0b', None),
        (b'{"a": ' + b"[" * 199 + b"]" * 199 + b"}", (b"[" * 199 + b"]" * 199, None)),
        (b'{"a": ' + b"[" * 200 + b"]" * 200 + b"}", None),
    ],
)
def test_object_members_on_each_rule(text: bytes, found: tuple[bytes | None, ...] | None) -> None:
    result = object_members(text, (b"a", b"b"))
    if found is None:
        assert result is None
        return
    assert result is not None
    assert tuple(None if where is None else text[where] for where in result) == found

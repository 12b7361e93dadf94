"""Reading one JSONL line strictly and exactly: the rule aggregate and join share for their rows.

A line is one RFC 8259 document in UTF-8. gymflow copies what it reads into its outputs, so a
value it could not write back unchanged is refused up front, naming the field:

* a UTF-8 byte order mark (BOM) at the start of a line is an error (health makes the line an
  unreadable row; aggregate and join stop with a one-line error naming file and line);
* invalid UTF-8, NUL and other control characters inside strings, lone surrogate escapes
  (``"\\ud800"``), nesting deeper than 1024 levels, ``NaN`` / ``Infinity`` and numbers beyond the
  finite float range (``1e400``) are errors;
* integers of any size stay integers (orjson would turn those beyond 64 bits into floats, so such
  lines are re-read with the json module, which keeps them exact).

:func:`loads_exact` reads a whole line. :func:`loads_shallow` is the fast reading for callers that
need only a few fields: it decodes the top-level scalars and leaves every string, object and array
as undecoded bytes, but only for a line :func:`loads_exact` would accept with the same values;
for any other line it answers ``None`` (then :func:`loads_exact` gives the row or the error).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import msgspec
import orjson

from gymflow._json_agreement import msgspec_agrees

__all__ = [
    "BOM",
    "LONG_DIGITS",
    "LineError",
    "Raw",
    "decode_raw",
    "dumps_exact",
    "has_long_digits",
    "loads_exact",
    "loads_shallow",
    "needs_exact_reading",
]

BOM = b"\xef\xbb\xbf"
MAX_DEPTH = 1024

# An integer orjson reads as a float (beyond uint64 or below int64) has 20 digits or more, or is
# negative with 19 or more; a positive 19-digit integer (a nanosecond timestamp) it reads exactly.
LONG_DIGITS = re.compile(rb"\d{20}|-\d{19}")
_DIGIT_MASK = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x2D if byte == 0x2D else 0x2E for byte in range(256))
_DIGIT_RUN = b"0" * 20
_NEGATIVE_RUN = b"-" + b"0" * 19


def has_long_digits(data: bytes) -> bool:
    """Whether ``data`` holds 20 ASCII digits in a row, or ``-`` then 19 (where an integer beyond
    64 bits may be): ``LONG_DIGITS.search(data) is not None``, an order of magnitude faster on
    long lines (one C pass mapping digits to ``0``, then two finds)."""
    return _has_long_runs(data.translate(_DIGIT_MASK))


def _has_long_runs(mask: bytes) -> bool:
    return _DIGIT_RUN in mask or _NEGATIVE_RUN in mask


_RUN_START = b"0" * 19
_UINT64_MAX = b"18446744073709551615"
_INT64_MIN = b"9223372036854775808"  # its digits, after the "-"


def needs_exact_reading(data: bytes) -> bool:
    """Whether orjson may read an integer of ``data`` as a float: :func:`has_long_digits`, narrowed
    to digit runs beyond what orjson reads exactly (``-`` then more than 19 digits or 19 beyond
    ``9223372036854775808``; more than 20 digits or 20 beyond ``18446744073709551615``). Digit
    runs inside strings or floats count too (such lines just take the exact reading)."""
    mask = data.translate(_DIGIT_MASK)
    if not _has_long_runs(mask):
        return False
    size = len(mask)
    start = mask.find(_RUN_START)
    while start >= 0:
        end = start + 19
        while end < size and mask[end] == 0x30:
            end += 1
        digits = data[start:end]
        if start and mask[start - 1] == 0x2D:
            if len(digits) > 19 or digits > _INT64_MIN:
                return True
        elif len(digits) > 20 or (len(digits) == 20 and digits > _UINT64_MAX):
            return True
        start = mask.find(_RUN_START, end)
    return False


Raw = msgspec.Raw
"""A value :func:`loads_shallow` left undecoded: the bytes of one JSON string, object or array."""

_TOP_LEVEL = msgspec.json.Decoder(dict[str, msgspec.Raw])
_DECODE = msgspec.json.Decoder()
_STRING_OR_CONTAINER = frozenset(b'"[{')


def loads_shallow(data: bytes) -> dict[str, Any] | None:
    """The top-level object of ``data`` with its numbers, booleans and nulls decoded and every
    string, object and array left as :class:`Raw` (read them with :func:`decode_raw`, or with
    ``msgspec.json.decode(raw, type=...)``), at a fraction of a full parse's cost.

    Only for a line that :func:`loads_exact` accepts as an object, with the same keys in the same
    order and the same values (integers of any size exact); ``None`` for every other line and for
    lines this reading cannot vouch for (call :func:`loads_exact` then). msgspec skips the
    undecoded values checking everything the strict rule checks but UTF-8 and the float range:
    both are checked first, with the BOM, in one pass in C (:func:`msgspec_agrees`).
    """
    if not msgspec_agrees(data, True):
        return None
    try:
        top = _TOP_LEVEL.decode(data)
        for key, value in top.items():
            if memoryview(value)[0] not in _STRING_OR_CONTAINER:
                top[key] = _DECODE.decode(value)
    except (msgspec.MsgspecError, RecursionError):  # msgspec's depth limit is below orjson's
        return None
    return top


def decode_raw(raw: Raw) -> Any:
    """The value of a :class:`Raw` from :func:`loads_shallow` (what :func:`loads_exact` reads)."""
    return _DECODE.decode(raw)


class LineError(ValueError):
    """Why a line cannot be read exactly: ``message`` and the offending ``field`` (dotted path)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message if field is None else f"field {field!r}: {message}")
        self.message = message
        self.field = field


class _Bad:
    """A number or constant the json module accepted but gymflow cannot write back."""

    __slots__ = ("literal",)

    def __init__(self, literal: str) -> None:
        self.literal = literal


def _float(literal: str) -> float | _Bad:
    value = float(literal)
    return value if math.isfinite(value) else _Bad(literal)


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every scalar and key below ``value``, depth first."""
    if isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            yield child, key
            yield from _walk(item, child)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]")
    else:
        yield path, value


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in text)


def _lenient(data: bytes) -> Any:
    """The json module's reading, with non-finite numbers kept as :class:`_Bad` markers."""
    return json.loads(data.decode("utf-8"), parse_constant=_Bad, parse_float=_float)


def _explain(data: bytes, exc: orjson.JSONDecodeError) -> LineError:
    """A precise reason (and field, where one applies) for a line orjson refused."""
    reason = str(exc)
    if data.startswith(BOM):
        return LineError("line starts with a UTF-8 byte order mark (BOM); gymflow reads UTF-8 without a BOM")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as bad:
        return LineError(
            f"not valid UTF-8 (byte {bad.start} of the line: {data[bad.start : bad.start + 1]!r})"
        )
    if "depth limit" in reason:
        return LineError(f"nested deeper than {MAX_DEPTH} levels")
    if b"\x00" in data:
        return LineError("contains a NUL byte (control characters must be escaped in JSON)")
    try:
        value = _lenient(data)
    except RecursionError:
        return LineError(f"nested deeper than {MAX_DEPTH} levels")
    except ValueError:
        return LineError(f"not valid JSON: {reason}")
    for path, item in _walk(value, ""):
        if isinstance(item, _Bad):
            literal = item.literal
            if literal in ("NaN", "Infinity", "-Infinity"):
                return LineError(f"non-finite number {literal} is not JSON", path or None)
            return LineError(f"JSON number {literal} exceeds the finite float range", path or None)
        if isinstance(item, str) and _has_surrogate(item):
            escaped = item.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
            return LineError(f"lone surrogate in a JSON string ({escaped[:40]!r})", path or None)
    return LineError(f"not valid JSON: {reason}")


def loads_exact(data: bytes) -> tuple[Any, bool]:
    """Parse one line; returns ``(value, exact)`` where ``exact`` means the json module read it
    (integers beyond 64 bits: write it back with :func:`dumps_exact`). Raises :class:`LineError`."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise _explain(data, exc) from None
    if not needs_exact_reading(data):
        return value, False
    try:
        return json.loads(data), True
    except ValueError as exc:  # e.g. an integer literal longer than Python's 4300-digit limit
        raise LineError(f"number cannot be read exactly: {exc}") from None


def dumps_exact(value: Any) -> bytes:
    """Compact JSON of ``value`` without changing any value (no newline): orjson, or the json
    module for integers beyond 64 bits; a non-finite float is a :class:`LineError`, a lone
    surrogate is written as its escape, as it was read."""
    try:
        return orjson.dumps(value)
    except TypeError:
        pass
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:
        for path, item in _walk(value, ""):
            if isinstance(item, float) and not math.isfinite(item):
                raise LineError(f"value {item!r} is not finite and cannot be written as JSON", path) from None
        raise
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode()

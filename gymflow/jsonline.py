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
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import orjson

__all__ = ["BOM", "LONG_DIGITS", "LineError", "dumps_exact", "loads_exact"]

BOM = b"\xef\xbb\xbf"
MAX_DEPTH = 1024

# 19 digits in a row may be an integer orjson reads as a float (beyond int64 / uint64).
LONG_DIGITS = re.compile(rb"\d{19}")


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
    if LONG_DIGITS.search(data) is None:
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

"""Strict JSON for ATIF inputs (reverify.md §3.1, §3.9 point 6).

The standard library parser with every lenient corner closed: ``NaN``/``Infinity``, numbers that
overflow, underflow or lose precision as a float, repeated object keys and lone surrogates are
errors with the spec's exact wording; integers of any size are kept exactly. Bytes are decoded as
``json.loads`` does (UTF-8 with or without BOM, UTF-16, UTF-32).
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
_DIGIT_LIMIT = 4000
"""Integers longer than this bypass ``int(str)`` (capped by ``sys.get_int_max_str_digits``)."""


class StrictJSONError(ValueError):
    """A document is not strict JSON; the message is the spec's text."""


def _constant(name: str) -> Any:
    raise StrictJSONError(f"non-JSON numeric constant {name!r}")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StrictJSONError(f"JSON number {text!r} exceeds the finite float range")
    if value == 0.0:
        mantissa = text.lower().partition("e")[0]
        if mantissa.strip("-+0.") != "":
            raise StrictJSONError(f"JSON number {text!r} underflows the finite float range")
        return value
    if Decimal(text) != Decimal(repr(value)):
        raise StrictJSONError(f"JSON number {text!r} cannot be represented without precision loss")
    return value


def _int(text: str) -> int:
    if len(text) > _DIGIT_LIMIT:
        return int(Decimal(text))
    return int(text)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise StrictJSONError(f"duplicate object key {key!r}")
        result[key] = value
    return result


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            for key, nested in item.items():
                if _SURROGATE.search(key):
                    return True
                stack.append(nested)
        elif isinstance(item, list):
            stack.extend(item)
    return False


def loads(data: bytes | str) -> Any:
    """Parse one strict JSON document; raise :class:`StrictJSONError` (a ``ValueError``) or the
    decoder's own ``JSONDecodeError``/``UnicodeDecodeError`` (also ``ValueError``s)."""
    value = json.loads(
        data,
        parse_constant=_constant,
        parse_float=_float,
        parse_int=_int,
        object_pairs_hook=_object,
    )
    if _has_lone_surrogate(value):
        raise StrictJSONError("lone surrogate in a JSON string")
    return value

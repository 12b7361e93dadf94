"""Lax scalar coercion, as pydantic v2 applies it to parsed JSON (evidence.md, preamble).

NeMo Gym 0.7.0 validates with pydantic's default (lax) mode: ``"200"`` is a status code, ``true``
is ``1``, ``"12.5"`` is a float, ``200.5`` is not an integer, and a number is never a string. The
observation and trajectory models are pydantic models (:mod:`gymflow.evidence.trajectory`); these
helpers serve the values still checked by hand, field by field: conversation items and their
content parts (0.7.0's OpenAI SDK models) and capture lines (``gymflow.join``'s
``ModelCallRecord``). Every value that is not already of the exact type is delegated to pydantic
itself, so the edge cases (``"1_000"``, ``" 3 "``, ``"yes"``) are pydantic's own.
"""

from __future__ import annotations

from typing import Any, Final, NoReturn

import pydantic

__all__ = [
    "ValidationError",
    "fail",
    "lax_bool",
    "lax_float",
    "lax_int",
    "opt_literal",
    "opt_str",
    "req_str",
]

_INT: Final = pydantic.TypeAdapter(int)
_FLOAT: Final = pydantic.TypeAdapter(float)
_BOOL: Final = pydantic.TypeAdapter(bool)


class ValidationError(ValueError):
    """A value does not fit the 0.7.0 model; the class name is what gaps report as ``detail``.

    Named after pydantic's exception on purpose: 0.7.0 reports ``type(exc).__name__`` and the join
    must report the same word.
    """


def fail(where: str, message: str) -> NoReturn:
    raise ValidationError(f"{where}: {message}")


def lax_int(value: Any, where: str) -> int | None:
    """An optional integer field."""
    if value is None or type(value) is int:
        return value
    try:
        result: int = _INT.validate_python(value)
    except pydantic.ValidationError:
        fail(where, f"not an integer: {value!r}")
    return result


def lax_float(value: Any, where: str) -> float | None:
    """An optional float field (ints and numeric strings are accepted, as pydantic does)."""
    if value is None or type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    try:
        result: float = _FLOAT.validate_python(value)
    except pydantic.ValidationError:
        fail(where, f"not a number: {value!r}")
    return result


def lax_bool(value: Any, where: str) -> bool | None:
    """An optional boolean field (``0``/``1`` and ``"yes"``/``"off"``... are accepted)."""
    if value is None or type(value) is bool:
        return value
    try:
        result: bool = _BOOL.validate_python(value)
    except pydantic.ValidationError:
        fail(where, f"not a boolean: {value!r}")
    return result


def opt_str(value: Any, where: str) -> str | None:
    """An optional string field: only strings (a number is never a string)."""
    if value is None or isinstance(value, str):
        return value
    fail(where, f"not a string: {value!r}")


def req_str(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    fail(where, f"a string is required, got {value!r}")


def opt_literal(value: Any, allowed: frozenset[str], where: str) -> str | None:
    if value is None or (isinstance(value, str) and value in allowed):
        return value
    fail(where, f"must be one of {sorted(allowed)}: {value!r}")

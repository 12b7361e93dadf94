"""Typed, strict access to the fields of parsed JSON objects, for the ATIF profile validator.

Each checker takes ``(value, path)`` and returns the typed value or raises :class:`ProfileError`,
whose text names the field path and the reason on one line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from gymflow.atif.model import JSONObject

T = TypeVar("T")


class ProfileError(ValueError):
    """A document is outside the accepted profile."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)


def at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def choices(values: tuple[str, ...]) -> str:
    quoted = [repr(v) for v in values]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


class Fields:
    """Typed access to one JSON object's fields; unknown keys are rejected by :meth:`done`."""

    def __init__(self, value: Any, path: str, declared: tuple[str, ...]) -> None:
        if not isinstance(value, dict):
            raise ProfileError(path, "Input should be an object")
        self.obj: dict[str, Any] = value
        self.path = path
        self.declared = declared

    def done(self) -> None:
        for key in self.obj:
            if key not in self.declared:
                raise ProfileError(at(self.path, key), "Extra inputs are not permitted")

    def get(self, key: str, check: Callable[[Any, str], T], *, required: bool = False) -> T | None:
        path = at(self.path, key)
        if key not in self.obj:
            if required:
                raise ProfileError(path, "Field required")
            return None
        value = self.obj[key]
        if value is None and not required:
            return None
        return check(value, path)

    def need(self, key: str, check: Callable[[Any, str], T]) -> T:
        result = self.get(key, check, required=True)
        assert result is not None
        return result


def string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise ProfileError(path, "Input should be a valid string")
    return value


def boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ProfileError(path, "Input should be a valid boolean")
    return value


def count(value: Any, path: str) -> int:
    if type(value) is not int:
        raise ProfileError(path, "Input should be a valid integer")
    if value < 0:
        raise ProfileError(path, "Input should be greater than or equal to 0")
    return value


def number(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProfileError(path, "Input should be a valid number")
    try:
        return float(value)
    except OverflowError:
        raise ProfileError(path, "Input should be a finite number") from None


def cost(value: Any, path: str) -> float:
    amount = number(value, path)
    if not amount >= 0:
        raise ProfileError(path, "Input should be greater than or equal to 0")
    return amount


def json_object(value: Any, path: str) -> JSONObject:
    if not isinstance(value, dict):
        raise ProfileError(path, "Input should be an object")
    return value


def listed(value: Any, path: str, item: Callable[[Any, str], T]) -> tuple[T, ...]:
    if not isinstance(value, list):
        raise ProfileError(path, "Input should be a valid list")
    return tuple(item(v, at(path, i)) for i, v in enumerate(value))


def objects(value: Any, path: str) -> tuple[JSONObject, ...]:
    return listed(value, path, json_object)


def token_ids(value: Any, path: str) -> tuple[int, ...]:
    if not isinstance(value, list) or any(type(v) is not int or v < 0 for v in value):
        raise ProfileError(path, "token IDs must be non-negative JSON integer arrays")
    return tuple(value)


def logprobs(value: Any, path: str) -> tuple[float, ...]:
    if not isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) for v in value
    ):
        raise ProfileError(path, "log probabilities must be finite JSON number arrays")
    return tuple(float(v) for v in value)

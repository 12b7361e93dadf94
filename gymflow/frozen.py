"""Immutable mappings for option objects: frozen, hashable, picklable, and still plain JSON.

Option dataclasses are frozen, but a ``dict`` field inside one can still be changed in place by
whoever holds it. :class:`FrozenDict` closes that hole. It subclasses ``dict`` so that orjson, the
json module and fsspec take it as it is, it refuses every mutation, and it pickles by value, so
options still cross into process-pool workers (``types.MappingProxyType`` does not pickle).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn, TypeVar

__all__ = ["FrozenDict", "freeze", "thaw"]

K = TypeVar("K")
V = TypeVar("V")


class FrozenDict(dict[K, V]):
    """A ``dict`` that cannot change after it is built."""

    __slots__ = ()

    def _refuse(self, *_: object, **__: object) -> NoReturn:
        raise TypeError(f"{type(self).__name__} is immutable")

    __setitem__ = __delitem__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse
    __ior__ = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[type[FrozenDict[K, V]], tuple[dict[K, V]]]:
        return type(self), (dict(self),)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict.__repr__(self)})"


def freeze(value: Any) -> Any:
    """``value`` with every mapping inside it a :class:`FrozenDict` and every list a tuple."""
    if isinstance(value, Mapping):
        return FrozenDict({key: freeze(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item) for item in value)
    return value


def thaw(value: Any) -> Any:
    """A mutable deep copy of a frozen value: dicts and lists again (for APIs that edit them)."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(item) for item in value]
    return value

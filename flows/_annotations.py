"""Typed wrappers around Prefect's parameter annotations."""

from __future__ import annotations

from typing import Generic, TypeVar, cast

from prefect.utilities.annotations import quote

__all__ = ["Returned", "unwalked"]

T = TypeVar("T")
V = TypeVar("V")


def unwalked(value: T) -> T:
    """``value`` wrapped in Prefect's ``quote()``: passed to a task as is, without Prefect walking
    every element looking for futures (seconds for a large list of rows). Prefect unwraps it before
    the task runs, so the task receives a ``T``; the cast tells mypy so."""
    return cast(T, quote(value))


class Returned(quote, Generic[V]):
    """A flow's return value wrapped in Prefect's ``quote``: at the end of every flow run Prefect
    walks the return value looking for futures, seconds for a large result (the metrics of 40,000
    rows are ~20 MB of objects); a quoted value is returned as is. The caller takes ``.result``."""

    @property
    def result(self) -> V:
        return cast(V, self.unwrap())

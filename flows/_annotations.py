"""Typed wrappers around Prefect's parameter annotations."""

from __future__ import annotations

from typing import TypeVar, cast

from prefect.utilities.annotations import quote

T = TypeVar("T")


def unwalked(value: T) -> T:
    """``value`` wrapped in Prefect's ``quote()``: passed to a task as is, without Prefect walking
    every element looking for futures (seconds for a large list of rows). Prefect unwraps it before
    the task runs, so the task receives a ``T``; the cast tells mypy so."""
    return cast(T, quote(value))

"""Probing a nested JSON sample: a copy with one value replaced at a path of keys and indices."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any


def with_value_at(sample: Any, path: Sequence[Any], value: Any) -> Any:
    """A deep copy of ``sample`` whose item at ``path`` is (a copy of) ``value``."""
    out = copy.deepcopy(sample)
    parent: Any = out
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = copy.deepcopy(value)
    return out

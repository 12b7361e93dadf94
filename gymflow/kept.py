"""Files that a stored step result names, kept beside the result store instead of inside it.

A cached step whose result would carry every row it read (a health range's verdict entries, an
aggregate shard's facts) keeps those rows in local files and returns their names: the runner then
holds names, not rows, however large the run. The files of one result live in one directory
named by the step's cache key under the executor's keep directory. They are written in a staging
directory beside it (``gymflow-kept-<pid>-...``, swept like scratch space when its process is
gone) and renamed into place once complete, so a directory found under its key is whole. A
runner given a cached result checks that its files are still there (:func:`present`) and
computes the step again when they are not.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from gymflow import scratch
from gymflow.errors import StorageError
from gymflow.executor import Executor, Step
from gymflow.storage_faults import os_reason

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["kept_files", "present", "recompute_lost"]


@contextmanager
def kept_files(root: str, key: str) -> Iterator[tuple[str, str]]:
    """``(staging, final)``: write the result's files in ``staging`` and name them under
    ``final``; when the block ends without an error the staging directory becomes ``final``
    (replacing an older one of the same key), else it is removed."""
    final = os.path.join(root, key)
    try:
        os.makedirs(root, exist_ok=True)
        scratch.sweep(root)
        staging = tempfile.mkdtemp(prefix=scratch.prefix("kept"), dir=root)
    except OSError as exc:
        reason = os_reason(exc)
        raise StorageError(f"{root}: cannot keep the rows of a stored result in it: {reason}") from exc
    try:
        yield staging, final
        if os.path.isdir(final):  # a refreshed result: the same key's older files go
            shutil.rmtree(final, ignore_errors=True)
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def present(paths: Iterable[str]) -> bool:
    """Whether every file a stored result names is still there."""
    return all(os.path.isfile(path) for path in paths)


def recompute_lost(
    executor: Executor, step: Step[T, R], work: Sequence[T], results: list[R], files: Callable[[R], list[str]]
) -> None:
    """Replace each of ``results`` whose kept ``files`` are gone (removed by hand, or written on
    another machine) by ``step`` computed again for its item, refreshing the stored result."""
    lost = [index for index, result in enumerate(results) if not present(files(result))]
    again = executor.map(step.cached(False), [work[index] for index in lost])
    for index, result in zip(lost, again, strict=True):
        results[index] = result

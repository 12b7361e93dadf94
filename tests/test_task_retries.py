"""Every Prefect task of gymflow retries with the one I/O setting (``tasks/_retries.py``) or not at
all: no task carries retry numbers of its own."""

from __future__ import annotations

import importlib
import pkgutil

from prefect import Task

import gymflow.tasks
from gymflow.tasks._retries import IO_RETRIES


def _tasks() -> list[Task[..., object]]:
    found = []
    for info in pkgutil.iter_modules(gymflow.tasks.__path__):
        module = importlib.import_module(f"gymflow.tasks.{info.name}")
        found += [value for value in vars(module).values() if isinstance(value, Task)]
    return found


def test_tasks_retry_with_the_shared_io_setting_or_not_at_all() -> None:
    tasks = _tasks()
    assert len(tasks) >= 15  # health, join and aggregate tasks are all found
    retrying = {task.name for task in tasks if task.retries}
    assert {"hash-input", "write-reports", "scan-shard", "concatenate-parts"} <= retrying
    for task in tasks:
        if task.retries:
            assert (task.retries, task.retry_delay_seconds) == (
                IO_RETRIES["retries"],
                IO_RETRIES["retry_delay_seconds"],
            ), task.name
    # Pure computation is not retried: it would fail the same way again.
    assert not {"reduce-report", "reduce-metrics", "join-range"} & retrying

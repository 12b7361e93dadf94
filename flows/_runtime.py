"""Running a flow from the CLI: the task runner chosen by config, no heartbeat wait at exit.

Without ``PREFECT_API_URL``, :func:`prefect_api` points this process and its workers at the local
server gymflow keeps running (:mod:`gymflow.flows._server`) instead of a temporary API per
process.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from prefect import Flow
from prefect.events.worker import EventsWorker
from prefect.logging.handlers import APILogWorker
from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.task_runners import ProcessPoolTaskRunner, TaskRunner, ThreadPoolTaskRunner

from gymflow import lifeline, parallel
from gymflow.config import RunnerConfig
from gymflow.errors import GymflowError
from gymflow.flows import _environment, _server

R = TypeVar("R")


def task_runner(config: RunnerConfig, workers: int) -> TaskRunner[Any]:
    """A process pool on this machine, or a Dask cluster (``runner.kind: dask``)."""
    if config.kind == "dask":
        from prefect_dask import task_runners as dask  # the optional dask extra

        runner: TaskRunner[Any] = (
            dask.DaskTaskRunner(address=config.dask_address)
            if config.dask_address
            else dask.DaskTaskRunner(cluster_kwargs={"n_workers": workers})
        )
        return runner
    lifeline.ensure_watchdog()
    return ProcessPoolTaskRunner(
        max_workers=workers, initializer=lifeline.worker_init, initargs=lifeline.worker_initargs()
    )


@contextmanager
def prefect_api(startup_timeout_s: float | None = None) -> Iterator[str]:
    """The configured Prefect API, or the local server gymflow keeps running (:mod:`._server`),
    shared with child processes. Events and logs still queued are delivered before returning."""
    configured = os.environ.get("PREFECT_API_URL") or PREFECT_API_URL.value()
    url = configured or _server.ensure(startup_timeout_s or _environment.startup_timeout_s())[0]
    previous = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = url
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}), _environment.result_store():
            yield url
    finally:
        # Drained here, not at interpreter exit, where Prefect warns "Still processing items".
        EventsWorker.drain_all(timeout=10, at_exit=False)
        APILogWorker.drain_all(timeout=10, at_exit=False)
        if previous is None:
            del os.environ["PREFECT_API_URL"]


def offloading_runner(config: RunnerConfig, workers: int) -> tuple[TaskRunner[Any], int | None]:
    """For flows whose tasks hand CPU work to a process pool of the flow's own (see
    :func:`process_pool`): Prefect tasks on threads plus ``workers`` lean processes here, or
    the Dask runner (tasks compute on its workers, no pool)."""
    if config.kind == "dask":
        return task_runner(config, workers), None
    return ThreadPoolTaskRunner(max_workers=workers), workers


@contextmanager
def process_pool(workers: int | None, what: str) -> Iterator[parallel.Workers | None]:
    """Worker processes that import gymflow's core only (not Prefect): they start in a fraction
    of the time Prefect's process runner needs, whose workers each import and connect Prefect.
    ``what`` names the work in the warning when the pool cannot run and the work runs here."""
    if not workers:
        yield None
        return
    with parallel.Workers(workers, what=what) as pool:
        yield pool


def run_flow(flow: Flow[..., R], runner: TaskRunner[Any], **parameters: Any) -> R:
    """Run ``flow`` with ``runner`` against :func:`prefect_api` (each flow holds the run lock of
    its own outputs, :mod:`gymflow.locking`, so subflows of ``eval post`` do too). Every sync flow
    otherwise waits about a second at exit for its heartbeat thread; gymflow's flows are short,
    so it is off."""
    configured: Callable[..., R] = flow.with_options(task_runner=runner)
    _quiet_user_errors()
    with prefect_api(), temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        return configured(**parameters)


class _DropUserErrors(logging.Filter):
    """Prefect logs a failed run's exception with its traceback, and each failed task's final
    state; for a :class:`GymflowError` the CLI prints the same one line as ``--direct`` instead
    (the run page still shows the failure)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, GymflowError):
            return False
        message = record.getMessage()
        return "encountered an exception" not in message or not any(
            f"encountered an exception {name}:" in message for name in _user_error_names()
        )


def _user_error_names() -> set[str]:
    names: set[str] = set()
    pending: list[type[BaseException]] = [GymflowError]
    while pending:
        kind = pending.pop()
        names.add(kind.__name__)
        pending.extend(kind.__subclasses__())
    return names


def _quiet_user_errors() -> None:
    for name in ("prefect.flow_runs", "prefect.task_runs"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropUserErrors) for f in logger.filters):
            logger.addFilter(_DropUserErrors())

"""Running a flow from the CLI: the task runner chosen by config, no heartbeat wait at exit.

Without ``PREFECT_API_URL``, :func:`prefect_api` points this process and its workers at the local
server gymflow keeps running (:mod:`gymflow.flows._server`) instead of a temporary API per
process.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import socket
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

import pydantic
from prefect import Flow, get_client
from prefect.client.schemas.objects import State
from prefect.events.worker import EventsWorker
from prefect.logging.handlers import APILogWorker
from prefect.runtime import flow_run
from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
    PREFECT_UI_URL,
    temporary_settings,
)
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from gymflow import lifeline, parallel, provenance, threads
from gymflow.config import RunnerConfig
from gymflow.errors import GymflowError
from gymflow.flows import _environment, _server
from gymflow.flows._publish import orchestrator
from gymflow.run_context import RunContext
from gymflow.tasks.executor import PrefectExecutor, prefect_executor

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient

R = TypeVar("R")
logger = logging.getLogger(__name__)


def task_runner(config: RunnerConfig, workers: int) -> TaskRunner[Any]:
    """Threads here (whose CPU-bound steps hand their work to the executor's pool of ``workers``
    core-only processes, :mod:`gymflow.tasks.executor`), or a Dask cluster (``runner.kind: dask``).

    One thread more than processes keeps an item queued for the pool, so a process that finishes
    one item starts the next at once instead of waiting for Prefect's bookkeeping of the task that
    ended and of the one that begins (measured: 5-30 ms per range task on a quiet machine, 170-400
    ms per shard scan on a loaded one)."""
    if config.kind == "dask":
        from prefect_dask import task_runners as dask  # the optional dask extra

        runner: TaskRunner[Any] = (
            dask.DaskTaskRunner(address=config.dask_address)
            if config.dask_address
            else dask.DaskTaskRunner(cluster_kwargs={"n_workers": workers})
        )
        return runner
    return ThreadPoolTaskRunner(max_workers=workers + 1)


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


@contextmanager
def flow_executor(ctx: RunContext, workers: int, what: str) -> Iterator[tuple[PrefectExecutor, RunContext]]:
    """Inside a flow run: the Prefect executor of its steps and the run context recorded under
    this flow run (``what`` names the work if the process pool cannot run)."""
    recorded = ctx.under(orchestrator())
    keeper = _HOUSEKEEPING.get()
    if keeper is not None:
        keeper.claim(flow_run.get_id())  # on the housekeeping thread: the work does not wait
    else:
        _claim_this_run()
    remote = ctx.runner.kind == "dask"
    with prefect_executor(recorded, workers, remote, what, _environment.kept_dir(), _POOL.get()) as executor:
        yield executor, recorded


_OWNER_PREFIX = "gymflow:"


def _owner(pid: int) -> str:
    return f"{_OWNER_PREFIX}{socket.gethostname()}:{pid}"


def _claim(client: SyncPrefectClient, run_id: str) -> None:
    """Record this process as the one running the flow run ``run_id`` (its ``infrastructure_pid``),
    so that a later command can tell a run whose process was killed from one still running."""
    client.update_flow_run(UUID(run_id), infrastructure_pid=_owner(os.getpid()))


def _claim_this_run() -> None:
    """:func:`_claim` of the current flow run, now (a flow run outside :func:`run_flow`)."""
    run_id = flow_run.get_id()
    if run_id is None:
        return
    with get_client(sync_client=True) as client:
        _claim(client, run_id)


def crash_orphans(client: SyncPrefectClient | None = None) -> int:
    """Mark ``Crashed`` every flow run still ``Running`` whose gymflow process on this host is
    gone (``kill -9``, a lost machine's power leaves it to the next command there); the number
    marked. Runs of other hosts and of processes still alive are left alone."""
    if client is None:
        with get_client(sync_client=True) as own:
            return crash_orphans(own)
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    mine = f"{_OWNER_PREFIX}{socket.gethostname()}:"
    running = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING])))
    marked = 0
    for run in client.read_flow_runs(flow_run_filter=running, limit=200):
        owner = run.infrastructure_pid or ""
        if not owner.startswith(mine) or lifeline.alive(int(owner.removeprefix(mine) or 0)):
            continue
        message = f"the gymflow process that ran it ({owner.removeprefix(_OWNER_PREFIX)}) is gone"
        client.set_flow_run_state(run.id, Crashed(message=message), force=True)
        marked += 1
    return marked


class _Housekeeping:
    """What every command run by :func:`run_flow` does besides its work, on a thread of its own
    with one client, so the work never waits for it: :func:`crash_orphans`, then :func:`_claim` of
    the command's flow run as soon as the flow has one. :meth:`join` waits for both (before the
    command ends); a failure is a warning, since the command's own work went through."""

    def __init__(self) -> None:
        self._run_id: Future[str | None] = Future()
        self._thread = threads.start(self._work, name="gymflow-housekeeping")

    def _work(self) -> None:
        try:
            with get_client(sync_client=True) as client:
                crash_orphans(client)
                run_id = self._run_id.result()
                if run_id is not None:
                    _claim(client, run_id)
        except Exception as exc:  # noqa: BLE001 - reported, never fatal to the command
            logger.warning("Prefect housekeeping failed (crashed runs, this run's process): %s", exc)

    def claim(self, run_id: str | None) -> None:
        if not self._run_id.done():
            self._run_id.set_result(run_id)

    def join(self, timeout: float | None = None) -> None:
        self.claim(None)  # a flow that never reached its work has nothing to claim
        self._thread.join(timeout)


_HOUSEKEEPING: ContextVar[_Housekeeping | None] = ContextVar("gymflow_housekeeping", default=None)
_POOL: ContextVar[parallel.Workers | None] = ContextVar("gymflow_pool", default=None)
"""The worker processes :func:`run_flow` was given for the flow's CPU-bound steps."""


def run_flow(
    flow: Flow[..., R], ctx: RunContext, workers: int, pool: parallel.Workers | None = None, **parameters: Any
) -> tuple[R, str]:
    """Run ``flow(ctx=ctx, workers=workers, **parameters)`` on the task runner ``ctx.runner``
    names, against :func:`prefect_api`; its result and the URL of its run in the UI. The
    parameters Prefect stores are redacted by provenance's rule (:func:`redacted_parameters`).
    Every sync flow otherwise waits about a second at exit for its heartbeat thread; gymflow's
    flows are short, so it is off. ``pool``: the worker processes of the flow's CPU-bound steps
    (else the flow starts its own)."""
    configured = flow.with_options(task_runner=task_runner(ctx.runner, workers))
    _redact_parameters(configured)
    _quiet_user_errors()
    with (
        ctx.active(),
        prefect_api(),
        temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}),
    ):
        keeper = _Housekeeping()
        token = _HOUSEKEEPING.set(keeper)
        pool_token = _POOL.set(pool)
        try:
            state: State[R] = configured(ctx=ctx, workers=workers, return_state=True, **parameters)  # type: ignore[assignment]
        except BaseException:
            keeper.join(timeout=2.0)  # an interrupt does not wait for an API that may be gone
            raise
        finally:
            _POOL.reset(pool_token)
            _HOUSEKEEPING.reset(token)
        keeper.join()
        url = f"{PREFECT_UI_URL.value()}/flow-runs/flow-run/{state.state_details.flow_run_id}"
        result: R = state.result()
        return result, url


def redacted_parameters(serialized: dict[str, Any]) -> dict[str, Any]:
    """What Prefect stores of a flow run's parameters: secrets removed by provenance's rule."""
    return provenance.redact(serialized)


def _redact_parameters(flow: Flow[..., Any]) -> None:
    def redacted(parameters: dict[str, Any]) -> dict[str, Any]:
        return redacted_parameters({name: _jsonable(value) for name, value in parameters.items()})

    flow.serialize_parameters = redacted  # type: ignore[method-assign]


_DEPTH = 64


def _jsonable(value: Any, depth: int = 0) -> Any:
    """A flow parameter as the JSON data Prefect stores for it: dataclasses and pydantic models as
    objects, mappings as objects, sequences as lists, paths and enums by value, anything else
    (a callback) by its type name, as Prefect names what it cannot encode. Prefect's own
    ``serialize_parameters`` imports FastAPI for its encoder (0.1 to 0.2 s of every command)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if depth > _DEPTH:
        return f"<{type(value).__name__}>"
    deeper = depth + 1
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return {field.name: _jsonable(getattr(value, field.name), deeper) for field in fields}
    if isinstance(value, pydantic.BaseModel):
        return _jsonable(value.model_dump(mode="json"), deeper)
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item, deeper) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(item, deeper) for item in value]
    if isinstance(value, enum.Enum):
        return _jsonable(value.value, deeper)
    if isinstance(value, PurePath):
        return str(value)
    return f"<{type(value).__name__}>"


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

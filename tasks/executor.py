"""gymflow's Prefect tasks: every step of a command's runner (:class:`gymflow.executor.Step`)
becomes one, made here (there is no hand-written task per step).

:meth:`PrefectExecutor.map` submits one task per item to the flow's task runner (threads here,
whose CPU-bound steps hand their work to a pool of core-only processes, or a Dask cluster);
:meth:`~PrefectExecutor.call` runs one task inline in the flow's thread, so the steps that write
reports always run in the client. Each task's only parameter is its work item (quoted: Prefect
does not walk it); the run context travels inside the task. A step's cache key becomes the task's
(results persist to the result store), its lineage the task's assets, and only transient storage
failures are retried. A cached task's result is pickled and base64-encoded in one call
(:class:`ResultPickle`), not in 76-character lines as Prefect's default serializer does.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import pickle
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, Literal, TypeVar

from prefect import Task, task
from prefect.assets import materialize
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State as _State
from prefect.client.schemas.objects import TaskRun
from prefect.context import TaskRunContext
from prefect.serializers import Serializer
from prefect.types.names import MAX_ASSET_KEY_LENGTH, RESTRICTED_ASSET_CHARACTERS
from prefect.utilities.annotations import quote

from gymflow import parallel, storage
from gymflow.errors import InputError, StorageError, StorageTimeout, UsageError
from gymflow.executor import Done, Pending, Ready, Step, in_context, in_order
from gymflow.run_context import RunContext

T = TypeVar("T")
R = TypeVar("R")


def asset_key(url: str) -> str:
    """The Prefect asset key of a file: its absolute URI where Prefect's asset keys accept it. A
    character they refuse (a space, ``%``, ``#``, ...) is written ``~`` and two hex digits per
    UTF-8 byte, and a key longer than they allow keeps its start and ends with 16 hex of the URI's
    SHA-256, so every path has a key and two paths do not share one."""
    uri = storage.to_uri(url)
    if any(char in uri for char in RESTRICTED_ASSET_CHARACTERS):
        uri = "".join(
            "".join(f"~{byte:02x}" for byte in char.encode()) if char in RESTRICTED_ASSET_CHARACTERS else char
            for char in uri
        )
    if len(uri) > MAX_ASSET_KEY_LENGTH:
        digest = hashlib.sha256(uri.encode()).hexdigest()[:16]
        uri = f"{uri[: MAX_ASSET_KEY_LENGTH - 17]}~{digest}"
    return uri


class ResultPickle(Serializer):  # bare: Serializer[X] would register a second class under no type
    """A cached step's result as base64 text of its pickle, made in one call: Prefect's default
    serializer cuts its base64 into 76-character lines, one Python-level call per line (0.4 s of
    the 20 persisted batches of a 20,000-row reverify). The standard pickle, as for the results
    that come back from pool workers (step results are plain data). A result persisted by the
    default serializer (type ``pickle``) still loads with that one."""

    type: Literal["gymflow-pickle"] = "gymflow-pickle"

    def dumps(self, obj: Any) -> bytes:
        return base64.b64encode(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

    def loads(self, blob: bytes) -> Any:
        result = pickle.loads(base64.b64decode(blob))  # noqa: S301 - our own result store
        return result


RETRY_DELAYS_S = [1.0, 4.0, 10.0]
"""Three retries of a transient storage failure, after 1, 4 and 10 seconds."""


_DETERMINISTIC_ERRNOS = frozenset(
    {
        errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR, errno.ENOTDIR, errno.ELOOP,
        errno.ENOENT, errno.ENOSPC, errno.EEXIST, errno.ENAMETOOLONG, errno.EINVAL, errno.EXDEV,
    }
)  # fmt: skip
"""Local file-system failures that fail the same way when tried again."""


def is_transient(error: BaseException | None) -> bool:
    """Whether a failure may go away on its own: a storage backend's, or the network's. A bad
    input, a wrong call, a path that cannot be written or a bug fails the same way every time."""
    if isinstance(error, InputError | UsageError | StorageTimeout) or not isinstance(
        error, StorageError | TimeoutError | ConnectionError
    ):
        return False  # a storage timeout already spent its retries within storage.timeout_s
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno in _DETERMINISTIC_ERRNOS:
            return False
        cause = cause.__cause__ or cause.__context__
    return True


def _retry_transient(_: Task[..., Any], __: TaskRun, state: _State[Any]) -> bool:
    error = state.result(raise_on_failure=False)
    return isinstance(error, BaseException) and is_transient(error)


def _unquoted(value: Any) -> Any:
    return value.unwrap() if isinstance(value, quote) else value


class PrefectExecutor:
    """Steps as tasks of the running flow (see the module docstring)."""

    persistent = True

    def __init__(
        self, ctx: RunContext, pool: parallel.Workers | None, remote: bool, keep_dir: str | None = None
    ) -> None:
        self.ctx = ctx
        self._pool = pool
        self.same_machine = not remote
        self.keep_dir = None if remote else keep_dir
        self._tasks: dict[tuple[Step[Any, Any], bool], Task[..., Any]] = {}

    def locate(self, path: str) -> str:
        return path if self.same_machine else storage.to_uri(path)

    def _task(self, step: Step[T, R], submitted: bool) -> Task[..., R]:
        key = (step, submitted)  # a Step is frozen data: two variants of one step are two tasks
        if key in self._tasks:
            return self._tasks[key]
        ctx, function = self.ctx, step.function
        pool = self._pool if step.cpu and submitted else None

        def body(item: T) -> R:
            if pool is not None:
                result: R = pool.call(in_context, ctx, function, item)
                return result
            return in_context(ctx, function, item)

        body.__name__ = step.name.replace("-", "_")
        options: dict[str, Any] = {"name": step.name}
        if step.io:
            options |= {"retries": len(RETRY_DELAYS_S), "retry_delay_seconds": RETRY_DELAYS_S}
            options["retry_condition_fn"] = _retry_transient
        content_key = step.cache_key
        if content_key is None:
            options["cache_policy"] = NO_CACHE
        else:

            def cache_key(_: TaskRunContext, parameters: dict[str, Any]) -> str:
                return content_key(_unquoted(parameters["item"]))

            options |= {
                "cache_key_fn": cache_key,
                "persist_result": True,
                "refresh_cache": step.refresh,
                "result_serializer": ResultPickle(),
            }
        made: Task[..., R]
        if step.lineage is None:
            made = task(**options)(body)
        else:
            outputs, inputs = step.lineage
            assets = [asset_key(url) for url in outputs]
            deps = list(dict.fromkeys(asset_key(url) for url in inputs))
            made = materialize(*assets, asset_deps=deps, **options)(body)  # type: ignore[arg-type]
        self._tasks[key] = made
        return made

    def map(self, step: Step[T, R], items: Sequence[T], *, done: Done[T, R] | None = None) -> list[R]:
        if not step.tracked:  # no task runs: straight to the pool (or here)
            run: Callable[[T], R] = partial(in_context, self.ctx, step.function)
            if self._pool is not None and step.cpu:
                return self._pool.map(run, items, done=done)
            return in_order(run, items, done)
        submit = self._task(step, submitted=True)
        # Quoted, Prefect does not walk an item looking for futures; but a quoted argument reaches
        # a Dask worker as a bare tuple, so remote items (small data) go as they are.
        futures = [submit.submit(item if not self.same_machine else quote(item)) for item in items]
        results: list[R] = []
        for item, future in zip(items, futures, strict=True):
            results.append(future.result())
            if done is not None:
                done(item, results[-1])
        return results

    def call(self, step: Step[T, R], item: T) -> R:
        run: Callable[..., R] = self._task(step, submitted=False)
        result: R = run(quote(item))
        return result

    def start(self, step: Step[T, R], item: T) -> Pending[R]:
        if not (step.cpu and self._pool is not None and self._pool.processes):
            return Ready(self.call(step, item))
        # A task run of its own on the task runner's thread, whose body waits for the worker.
        return self._task(step, submitted=True).submit(quote(item))

    def rest(self) -> None:
        """Kept running: the flow's next steps map on the same pool (starting it again would cost
        more than its idle processes hold)."""


@contextmanager
def prefect_executor(
    ctx: RunContext,
    workers: int,
    remote: bool,
    what: str,
    keep_dir: str | None = None,
    pool: parallel.Workers | None = None,
) -> Iterator[PrefectExecutor]:
    """The executor of a flow run: with a pool of ``workers`` core-only processes for CPU-bound
    steps on this machine (``remote``: the task runner's workers compute them, no pool), whose
    stored results keep their rows in ``keep_dir``. ``pool``: the processes started for the run
    before the flow (:func:`gymflow.cli.orchestrated.run`), used instead and left to their owner."""
    if remote:
        yield PrefectExecutor(ctx, None, remote=True)
    elif pool is not None:
        yield PrefectExecutor(ctx, pool.doing(what), remote=False, keep_dir=keep_dir)
    else:
        with parallel.Workers(workers, what=what) as own:
            yield PrefectExecutor(ctx, own, remote=False, keep_dir=keep_dir)

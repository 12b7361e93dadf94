"""The seam between a command's runner and where its work runs.

A runner (``run_<command>(options, ctx, executor)``) describes each kind of work as a
:class:`Step` (a module-level function of one work item, plus how it may be retried and cached)
and hands the items to an :class:`Executor`: :meth:`~Executor.map` over many, :meth:`~Executor.call`
of one. Items are plain data (URIs, byte ranges, frozen options), so the same step runs in this
process, in a process pool here (:class:`LocalExecutor`, ``--direct``), as Prefect tasks, or on a
remote Dask worker whose working directory differs (the Prefect executor of ``gymflow.flows``).
Every call runs inside the run's :class:`~gymflow.run_context.RunContext`, which travels with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Generic, Protocol, TypeVar

from gymflow import parallel, threads
from gymflow.run_context import RunContext

__all__ = ["Done", "Executor", "LocalExecutor", "Pending", "Ready", "Step", "in_context", "in_order"]

T = TypeVar("T")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True)
class Step(Generic[T, R]):
    """One kind of work: ``function(item)``, named for the orchestrator (``evaluate-range``)."""

    name: str
    function: Callable[[T], R]
    """Module-level (it pickles by reference into worker processes and onto Dask workers)."""
    io: bool = False
    """It reads or writes storage: a transient storage failure is retried with backoff (an error
    in the input or the call never is)."""
    cpu: bool = False
    """CPU-bound: run in worker processes where the executor has them."""
    cache_key: Callable[[T], str] | None = None
    """A content key of the item (its source bytes' SHA-256 and the output-affecting settings):
    an executor with a result store reuses the result stored under the same key."""
    refresh: bool = False
    """Compute again even when a result is stored under the key, and store the new one."""
    tracked: bool = True
    """Worth showing in the orchestrator (one task run per item). An internal step of another
    (sorting a reduce's runs) is not: an executor may run it without that bookkeeping."""
    lineage: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    """(outputs, inputs) URIs of a step that writes reports: the orchestrator records the outputs
    as derived from the inputs."""

    def cached(self, use_cache: bool) -> Step[T, R]:
        """This step, reusing stored results only when ``use_cache`` (``--no-cache``: refresh)."""
        return self if use_cache or self.cache_key is None else replace(self, refresh=True)

    def writing(self, outputs: Sequence[str], inputs: Sequence[str]) -> Step[T, R]:
        """This step as the one that writes ``outputs`` from ``inputs``."""
        return replace(self, lineage=(tuple(outputs), tuple(dict.fromkeys(inputs))))


Done = Callable[[T, R], None]
"""Called in the runner's thread, in item order, as each item's result arrives."""


class Pending(Protocol[R_co]):
    """A step begun by :meth:`Executor.start`."""

    def result(self) -> R_co:
        """Its result, once it has finished (its error raised here)."""
        ...


@dataclass(frozen=True)
class Ready(Generic[R]):
    """A step :meth:`Executor.start` ran to its end before returning."""

    value: R

    def result(self) -> R:
        return self.value


class Executor(Protocol):
    """Where a runner's steps run."""

    @property
    def same_machine(self) -> bool:
        """Whether steps run on this machine: a result may name a local scratch file."""
        ...

    @property
    def persistent(self) -> bool:
        """Whether results outlive the run (a result store): a result must not name a scratch
        file, which is gone next time."""
        ...

    @property
    def keep_dir(self) -> str | None:
        """A local directory where a step whose result is stored keeps the files the result names
        (:mod:`gymflow.kept`); None where results are not stored or steps run elsewhere."""
        ...

    def locate(self, path: str) -> str:
        """``path`` as work items carry it: unchanged where steps share this process's working
        directory, absolute (a URI) where they may not."""
        ...

    def map(self, step: Step[T, R], items: Sequence[T], *, done: Done[T, R] | None = None) -> list[R]:
        """``[step.function(item) for item in items]``, in item order."""
        ...

    def call(self, step: Step[T, R], item: T) -> R:
        """``step.function(item)``."""
        ...

    def start(self, step: Step[T, R], item: T) -> Pending[R]:
        """Begin ``step.function(item)`` in a worker process, while this thread goes on, when the
        step is CPU-bound and the executor has worker processes here; otherwise run it to its end
        now (two CPU-bound steps on threads of one process take longer than one after the other).
        Its ``result()`` must be asked for, also when what this thread did meanwhile failed."""
        ...

    def rest(self) -> None:
        """The command's parallel work is over for now: worker processes of this executor's own
        may stop (the next map starts them again), so they hold no memory while the command
        finishes in this process."""
        ...


def in_context(ctx: RunContext, function: Callable[[T], R], item: T) -> R:
    """``function(item)`` with ``ctx`` active: what every executor runs, wherever it runs."""
    with ctx.active():
        return function(item)


def in_order(run: Callable[[T], R], items: Sequence[T], done: Done[T, R] | None = None) -> list[R]:
    """``[run(item) for item in items]`` here, ``done`` called after each."""
    results: list[R] = []
    for item in items:
        results.append(run(item))
        if done is not None:
            done(item, results[-1])
    return results


class LocalExecutor:
    """Steps in this process, and CPU-bound maps in up to ``workers`` processes (forked as the
    ``with`` block starts where :func:`gymflow.parallel.can_fork`, else spawned on first use;
    stopped when the block ends; serially when a pool cannot run)."""

    same_machine = True
    persistent = False
    keep_dir = None

    def __init__(self, ctx: RunContext, workers: int = 1, what: str = "running the work") -> None:
        self._ctx = ctx
        self._pool = parallel.Workers(workers, what=what)

    def __enter__(self) -> LocalExecutor:
        self._pool.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.__exit__(*exc)

    def locate(self, path: str) -> str:
        return path

    def map(self, step: Step[T, R], items: Sequence[T], *, done: Done[T, R] | None = None) -> list[R]:
        run: Callable[[T], R] = partial(in_context, self._ctx, step.function)
        if step.cpu:
            return self._pool.map(run, items, done=done)
        return in_order(run, items, done)

    def call(self, step: Step[T, R], item: T) -> R:
        return in_context(self._ctx, step.function, item)

    def start(self, step: Step[T, R], item: T) -> Pending[R]:
        run: Callable[[T], R] = partial(in_context, self._ctx, step.function)
        if not (step.cpu and self._pool.processes):
            return Ready(run(item))
        # A thread waits for the worker (the pool's call falls back to running it here if the
        # pool breaks); shut down at once, it ends with its one call.
        waiter = threads.executor(1, f"gymflow-{step.name}")
        try:
            return waiter.submit(self._pool.call, run, item)
        finally:
            waiter.shutdown(wait=False)

    def rest(self) -> None:
        self._pool.stop()

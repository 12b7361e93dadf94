"""The one process-pool helper: run a function over work items in worker processes that die with
their parent (:mod:`gymflow.lifeline`), results in item order, and the same work serially when a
pool cannot start or breaks (with a warning), so outputs never depend on whether the pool ran.

Workers are forked where that is safe (Linux, this process running one thread): ready in
milliseconds, with the modules this process has imported. Elsewhere they are spawned, and each
imports the core again (about 0.4 s of CPU a worker). :class:`Workers` forks its pool as its
``with`` block starts, before the run starts threads of its own (input hashing, lease renewal).
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing import get_context
from typing import Any, TypeVar

from gymflow import collector, lifeline

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["MAX_DEFAULT_WORKERS", "Workers", "default_workers", "full_waves", "map_ordered", "pool"]

MAX_DEFAULT_WORKERS = 8


def default_workers() -> int:
    """The worker processes a command starts when not told: one per CPU, at most 8."""
    return min(os.cpu_count() or 1, MAX_DEFAULT_WORKERS)


def full_waves(items: int, workers: int, most: int) -> int:
    """``items`` (work items of about one size) rounded up to a multiple of ``workers``, at most
    ``most``: the last wave keeps every worker busy, instead of one finishing alone while the rest
    wait (a 20,000-row join cut into 5 ranges for 2 workers: 8.5-9.6 s; into 6: 7.3-8.3 s)."""
    if workers <= 1:
        return items
    return max(items, min(most, -(-items // workers) * workers))


@contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Hold SIGINT back in this thread while it starts processes: a child inherits the blocked
    signal and ignores it once its initializer runs (:func:`gymflow.lifeline.worker_init`). A
    Ctrl-C that reached a child still starting would kill it mid-start with Python's "Fatal
    Python error" on the terminal; here it reaches only this process, when the block ends."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def can_fork() -> bool:
    """Whether workers may be forked from this process now: on Linux, while it runs a single
    thread. A fork copies only the calling thread, so a lock that another thread held (a file
    buffer's, a library's) would stay held in the child for good."""
    if sys.platform != "linux":
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes that exit with this one: forked now when :func:`can_fork`,
    else spawned as work arrives."""
    fork = can_fork()
    with _ctrl_c_held():
        executor = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=get_context("fork" if fork else "spawn"),
            initializer=lifeline.worker_init,
            initargs=lifeline.worker_initargs(),
        )
        if fork:
            # The first submit forks every worker, before any thread starts; with no collection
            # in a child until its initializer has frozen what it inherited (gymflow.lifeline).
            collecting = gc.isenabled()
            gc.disable()
            try:
                executor.submit(os.getpid)
            finally:
                if collecting:
                    gc.enable()
    return executor


def _submit(executor: Executor, function: Callable[..., R], *args: Any) -> Future[R]:
    """``executor.submit`` of ``function(*args)`` in a worker (:func:`_in_worker`), with Ctrl-C
    held back while it may start a worker process."""
    with _ctrl_c_held():
        return executor.submit(_in_worker, function, *args)


def _in_worker(function: Callable[..., R], *args: Any) -> R:
    """``function(*args)``, then a full collection (it empties the free lists a worker fills while
    it parses: 5-6 MB after a 32 MB health range) and the freed heap handed back
    (:func:`collector.release_memory`), so a worker waiting for its next item, or for the parent to
    finish, holds what it held before. What survives is frozen (``gc.freeze``): the next
    collections skip the modules and caches a worker keeps, so each costs under a millisecond, not
    the first one's 15 ms."""
    try:
        return function(*args)
    finally:
        gc.collect()
        gc.freeze()
        collector.release_memory()


def map_ordered(
    function: Callable[[T], R],
    items: Sequence[T],
    workers: int,
    *,
    what: str,
    done: Callable[[T, R], None] | None = None,
) -> list[R]:
    """``[function(item) for item in items]``, in up to ``workers`` processes when there is more
    than one item; ``done(item, result)`` is called in item order as results arrive. ``what``
    names the work in the fallback warning ("reading shards", ...). ``function`` and the items
    must pickle."""
    with Workers(min(workers, len(items)), what=what) as session:
        return session.map(function, items, done=done)


class Workers:
    """Up to ``workers`` processes shared by several rounds of :meth:`map` (forked as the ``with``
    block starts where :func:`can_fork`, else started on first use; stopped and joined when the
    block ends), or this process when ``workers`` is 1.
    When the pool cannot start or breaks, the rest of the work runs serially, with one warning
    naming ``what``. :meth:`call` may be called from several threads at once."""

    def __init__(self, workers: int, *, what: str) -> None:
        self._workers = workers
        self._what = what
        self._executor: ProcessPoolExecutor | None = None
        self._serial = workers <= 1
        self._starting = threading.RLock()  # also held while falling back

    def doing(self, what: str) -> Workers:
        """This pool, whose fallback warning now names ``what`` (a pool started before its work
        was known: an orchestrated command's, forked before Prefect is imported)."""
        self._what = what
        return self

    @property
    def processes(self) -> bool:
        """Whether work given to :meth:`call` runs in a worker process (not here)."""
        return not self._serial

    def __enter__(self) -> Workers:
        if can_fork():
            self._started()  # forked now, while no thread runs: see the module docstring
        return self

    def __exit__(self, exc_type: object = None, *exc: object) -> None:
        self.stop(failed=exc_type is not None)

    def stop(self, *, failed: bool = False) -> None:
        """Stop the processes (and join them); the next :meth:`map` or :meth:`call` starts new ones.
        ``failed``: pending work is cancelled, not waited for."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if failed and hasattr(executor, "shutdown"):
            executor.shutdown(wait=True, cancel_futures=True)  # a failed run starts nothing more
        else:
            executor.__exit__(None, None, None)

    def _fall_back(self, message: str) -> None:
        with self._starting:
            if self._serial:
                return  # another thread fell back first
            self._serial = True
            warnings.warn(f"{message}; {self._what} serially.", RuntimeWarning, stacklevel=4)
            self.__exit__()

    def _started(self) -> ProcessPoolExecutor | None:
        """The pool, started now if it was not; ``None`` once the work runs serially."""
        with self._starting:
            if self._executor is None and not self._serial:
                try:
                    self._executor = pool(self._workers)
                except (OSError, ValueError, NotImplementedError, ImportError) as exc:
                    self._fall_back(f"Process pool unavailable ({exc})")
            return self._executor

    def call(self, function: Callable[..., R], *args: Any) -> R:
        """``function(*args)`` in a worker (here, once the work runs serially); a pool that breaks
        during the call falls back to running it here."""
        executor = self._started()
        if executor is not None:
            try:
                return _submit(executor, function, *args).result()
            except (BrokenProcessPool, pickle.PicklingError) as exc:
                self._fall_back(f"Process pool failed ({exc})")
        return function(*args)

    def map(
        self, function: Callable[[T], R], items: Sequence[T], *, done: Callable[[T, R], None] | None = None
    ) -> list[R]:
        """``[function(item) for item in items]`` in item order; see :func:`map_ordered`."""
        results: list[R] = []

        def serially() -> list[R]:
            for item in items[len(results) :]:  # after a broken pool: only what it did not finish
                result = function(item)
                if done is not None:
                    done(item, result)
                results.append(result)
            return results

        if self._serial or len(items) <= 1:
            return serially()
        executor = self._started()
        if executor is None:
            return serially()
        try:
            futures = [_submit(executor, function, item) for item in items]
            for item, future in zip(items, futures, strict=True):
                result = future.result()
                if done is not None:
                    done(item, result)
                results.append(result)
            return results
        except (BrokenProcessPool, pickle.PicklingError, OSError) as exc:
            self._fall_back(f"Process pool failed ({exc})")
            return serially()

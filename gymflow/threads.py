"""Threads that run in their starter's context.

A run's settings (the storage options of its :class:`~gymflow.run_context.RunContext`) live in
context variables; a plain ``threading.Thread`` or ``ThreadPoolExecutor`` worker starts in an
empty context and would not see them. Every thread gymflow's core starts comes from here, so work
handed to a thread reads and writes storage exactly as its starter would.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, ParamSpec, TypeVar

__all__ = ["executor", "start"]

P = ParamSpec("P")
R = TypeVar("R")


class _ContextExecutor(ThreadPoolExecutor):
    """A thread pool whose every call runs in a copy of the submitter's context."""

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        context = contextvars.copy_context()
        return super().submit(partial(context.run, fn, *args, **kwargs))


def executor(workers: int, name: str) -> ThreadPoolExecutor:
    """A pool of ``workers`` threads named ``name-N``, running each call in the caller's context."""
    return _ContextExecutor(max_workers=workers, thread_name_prefix=name)


def start(target: Callable[..., Any], *args: Any, name: str) -> threading.Thread:
    """A started daemon thread running ``target(*args)`` in a copy of this context."""
    thread = threading.Thread(
        target=contextvars.copy_context().run, args=(target, *args), name=name, daemon=True
    )
    thread.start()
    return thread

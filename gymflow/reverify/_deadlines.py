"""The time limit of each ``/verify`` request, for all the workers of a stream on one timer.

``asyncio.timeout`` costs about 5 us a request (a ``Timeout`` object, and a timer scheduled and
cancelled): 0.1 s of a 20,000-row run. Here a worker notes when its request is due (one dict
store) and one watchdog task, waking every :attr:`Deadlines.tick` seconds, cancels the workers
past their time; the worker turns that cancellation into ``TimeoutError`` as ``asyncio.timeout``
does, and any other cancellation (the stream stopping) goes through as itself. A request is cut
off between ``timeout_s`` and ``timeout_s + tick`` after it started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["Deadlines"]

R = TypeVar("R")


class Deadlines:
    """``async with Deadlines(timeout_s) as deadlines``: ``await deadlines.run(awaitable)`` in a
    task is ``awaitable`` with a limit of ``timeout_s`` seconds (``TimeoutError`` past it)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.tick = min(max(timeout_s / 8, 0.005), 0.25)
        self._due: dict[asyncio.Task[object], float] = {}
        self._expired: set[asyncio.Task[object]] = set()
        self._watchdog: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Deadlines:
        self._watchdog = asyncio.ensure_future(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)

    async def run(self, awaitable: Awaitable[R]) -> R:
        task = asyncio.current_task()
        assert task is not None
        cancelling = task.cancelling()
        self._due[task] = asyncio.get_running_loop().time() + self.timeout_s
        try:
            return await awaitable
        except asyncio.CancelledError:
            if task in self._expired:
                self._expired.discard(task)
                if task.uncancel() <= cancelling:
                    raise TimeoutError from None
            raise
        finally:
            del self._due[task]
            if task in self._expired:  # cut off as it completed: its cancellation was swallowed
                self._expired.discard(task)
                task.uncancel()

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.tick)
            now = loop.time()
            for task, due in self._due.items():
                if due <= now and task not in self._expired:
                    self._expired.add(task)
                    task.cancel()

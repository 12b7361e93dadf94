"""``Deadlines``: a request past its time fails with TimeoutError, within one tick; any other
cancellation goes through; the tasks it leaves carry no pending cancellation."""

from __future__ import annotations

import asyncio
import time

import pytest

from gymflow.reverify._deadlines import Deadlines


async def _sleep_then(seconds: float, value: int) -> int:
    await asyncio.sleep(seconds)
    return value


def test_only_the_late_requests_time_out_within_a_tick() -> None:
    async def main() -> tuple[list[object], list[float], list[int]]:
        async with Deadlines(0.2) as deadlines:

            async def one(seconds: float, value: int) -> tuple[object, float, int]:
                began = time.monotonic()
                try:
                    outcome: object = await deadlines.run(_sleep_then(seconds, value))
                except TimeoutError:
                    outcome = "timeout"
                task = asyncio.current_task()
                assert task is not None
                return outcome, time.monotonic() - began, task.cancelling()

            done = await asyncio.gather(*(one(0.6 if i % 3 == 0 else 0.01, i) for i in range(9)))
        return [d[0] for d in done], [d[1] for d in done], [d[2] for d in done]

    outcomes, seconds, cancelling = asyncio.run(main())
    assert outcomes == ["timeout", 1, 2, "timeout", 4, 5, "timeout", 7, 8]
    late = [s for s, o in zip(seconds, outcomes, strict=True) if o == "timeout"]
    assert all(0.2 <= s < 0.2 + 0.025 + 0.1 for s in late), late  # tick 0.025 s, and scheduling slack
    assert cancelling == [0] * 9


def test_a_worker_runs_request_after_request_after_a_timeout() -> None:
    async def main() -> list[object]:
        out: list[object] = []
        async with Deadlines(0.1) as deadlines:
            for seconds in (0.5, 0.01, 0.5, 0.01):
                try:
                    out.append(await deadlines.run(_sleep_then(seconds, 1)))
                except TimeoutError:
                    out.append("timeout")
        return out

    assert asyncio.run(main()) == ["timeout", 1, "timeout", 1]


def test_a_cancelled_stream_is_cancelled_not_timed_out() -> None:
    async def main() -> None:
        async with Deadlines(5.0) as deadlines:
            task = asyncio.ensure_future(deadlines.run(_sleep_then(10, 1)))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())

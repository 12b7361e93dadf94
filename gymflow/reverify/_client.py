"""The ``/verify`` client: bounded concurrency, per-request timeouts, retries (reverify.md §4 points 1-2).

httpx's API on aiohttp's transport (``httpx_aiohttp.AiohttpTransport``), one transport per call
with keep-alive and a pool sized to the concurrency. Requests are ``httpx.Request`` objects sent
straight to the transport: ``AsyncClient``'s per-request work (request merging, the cookie jar,
redirect and auth hooks) cost 4x the transport's own time and none of it applies to ``/verify``.
Tests inject a transport factory (``httpx.MockTransport``). Each request ends as an answer (a JSON
object) or a failure (the §4 point 1 fields); nothing here raises for a single row.
"""

from __future__ import annotations

import asyncio
import functools
import random
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

__all__ = ["ClientSettings", "Request", "Result", "TransportFactory", "verify_requests"]

TransportFactory = Callable[[int], httpx.AsyncBaseTransport]
"""Builds the transport of one client, given the pool size."""

_RETRIED = frozenset({429} | set(range(500, 600)))
_HEADERS = httpx.Headers({"content-type": "application/json"})
_BODY_CHARS = 2000


@dataclass(frozen=True)
class ClientSettings:
    concurrency: int = 32
    timeout_s: float = 300.0
    max_attempts: int = 4
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 30.0
    retry_after_cap_s: float = 60.0


@dataclass(frozen=True, slots=True)
class Request:
    """One POST: the full URL and the serialized body."""

    url: str
    content: bytes


@dataclass(slots=True)
class Result:
    """An answer object, or the failure fields of §4 point 1."""

    answer: dict[str, Any] | None
    failure: dict[str, Any] | None = None


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle takes ~40 ms: once per process, not once per batch.
    return httpx.create_ssl_context()


def default_transport(pool: int) -> httpx.AsyncBaseTransport:
    from httpx_aiohttp import AiohttpTransport

    limits = httpx.Limits(max_connections=pool, max_keepalive_connections=pool)
    return AiohttpTransport(verify=_ssl_context(), limits=limits)


def _retry_after(response: httpx.Response, cap: float) -> float | None:
    if response.status_code not in (429, 503):
        return None
    raw = response.headers.get("retry-after", "").strip()
    try:
        value = float(raw)
    except ValueError:
        return None
    return min(max(value, 0.0), cap) if value == value else None


def _failure(
    kind: str, type_: str, message: str, status: int | None, body: str | None, attempts: int
) -> Result:
    return Result(
        None,
        {
            "_ng_failure_class": kind,
            "_ng_failure_type": type_,
            "_ng_failure_message": message,
            "_ng_failure_http_status": status,
            "_ng_failure_response_body": None if body is None else body[:_BODY_CHARS],
            "_ng_failure_attempts": attempts,
        },
    )


def _is_timeout(exc: BaseException) -> bool:
    """Whether a transport failure is a timeout. httpx-aiohttp maps every aiohttp connection error
    (refused, reset, dropped) to ``httpx.ConnectTimeout``: look at the aiohttp cause instead."""
    if isinstance(exc, TimeoutError) and not isinstance(exc, httpx.TransportError):
        return True
    if not isinstance(exc, httpx.TimeoutException):
        return False
    cause = exc.__cause__
    if cause is None or type(cause).__module__.split(".")[0] != "aiohttp":
        return True
    import aiohttp

    return isinstance(cause, aiohttp.ServerTimeoutError | TimeoutError)


@functools.lru_cache(maxsize=256)
def _url(url: str) -> httpx.URL:
    # Parsing the URL was a third of httpx.Request's cost; a run posts to a handful of URLs.
    return httpx.URL(url)


async def _send(
    transport: httpx.AsyncBaseTransport, request: Request, timeouts: dict[str, float]
) -> httpx.Response:
    wire = httpx.Request(
        "POST", _url(request.url), content=request.content, headers=_HEADERS, extensions={"timeout": timeouts}
    )
    response = await transport.handle_async_request(wire)
    try:
        await response.aread()
    finally:
        await response.aclose()
    return response


async def _one(transport: httpx.AsyncBaseTransport, request: Request, settings: ClientSettings) -> Result:
    timeouts = {name: settings.timeout_s for name in ("connect", "read", "write", "pool")}
    last: Result = _failure("verify_connection_error", "NoAttempt", "no attempt made", None, None, 0)
    for attempt in range(1, settings.max_attempts + 1):
        wait: float | None = None
        try:
            async with asyncio.timeout(settings.timeout_s):
                response = await _send(transport, request, timeouts)
        except (TimeoutError, httpx.TransportError) as exc:
            if _is_timeout(exc):
                last = _failure(
                    "verify_timeout",
                    type(exc).__name__,
                    f"POST {request.url} gave no answer within {settings.timeout_s:g} s",
                    None,
                    None,
                    attempt,
                )
            else:
                last = _failure(
                    "verify_connection_error",
                    "ConnectError" if isinstance(exc, httpx.ConnectTimeout) else type(exc).__name__,
                    f"POST {request.url} failed: {exc or type(exc).__name__}",
                    None,
                    None,
                    attempt,
                )
        else:
            status = response.status_code
            if 200 <= status < 300:
                try:
                    answer = orjson.loads(response.content)
                except orjson.JSONDecodeError:
                    answer = None
                if isinstance(answer, dict):
                    return Result(answer)
                return _failure(
                    "verify_invalid_response",
                    "InvalidResponse",
                    f"POST {request.url} answered HTTP {status} with a body that is not a JSON object",
                    status,
                    response.text,
                    attempt,
                )
            last = _failure(
                "verify_http_error",
                "HTTPStatusError",
                f"POST {request.url} answered HTTP {status}",
                status,
                response.text,
                attempt,
            )
            if status not in _RETRIED:
                return last
            wait = _retry_after(response, settings.retry_after_cap_s)
        if attempt < settings.max_attempts:
            if wait is None:
                wait = random.uniform(
                    0.0, min(settings.backoff_cap_s, settings.backoff_base_s * 2 ** (attempt - 1))
                )
            await asyncio.sleep(wait)
    return last


async def _verify_all(
    requests: Sequence[Request],
    settings: ClientSettings,
    on_result: Callable[[int, Result], None],
    transport: TransportFactory | None,
) -> None:
    pool = max(1, min(settings.concurrency, len(requests)))
    factory = transport or default_transport
    async with factory(pool) as sender:
        position = 0

        async def worker() -> None:
            nonlocal position
            while position < len(requests):
                index = position
                position += 1
                on_result(index, await _one(sender, requests[index], settings))

        await asyncio.gather(*(worker() for _ in range(pool)))


def verify_requests(
    requests: Sequence[Request],
    settings: ClientSettings,
    on_result: Callable[[int, Result], None],
    transport: TransportFactory | None = None,
) -> None:
    """POST every request, at most ``settings.concurrency`` in flight, calling ``on_result(index,
    result)`` in completion order. Runs its own event loop: callable from any thread."""
    if not requests:
        return
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(_verify_all(requests, settings, on_result, transport))


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when it is installed (a faster loop for the same code), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory

"""The ``/verify`` client: bounded concurrency, per-request timeouts, retries (reverify.md §4 points 1-2).

Three senders behind one retry/classification loop (:func:`_attempts`), so all classify every outcome
identically (failure class and type, retried statuses, backoff with full jitter, ``Retry-After``,
the per-request timeout):

* for servers that are all plain ``http://`` (the default case), :class:`_WireSender`: the
  prebuilt body bytes posted on keep-alive connections of the event loop's own protocol layer
  (:mod:`gymflow.reverify._wire`), at most one connection per worker in use. An attempt whose
  connection cannot be opened is made by aiohttp instead, so its failure reads as aiohttp words it;
* when any server is ``https://``, :class:`_AiohttpSender`: one ``aiohttp.ClientSession`` per
  :func:`verify_stream` call, a ``TCPConnector`` limited to the concurrency, keep-alive. No
  per-request ``httpx`` objects: building an ``httpx.Request``, ``Response.aread()`` and the
  ``httpx-aiohttp`` adapter cost twice aiohttp's own time per request, and the adapter reports
  every aiohttp connection error as ``ConnectTimeout``;
* an injected :data:`TransportFactory` (``httpx.MockTransport`` in unit tests, or any httpx
  transport): :class:`_HttpxSender`, ``httpx.Request`` objects sent straight to the transport.
  httpx is imported only then (it cost a run ~0.2 s of start-up).

Requests come from an iterator that is pulled lazily (at most ``concurrency`` rows built ahead), so
a run keeps ``concurrency`` requests in flight across what used to be batch boundaries. Each
request ends as an answer (a JSON object) or a failure (the §4 point 1 fields); nothing here raises
for a single row.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import random
import sys
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import orjson

from gymflow import blocking_http, threads
from gymflow.reverify import _wire
from gymflow.reverify._classes import FailureClass
from gymflow.reverify._deadlines import Deadlines

__all__ = [
    "ClientSettings",
    "Request",
    "Result",
    "Stream",
    "TransportFactory",
    "failure_fields",
    "secure",
    "verify_requests",
    "verify_stream",
]

if TYPE_CHECKING:
    import httpx

TransportFactory = Callable[[int], "httpx.AsyncBaseTransport"]
"""Builds the transport of one client, given the pool size."""

T = TypeVar("T")
R = TypeVar("R")

_RETRIED = frozenset({429} | set(range(500, 600)))
_AIO_HEADERS = {"Content-Type": "application/json"}
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
    """An answer object, or the failure fields of §4 point 1. An answer keeps the HTTP status and
    the body it was parsed from (for the failure row of an answer that turns out malformed)."""

    answer: dict[str, Any] | None
    failure: dict[str, Any] | None = None
    status: int | None = None
    body: bytes | None = None
    attempts: int = 0


@dataclass(frozen=True, slots=True)
class _Reply:
    """What a sender returns for an answered request."""

    status: int
    retry_after: str | None
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class _Sender(Protocol):
    async def post(self, request: Request) -> _Reply: ...


def secure(urls: Iterable[str]) -> bool:
    """Whether any of ``urls`` is ``https``. A client for plain-HTTP servers only is made without
    TLS settings (aiohttp's ``ssl=False``): it never loads a CA bundle, which costs ~40 ms."""
    return any(url.lower().startswith("https:") for url in urls)


class _AiohttpSender:
    def __init__(self, session: Any) -> None:
        self.session = session

    async def post(self, request: Request) -> _Reply:
        async with self.session.post(request.url, data=request.content, headers=_AIO_HEADERS) as response:
            body = await response.read()
            return _Reply(response.status, response.headers.get("Retry-After"), body)


class _WireSender:
    """Plain-HTTP requests on :class:`~gymflow.reverify._wire.Pool`; an attempt whose connection
    cannot be opened is made by aiohttp instead (started then), so a refused or unresolvable
    server's failure reads as aiohttp words it."""

    def __init__(self, stack: AsyncExitStack, workers: int) -> None:
        self.pool = _wire.Pool()
        self.stack = stack
        self.workers = workers
        self.fallback: _AiohttpSender | None = None

    async def post(self, request: Request) -> _Reply:
        try:
            reply = await self.pool.post(request.url, request.content)
        except _wire.CannotConnect:
            if self.fallback is None:
                session = await self.stack.enter_async_context(_aiohttp_session(self.workers, False))
                self.fallback = _AiohttpSender(session)
            return await self.fallback.post(request)
        return _Reply(reply.status, reply.retry_after, reply.body)


@functools.lru_cache(maxsize=256)
def _url(url: str) -> httpx.URL:
    import httpx

    # Parsing the URL was a third of httpx.Request's cost; a run posts to a handful of URLs.
    return httpx.URL(url)


class _HttpxSender:
    def __init__(self, transport: httpx.AsyncBaseTransport, timeout_s: float) -> None:
        import httpx

        self.httpx = httpx
        self.transport = transport
        self.headers = httpx.Headers({"content-type": "application/json"})
        self.timeouts = {name: timeout_s for name in ("connect", "read", "write", "pool")}

    async def post(self, request: Request) -> _Reply:
        wire = self.httpx.Request(
            "POST",
            _url(request.url),
            content=request.content,
            headers=self.headers,
            extensions={"timeout": self.timeouts},
        )
        response = await self.transport.handle_async_request(wire)
        try:
            body = await response.aread()
        finally:
            await response.aclose()
        return _Reply(response.status_code, response.headers.get("retry-after"), body)


def _retry_after(reply: _Reply, cap: float) -> float | None:
    if reply.status not in (429, 503):
        return None
    raw = (reply.retry_after or "").strip()
    try:
        value = float(raw)
    except ValueError:
        return None
    return min(max(value, 0.0), cap) if value == value else None


def failure_fields(
    kind: FailureClass, type_: str, message: str, status: int | None, body: str | None, attempts: int
) -> dict[str, Any]:
    """The ``_ng_failure_*`` fields of a row that failed (§4 point 1)."""
    return {
        "_ng_failure_class": kind,
        "_ng_failure_type": type_,
        "_ng_failure_message": message,
        "_ng_failure_http_status": status,
        "_ng_failure_response_body": None if body is None else body[:_BODY_CHARS],
        "_ng_failure_attempts": attempts,
    }


def _failure(
    kind: FailureClass, type_: str, message: str, status: int | None, body: str | None, attempts: int
) -> Result:
    return Result(None, failure_fields(kind, type_, message, status, body, attempts))


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What a failed attempt raises: aiohttp's and httpx's errors too once they are imported (only
    then can they raise them; the plain-HTTP sender imports aiohttp only when a connection cannot be
    opened, and httpx is imported only for an injected transport)."""
    errors: tuple[type[BaseException], ...] = (TimeoutError, OSError)
    aiohttp, httpx = sys.modules.get("aiohttp"), sys.modules.get("httpx")
    if aiohttp is not None:
        errors = (*errors, aiohttp.ClientError)
    if httpx is not None:
        errors = (*errors, httpx.TransportError)
    return errors


def _is_timeout(exc: BaseException) -> bool:
    """Whether a transport failure is a timeout. An httpx transport on aiohttp may report an aiohttp
    connection error (refused, reset, dropped) as ``httpx.ConnectTimeout``: look at the aiohttp
    cause instead."""
    httpx = sys.modules.get("httpx")
    if httpx is None or not isinstance(exc, httpx.TransportError):
        # Past its deadline (Deadlines), aiohttp's ServerTimeoutError / ConnectionTimeoutError.
        return isinstance(exc, TimeoutError)
    if not isinstance(exc, httpx.TimeoutException):
        return False
    cause = exc.__cause__
    if cause is None or type(cause).__module__.split(".")[0] != "aiohttp":
        return True
    return isinstance(cause, TimeoutError)


def _error_type(exc: BaseException) -> str:
    """The ``_ng_failure_type`` of a connection failure: ``ConnectError`` for a refused connection
    whichever sender saw it, else the exception's class name."""
    httpx = sys.modules.get("httpx")
    if type(exc).__name__ == "ClientConnectorError" or (httpx and isinstance(exc, httpx.ConnectTimeout)):
        return "ConnectError"
    return type(exc).__name__


def _transport_failure(exc: BaseException, request: Request, timeout_s: float, attempt: int) -> Result:
    if _is_timeout(exc):
        message = f"POST {request.url} gave no answer within {timeout_s:g} s"
        return _failure("verify_timeout", type(exc).__name__, message, None, None, attempt)
    message = f"POST {request.url} failed: {exc or type(exc).__name__}"
    return _failure("verify_connection_error", _error_type(exc), message, None, None, attempt)


def _answered(reply: _Reply, request: Request, attempt: int) -> Result:
    status = reply.status
    if 200 <= status < 300:
        try:
            answer = orjson.loads(reply.body)
        except orjson.JSONDecodeError as exc:
            # NaN, Infinity and numbers beyond the float range (1e999) are refused here too.
            message = f"POST {request.url} answered HTTP {status} with a body that is not valid JSON ({exc})"
            return _failure(
                "verify_invalid_response", "InvalidResponse", message, status, reply.text, attempt
            )
        if isinstance(answer, dict):
            return Result(answer, status=status, body=reply.body, attempts=attempt)
        message = f"POST {request.url} answered HTTP {status} with a body that is not a JSON object"
        return _failure("verify_invalid_response", "InvalidResponse", message, status, reply.text, attempt)
    message = f"POST {request.url} answered HTTP {status}"
    return _failure("verify_http_error", "HTTPStatusError", message, status, reply.text, attempt)


async def _attempts(
    sender: _Sender, request: Request, settings: ClientSettings, deadlines: Deadlines
) -> Result:
    last = _failure("verify_connection_error", "NoAttempt", "no attempt made", None, None, 0)
    for attempt in range(1, settings.max_attempts + 1):
        wait: float | None = None
        try:
            reply = await deadlines.run(sender.post(request))
        except Exception as exc:
            if not isinstance(exc, _transport_errors()):
                raise
            last = _transport_failure(exc, request, settings.timeout_s, attempt)
        else:
            last = _answered(reply, request, attempt)
            if last.answer is not None or reply.status not in _RETRIED:
                return last
            wait = _retry_after(reply, settings.retry_after_cap_s)
        if attempt < settings.max_attempts:
            if wait is None:
                cap = min(settings.backoff_cap_s, settings.backoff_base_s * 2 ** (attempt - 1))
                wait = random.uniform(0.0, cap)
            await _sleep_at_least(wait)
    return last


async def _sleep_at_least(seconds: float) -> None:
    """Sleep ``seconds`` or longer: an event loop may run a timer up to its clock's resolution early
    (uvloop's is a millisecond), and a server's ``Retry-After`` is a minimum."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        await asyncio.sleep(left)


async def _drive(
    items: Iterator[tuple[T, Request]],
    sender: _Sender,
    settings: ClientSettings,
    on_result: Callable[[T, Result], None],
    workers: int,
) -> None:

    async def worker(deadlines: Deadlines) -> None:
        # Pulling from the shared iterator is synchronous: no two workers ever build the same row.
        for tag, request in items:
            on_result(tag, await _attempts(sender, request, settings, deadlines))

    async with Deadlines(settings.timeout_s) as deadlines:
        # gather, not a TaskGroup: the first error propagates as itself (an InputError or a storage
        # error from ``on_result``), not wrapped in an ExceptionGroup; the other workers are cancelled.
        tasks = [asyncio.ensure_future(worker(deadlines)) for _ in range(workers)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def verify_stream(
    items: Iterable[tuple[T, Request]],
    settings: ClientSettings,
    on_result: Callable[[T, Result], None],
    transport: TransportFactory | None = None,
    *,
    pool: int | None = None,
    tls: bool = True,
) -> None:
    """POST every request of ``items`` (pulled lazily), at most ``settings.concurrency`` in flight,
    calling ``on_result(tag, result)`` in completion order. An exception from ``items`` or
    ``on_result`` cancels the requests in flight and propagates. ``tls``: whether any item may
    post to an ``https`` URL (:func:`secure`)."""
    workers = max(1, min(settings.concurrency, pool if pool is not None else settings.concurrency))
    async with AsyncExitStack() as stack:
        sender = await _sender(stack, settings, transport, workers, tls)
        await _drive(iter(items), sender, settings, on_result, workers)


async def _sender(
    stack: AsyncExitStack,
    settings: ClientSettings,
    transport: TransportFactory | None,
    workers: int,
    tls: bool,
) -> _Sender:
    """The sender of a stream of ``workers`` requests in flight, closed with ``stack``."""
    if transport is not None:
        sent = await stack.enter_async_context(transport(workers))
        return _HttpxSender(sent, settings.timeout_s)
    if tls:
        session = await stack.enter_async_context(_aiohttp_session(workers, tls))
        return _AiohttpSender(session)
    wire = _WireSender(stack, workers)
    stack.callback(wire.pool.close)
    return wire


class Stream:
    """One event loop, on a thread of its own, and one sender (its connections kept alive) for
    batches verified one after another, as the Prefect path's tasks verify theirs: no batch starts
    a loop and opens its connections anew. :meth:`verify` is :func:`verify_stream` on it; a
    ``with`` block closes it."""

    def __init__(self, settings: ClientSettings, transport: TransportFactory | None, tls: bool) -> None:
        self._settings = settings
        factory = _loop_factory()
        self._loop = factory() if factory is not None else asyncio.new_event_loop()
        self._stack = AsyncExitStack()
        # In a copy of this context: the rows, read as their requests go out, are read with the
        # run's storage options.
        self._thread = threads.start(self._loop.run_forever, name="gymflow-verify")
        workers = max(1, settings.concurrency)
        self._workers = workers
        try:
            self._sender = self._call(_sender(self._stack, settings, transport, workers, tls))
        except BaseException:
            self._stop()
            raise

    def _call(self, coroutine: Coroutine[Any, Any, R]) -> R:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            concurrent.futures.wait([future])
            raise

    def verify(self, items: Iterable[tuple[T, Request]], on_result: Callable[[T, Result], None]) -> None:
        """POST every request of ``items`` on the stream's loop (``on_result`` is called there),
        waiting until the last has its outcome."""
        self._call(_drive(iter(items), self._sender, self._settings, on_result, self._workers))

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._call(self._stack.aclose())
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


def _aiohttp_session(workers: int, tls: bool) -> Any:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=workers, ssl=blocking_http.tls_context() if tls else False)
    timeout = aiohttp.ClientTimeout(total=None)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, cookie_jar=aiohttp.DummyCookieJar())


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
    tls = secure(request.url for request in requests)
    run(verify_stream(enumerate(requests), settings, on_result, transport, pool=len(requests), tls=tls))


def run(coroutine: Any) -> None:
    """Run ``coroutine`` to completion on a new event loop (uvloop's when installed)."""
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(coroutine)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when it is installed (a faster loop for the same code), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory

"""Blocking HTTP requests on the standard library's ``http.client``, for the few small exchanges
outside the ``/verify`` stream: the launcher's "is a server up?" probe, the ReverifyMode guard,
``POST /aggregate_metrics`` and the probe of what answers on the local Prefect server's port.

An httpx client cost every re-verification about 0.2 s of start-up (importing httpx and, at its
first client, httpcore and whatever it imports) for three or four requests. Here each request
opens its own connection (HTTP/1.1, no proxy: the ``/verify`` stream uses none either) and closes
it; ``https`` URLs are checked against :func:`tls_context`'s CA bundle. A request that gets no
answer raises a :class:`TransportError` whose class names what failed (``ConnectError``,
``ConnectTimeout``, ``ReadTimeout``, ...); any answer, whatever its status, is a :class:`Reply`.
"""

from __future__ import annotations

import functools
import http.client
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "ConnectError",
    "ConnectTimeout",
    "ReadError",
    "ReadTimeout",
    "RemoteProtocolError",
    "Reply",
    "TimeoutException",
    "TransportError",
    "request",
    "tls_context",
]


class TransportError(Exception):
    """No HTTP answer."""


class TimeoutException(TransportError):
    """No answer within the timeout."""


class ConnectError(TransportError):
    """The connection could not be opened (refused, unresolvable host, TLS handshake)."""


class ConnectTimeout(TimeoutException):
    """The connection was not open within the timeout."""


class ReadError(TransportError):
    """The connection failed while the request was sent or its answer read."""


class ReadTimeout(TimeoutException):
    """The answer did not come within the timeout."""


class RemoteProtocolError(TransportError):
    """The server closed the connection without an answer, or answered something that is not HTTP."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: Mapping[str, str]
    """The answer's headers, names in lower case."""
    body: bytes

    @property
    def is_success(self) -> bool:
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings of every ``https`` request gymflow makes: certifi's CA bundle when it is
    installed (as httpx and aiohttp clients trust), else the system's. Loading the bundle takes
    ~40 ms: once per process."""
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def request(
    method: str,
    url: str,
    *,
    timeout_s: float,
    body: bytes | Iterable[bytes] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """Send one request to ``url`` and read its whole answer. ``timeout_s`` bounds each step
    (connecting, each write, each read), not the whole exchange. An iterable ``body`` is sent piece
    by piece; give its ``Content-Length`` in ``headers`` (else it is sent chunked)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError as exc:  # a port that is not a number, or out of range
        raise ConnectError(f"invalid URL {url!r}: {exc}") from None
    host = parts.hostname or ""
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(host, port, timeout=timeout_s, context=tls_context())
    elif parts.scheme == "http":
        connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
    else:
        raise ConnectError(f"unsupported URL scheme in {url!r}")
    try:
        try:
            connection.connect()
        except TimeoutError as exc:
            raise ConnectTimeout(str(exc) or "timed out") from exc
        except OSError as exc:  # refused, unreachable, unresolvable, TLS handshake
            raise ConnectError(str(exc) or type(exc).__name__) from exc
        try:
            connection.request(method, path, body=body, headers=dict(headers or {}))
            response = connection.getresponse()
            data = response.read()
        except TimeoutError as exc:
            raise ReadTimeout(str(exc) or "timed out") from exc
        except (http.client.HTTPException, ConnectionResetError, BrokenPipeError) as exc:
            # RemoteDisconnected, BadStatusLine, IncompleteRead: the exchange did not end in an answer.
            detail = str(exc) or type(exc).__name__
            raise RemoteProtocolError(detail) from exc
        except OSError as exc:
            raise ReadError(str(exc) or type(exc).__name__) from exc
        answer_headers = {name.lower(): value for name, value in response.getheaders()}
        return Reply(response.status, answer_headers, data)
    finally:
        connection.close()

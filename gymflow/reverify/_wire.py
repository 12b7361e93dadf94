"""A plain-HTTP/1.1 ``POST`` over keep-alive connections, on the event loop's own protocol layer.

The ``/verify`` client's sender for ``http://`` servers (:mod:`gymflow.reverify._client`): one
``transport.write`` of the head and body per request, the answer parsed as it arrives
(``Content-Length``, chunked, or until the server closes), the connection kept for the next
request unless either side says ``close``. aiohttp's request machinery cost twice the rest of a
row's work; this does what a POST of prebuilt JSON bytes needs and no more.

Outcomes keep aiohttp's wording where a row records it: a server that closes the connection
before its answer is complete raises :class:`ServerDisconnectedError` (``Server disconnected``);
a connection that cannot be opened is left to the caller (:class:`CannotConnect`), which asks
aiohttp to make that attempt, so its failure reads exactly as aiohttp words it.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

__all__ = ["CannotConnect", "Pool", "ServerDisconnectedError", "WireReply"]

_MAX_HEAD = 1 << 16


class ServerDisconnectedError(ConnectionError):
    """The server closed the connection before its answer was complete (aiohttp's name and text)."""

    def __init__(self, message: str = "Server disconnected") -> None:
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0])


class CannotConnect(Exception):
    """No connection could be opened; nothing was sent."""


@dataclass(frozen=True, slots=True)
class WireReply:
    status: int
    retry_after: str | None
    body: bytes


@dataclass(frozen=True, slots=True)
class _Target:
    host: str
    port: int
    head: bytes
    """The request line and headers up to (not including) ``Content-Length``."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection: at most one request in flight."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[None] | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def eof_received(self) -> bool:
        self.lost = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    @property
    def usable(self) -> bool:
        """Open, and nothing arrived while it was idle."""
        transport = self.transport
        return not self.lost and not self.buffer and transport is not None and not transport.is_closing()

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()

    async def more(self) -> bool:
        """Wait for more bytes; False once the server has closed."""
        if self.lost:
            return False
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None
        return bool(self.buffer) or not self.lost

    async def exchange(self, data: bytes) -> WireReply:
        assert self.transport is not None
        self.buffer.clear()
        self.transport.write(data)
        end = await self._head_end()
        head = bytes(self.buffer[:end])
        del self.buffer[: end + 4]
        status, headers, keep = _parse_head(head)
        length = headers.get("content-length")
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = await self._chunked()
        elif length is not None:
            body = await self._exactly(_content_length(length))
        elif status in (204, 304) or 100 <= status < 200:
            body = b""
        else:
            body = await self._until_closed()
            keep = False
        if self.buffer:
            keep = False  # bytes nobody asked for: this connection is not trusted again
        encoding = headers.get("content-encoding", "").lower()
        if encoding in ("gzip", "deflate"):
            body = _decompressed(body, encoding)
        if not keep:
            self.close()
        return WireReply(status, headers.get("retry-after"), body)

    async def _head_end(self) -> int:
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end >= 0:
                return end
            if len(self.buffer) > _MAX_HEAD or not await self.more():
                raise ServerDisconnectedError()

    async def _exactly(self, length: int) -> bytes:
        while len(self.buffer) < length:
            if not await self.more():
                raise ServerDisconnectedError()
        body = bytes(self.buffer[:length])
        del self.buffer[:length]
        return body

    async def _until_closed(self) -> bytes:
        while await self.more():
            pass
        body = bytes(self.buffer)
        self.buffer.clear()
        return body

    async def _chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            line = await self._line()
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ServerDisconnectedError() from None
            if size == 0:
                while await self._line():  # trailers, up to the empty line
                    pass
                return b"".join(parts)
            parts.append(await self._exactly(size))
            if await self._line():
                raise ServerDisconnectedError()

    async def _line(self) -> bytes:
        while True:
            end = self.buffer.find(b"\r\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 2]
                return line
            if not await self.more():
                raise ServerDisconnectedError()


def _parse_head(head: bytes) -> tuple[int, dict[str, str], bool]:
    """Status, headers (lower-case names; a repeated one keeps its first value) and keep-alive."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ServerDisconnectedError()
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers.setdefault(name.strip().lower(), value.strip())
    connection = headers.get("connection", "").lower()
    keep = "close" not in connection if parts[0] != "HTTP/1.0" else "keep-alive" in connection
    return int(parts[1]), headers, keep


def _content_length(value: str) -> int:
    try:
        length = int(value)
    except ValueError:
        raise ServerDisconnectedError() from None
    if length < 0:
        raise ServerDisconnectedError()
    return length


def _decompressed(body: bytes, encoding: str) -> bytes:
    try:
        if encoding == "gzip":
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        try:
            return zlib.decompress(body)
        except zlib.error:
            return zlib.decompress(body, -zlib.MAX_WBITS)
    except zlib.error:
        raise ServerDisconnectedError() from None


class Pool:
    """Idle keep-alive connections per (host, port); ``post`` takes one (or opens one) per request."""

    def __init__(self) -> None:
        self.idle: dict[tuple[str, int], list[_Connection]] = {}
        self.targets: dict[str, _Target] = {}

    def _target(self, url: str) -> _Target:
        target = self.targets.get(url)
        if target is None:
            parts = urlsplit(url)
            host = parts.hostname or ""
            port = parts.port or 80
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            shown = f"[{host}]" if ":" in host else host
            authority = shown if port == 80 else f"{shown}:{port}"
            head = (
                f"POST {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: */*\r\n"
                "Content-Type: application/json\r\n"
            ).encode("latin-1")
            target = self.targets[url] = _Target(host, port, head)
        return target

    async def post(self, url: str, body: bytes) -> WireReply:
        """POST ``body`` to ``url`` (``http://`` only). Raises :class:`CannotConnect` when no
        connection opens, :class:`ServerDisconnectedError` or an ``OSError`` when the exchange
        fails; a cancelled exchange closes its connection."""
        target = self._target(url)
        key = (target.host, target.port)
        idle = self.idle.setdefault(key, [])
        connection: _Connection | None = None
        while idle:
            candidate = idle.pop()
            if candidate.usable:
                connection = candidate
                break
        if connection is None:
            loop = asyncio.get_running_loop()
            try:
                _, connection = await loop.create_connection(_Connection, target.host, target.port)
            except OSError as exc:
                raise CannotConnect(str(exc)) from exc
        data = b"%sContent-Length: %d\r\n\r\n%s" % (target.head, len(body), body)
        done = False
        try:
            reply = await connection.exchange(data)
            done = True
        finally:
            if not done:
                connection.close()
        if connection.usable:
            idle.append(connection)
        return reply

    def close(self) -> None:
        for connections in self.idle.values():
            for connection in connections:
                connection.close()
        self.idle.clear()

"""The plain-HTTP sender (:mod:`gymflow.reverify._wire`) against a server answering raw bytes: each
way an HTTP/1.1 answer may be framed, keep-alive reuse, and a connection closed mid-answer."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import Callable

import pytest

from gymflow.reverify._wire import CannotConnect, Pool, ServerDisconnectedError, WireReply
from tests.reverify.server_process import free_port

pytestmark = pytest.mark.timeout(30)

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"

Answer = Callable[[bytes], bytes | None]
"""The raw bytes answering one request (given its bytes); None: close without answering."""


async def _exchange(answer: Answer, posts: int) -> tuple[list[WireReply | BaseException], list[bytes], int]:
    """``posts`` POSTs one after another; the replies (or errors), the requests the server got and
    how many connections it accepted."""
    received: list[bytes] = []
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                request = head + await reader.readexactly(length)
                received.append(request)
                reply = answer(request)
                if reply is None:
                    break
                writer.write(reply)
                await writer.drain()
                if b"connection: close" in reply.lower():
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = Pool()
    replies: list[WireReply | BaseException] = []
    try:
        for i in range(posts):
            try:
                replies.append(await pool.post(f"http://127.0.0.1:{port}/verify", b'{"i":%d}' % i))
            except Exception as exc:  # noqa: BLE001 - the test looks at it
                replies.append(exc)
    finally:
        pool.close()
        await asyncio.sleep(0.05)  # the closed transports let go of their sockets
        server.close()
        await server.wait_closed()
    return replies, received, connections


def _run(answer: Answer, posts: int = 2) -> tuple[list[WireReply | BaseException], list[bytes], int]:
    return asyncio.run(_exchange(answer, posts))


def test_content_length_answers_reuse_one_connection() -> None:
    replies, received, connections = _run(
        lambda request: (
            b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{"reward":1}'
        ),
        posts=3,
    )
    assert [r.body for r in replies if isinstance(r, WireReply)] == [b'{"reward":1}'] * 3
    assert connections == 1
    first = received[0]
    assert first.startswith(b"POST /verify HTTP/1.1\r\n")
    assert b"\r\nContent-Type: application/json\r\n" in first and first.endswith(b'\r\n\r\n{"i":0}')
    assert b"\r\nContent-Length: 7\r\n" in first


def test_chunked_answer_and_headers() -> None:
    body = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
    body += b'4\r\n{"a"\r\n3;ext=1\r\n:1}\r\n0\r\nX-Trailer: t\r\n\r\n'
    replies, _, connections = _run(lambda request: body)
    assert all(isinstance(r, WireReply) for r in replies)
    reply = replies[0]
    assert isinstance(reply, WireReply)
    assert (reply.status, reply.retry_after, reply.body) == (429, "2", b'{"a":1}')
    assert connections == 1


def test_connection_close_and_close_delimited_answers_open_a_new_connection() -> None:
    replies, _, connections = _run(lambda request: b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n[1,2]")
    assert [r.body for r in replies if isinstance(r, WireReply)] == [b"[1,2]", b"[1,2]"]
    assert connections == 2


def test_gzip_answer_is_decompressed() -> None:
    packed = gzip.compress(b'{"reward":0.5}')
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(packed)
    replies, _, _ = _run(lambda request: head + packed, posts=1)
    reply = replies[0]
    assert isinstance(reply, WireReply) and reply.body == b'{"reward":0.5}'


@pytest.mark.parametrize(
    "answer",
    [
        lambda request: None,  # closed without answering
        lambda request: (
            b'HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 50\r\n\r\n{"cut'
        ),  # cut mid-body
        lambda request: b"garbage\r\n\r\n",  # not an HTTP answer
    ],
    ids=["closed", "cut", "garbage"],
)
def test_an_incomplete_answer_is_server_disconnected(answer: Answer) -> None:
    replies, _, _ = _run(answer, posts=1)
    assert isinstance(replies[0], ServerDisconnectedError)
    assert str(replies[0]) == "Server disconnected"


def test_refused_connection_is_cannot_connect() -> None:
    async def post() -> None:
        await Pool().post(f"http://127.0.0.1:{free_port()}/verify", b"{}")

    with pytest.raises(CannotConnect):
        asyncio.run(post())

"""What answers on a loopback port (``flows._server._identify``), against real HTTP servers on
127.0.0.1: a Prefect-like API naming its home, one whose settings are unreadable but whose health
answers, something else, a listener that never answers, and nothing at all."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.server_homes import free_port

Routes = dict[str, tuple[int, bytes]]


@contextmanager
def _serving(routes: Routes) -> Iterator[int]:
    """An HTTP server on 127.0.0.1 answering each path of ``routes`` with its status and body
    (404 elsewhere); its port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = routes.get(self.path, (404, b"{}"))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def _silent_listener() -> Iterator[int]:
    """A socket that accepts connections (the kernel's backlog) and never answers; its port."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


SETTINGS = "/api/admin/settings"
HEALTH = "/api/health"


@pytest.mark.parametrize(
    ("routes", "kind", "home"),
    [
        ({SETTINGS: (200, b'{"home": "/srv/prefect-home"}')}, "prefect", Path("/srv/prefect-home")),
        ({SETTINGS: (200, b'{"home": ""}'), HEALTH: (200, b"true")}, "prefect", None),
        ({SETTINGS: (401, b"{}"), HEALTH: (200, b"true")}, "prefect", None),
        ({SETTINGS: (200, b"not json"), HEALTH: (200, b"true")}, "other", None),
        ({SETTINGS: (200, b"[1, 2]")}, "other", None),
        ({HEALTH: (500, b"{}")}, "other", None),
    ],
)
def test_what_answers_on_a_port(routes: Routes, kind: str, home: Path | None) -> None:
    from gymflow.flows._server import _identify

    with _serving(routes) as port:
        answer = _identify(port)
    assert (answer.kind, answer.home) == (kind, home)


def test_a_listener_that_never_answers_is_something_else() -> None:
    from gymflow.flows._server import _identify

    with _silent_listener() as port:
        assert _identify(port, timeout=0.3).kind == "other"


def test_a_closed_port_is_nothing() -> None:
    from gymflow.flows._server import _identify

    assert _identify(free_port(), timeout=0.5).kind == "nothing"

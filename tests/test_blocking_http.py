"""gymflow.blocking_http against real loopback servers: answers of any status, bodies sent whole or
in pieces, and each way an exchange can end without an answer."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gymflow import blocking_http

pytestmark = pytest.mark.timeout(30)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        status = int(self.path.rsplit("/", 1)[-1]) if self.path.startswith("/status/") else 200
        body = b'"stateless"'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Retry-After", "7")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        if "chunked" in self.headers.get("Transfer-Encoding", ""):
            raise AssertionError("a body of known length was sent chunked")
        data = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_any_status_is_an_answer(server: str) -> None:
    ok = blocking_http.request("GET", f"{server}/reverify_mode", timeout_s=5)
    assert (ok.status, ok.is_success, ok.body, ok.text) == (200, True, b'"stateless"', '"stateless"')
    assert ok.headers["retry-after"] == "7" and ok.headers["content-type"] == "application/json"
    busy = blocking_http.request("GET", f"{server}/status/503", timeout_s=5)
    assert (busy.status, busy.is_success) == (503, False)


def test_a_body_in_pieces_is_sent_as_it_is(server: str) -> None:
    pieces = [b'{"verify_responses":[', b"1,2", b"]}"]
    headers = {"Content-Type": "application/json", "Content-Length": str(sum(map(len, pieces)))}
    reply = blocking_http.request(
        "POST", f"{server}/aggregate_metrics", body=iter(pieces), headers=headers, timeout_s=5
    )
    assert reply.body == b"".join(pieces)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_nothing_listening_is_a_connect_error() -> None:
    with pytest.raises(blocking_http.ConnectError, match="refused"):
        blocking_http.request("GET", f"http://127.0.0.1:{_free_port()}/", timeout_s=5)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A socket that accepts connections and answers nothing unless the test does."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock
    sock.close()


def _url(sock: socket.socket) -> str:
    return f"http://127.0.0.1:{sock.getsockname()[1]}/"


def test_no_answer_in_time_is_a_read_timeout(listener: socket.socket) -> None:
    with pytest.raises(blocking_http.ReadTimeout) as raised:
        blocking_http.request("GET", _url(listener), timeout_s=0.2)
    assert isinstance(raised.value, blocking_http.TimeoutException)


def test_a_connection_closed_without_an_answer(listener: socket.socket) -> None:
    def close_after_reading() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.close()

    thread = threading.Thread(target=close_after_reading, daemon=True)
    thread.start()
    with pytest.raises(blocking_http.RemoteProtocolError):
        blocking_http.request("GET", _url(listener), timeout_s=5)
    thread.join(5)


def test_an_unknown_scheme_or_a_bad_port_is_a_connect_error() -> None:
    with pytest.raises(blocking_http.ConnectError, match="unsupported URL scheme"):
        blocking_http.request("GET", "ftp://127.0.0.1/x", timeout_s=1)
    with pytest.raises(blocking_http.ConnectError, match="invalid URL 'http://127.0.0.1:port/'"):
        blocking_http.request("GET", "http://127.0.0.1:port/", timeout_s=1)


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTPS server on loopback with a self-signed certificate for 127.0.0.1 (made by openssl)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{httpd.server_port}", cert
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_https_is_verified_against_the_ca_bundle(
    tls_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cert = tls_server
    # A certificate no CA of the bundle signed: refused, as a connection that could not be opened.
    with pytest.raises(blocking_http.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        blocking_http.request("GET", f"{url}/reverify_mode", timeout_s=5)
    # The same server, its certificate trusted: the request goes through TLS and is answered.
    monkeypatch.setattr(blocking_http, "tls_context", lambda: ssl.create_default_context(cafile=str(cert)))
    reply = blocking_http.request("GET", f"{url}/reverify_mode", timeout_s=5)
    assert (reply.status, reply.body) == (200, b'"stateless"')

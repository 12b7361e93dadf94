"""``gymflow view``'s HTTP server: the standard library's threaded server on 127.0.0.1, serving
the pages of one run (:func:`gymflow.view.server_page`). The run's reports are read and its
rollouts indexed at start (and again when a local run's files change); every request renders
from memory plus range reads.

Only loopback Host headers are answered (a page elsewhere cannot reach it by DNS rebinding), and
only the run's own provenance records can be verified.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from gymflow import provenance, storage
from gymflow.errors import GymflowError
from gymflow.view._html import document, esc
from gymflow.view._index import Filters
from gymflow.view._load import FILES, RunReports, load_run
from gymflow.view._site import PAGES, ServerLinks, server_page
from gymflow.view._urls import HOST

__all__ = ["ViewServer"]

logger = logging.getLogger(__name__)


class ViewServer:
    """Serve ``reports`` on ``HOST:port`` (0: a free port) until :meth:`stop`."""

    def __init__(self, reports: RunReports, port: int) -> None:
        self.reports = reports
        self._lock = threading.Lock()
        self._seen = self._version()
        handler = type("Handler", (_Handler,), {"view": self})
        self.httpd = ThreadingHTTPServer((HOST, port), handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}{ServerLinks(self.reports.run).page('overview')}"

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def start(self) -> ViewServer:
        """Serve from a background thread (tests, scripts)."""
        self._thread = threading.Thread(target=self.serve_forever, name="gymflow-view", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=5)
        self.httpd.server_close()

    def __enter__(self) -> ViewServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _version(self) -> tuple[tuple[int, int] | None, ...]:
        """What changes when a local run's reports are rewritten (a new file changes the
        directory's own version); all None for a remote run, which is read once."""
        reports = self.reports
        watched = [reports.run, *(reports.path(name) for name in FILES.values())]
        watched += [url for url, _ in reports.records]
        watched += [url for url in (reports.reverified_url, reports.sidecar_url) if url]
        return tuple(storage.local_version(url) for url in watched)

    def current(self) -> RunReports:
        """The run's reports, read again first when a local run's files changed (``eval post``
        ran again while the viewer was open)."""
        with self._lock:
            version = self._version()
            if version != self._seen:
                logger.info("gymflow view: %s changed, reading it again", self.reports.run)
                self.reports = load_run(self.reports.run)
                self._seen = self._version()
            return self.reports

    def render(self, path: str, query: Mapping[str, list[str]]) -> tuple[HTTPStatus, str]:
        """The status and HTML of ``GET path?query``."""
        reports = self.current()
        one = {key: values[-1] for key, values in query.items() if values}
        wanted = one.get("run")
        if wanted and wanted.rstrip("/") != reports.run:
            message = (
                f"<section><h2>Another run</h2><p>This server shows <code>{esc(reports.run)}</code>. "
                f"To see <code>{esc(wanted)}</code>, run <code>gymflow view {esc(wanted)}</code> "
                "(with --port to run both).</p></section>"
            )
            return HTTPStatus.CONFLICT, document("another run", reports.run, {}, "", message)
        parts = [p for p in path.split("/") if p]
        name = parts[0] if parts else "overview"
        if name == "rollouts":
            filters = Filters(one.get("verdict") or None, one.get("check") or None, one.get("task") or None)
            return HTTPStatus.OK, server_page(
                reports, "rollouts", filters=filters, page_number=_int(one.get("page"))
            )
        if name == "rollout" and len(parts) == 2 and reports.index is not None:
            number = _int(parts[1], -1)
            if 0 <= number < len(reports.index):
                return HTTPStatus.OK, server_page(reports, "rollout", rollout=number)
        elif name == "provenance" and parts[1:] == ["verify"]:
            record = one.get("record", "")
            if record in {url for url, _ in reports.records}:
                try:
                    checks = provenance.verify(record)
                except GymflowError as exc:
                    return HTTPStatus.INTERNAL_SERVER_ERROR, _error(reports, str(exc))
                return HTTPStatus.OK, server_page(reports, "provenance", verified={record: checks})
        elif name in PAGES and len(parts) <= 1:
            return HTTPStatus.OK, server_page(reports, name)
        return HTTPStatus.NOT_FOUND, _error(reports, f"no page {path}")


def _int(value: str | None, default: int = 0) -> int:
    try:
        return int(value) if value else default
    except ValueError:
        return default


def _error(reports: RunReports, message: str) -> str:
    return document("not found", reports.run, {}, "", f"<section><p>{esc(message)}</p></section>")


class _Handler(BaseHTTPRequestHandler):
    view: ViewServer
    server_version = "gymflow-view"

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        if host not in {"127.0.0.1", "localhost", "[::1]"}:
            self._send(HTTPStatus.FORBIDDEN, "only loopback hosts are served")
            return
        split = urlsplit(self.path)
        try:
            status, body = self.view.render(split.path, parse_qs(split.query))
        except Exception:  # a broken page must not stop the server
            logger.exception("gymflow view: rendering %s failed", self.path)
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, "rendering failed; see the server's log")
            return
        self._send(status, body, "text/html; charset=utf-8")

    def _send(self, status: HTTPStatus, body: str, kind: str = "text/plain; charset=utf-8") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server API
        logger.debug("gymflow view: " + format, *args)

"""A person's view of a run: HTML pages of its reports, served by ``gymflow view RUN`` or written
once as the self-contained ``RUN/report.html``.

Rendering is pure (report data in, HTML strings out: ``_html``, ``_pages``, ``_rollout``,
``_site``); ``_load`` reads a run's files through :mod:`gymflow.storage` and ``_index`` indexes its
rollouts by streaming, so a table of 160,000 rows pages in milliseconds. ``_server`` is the
standard library's threaded HTTP server on 127.0.0.1.

Names are imported on first use: a command that only needs :data:`DEFAULT_PORT` (every CLI
command registers ``gymflow view``) does not import the renderer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gymflow.view._index import Filters, Page, RolloutIndex, RolloutRow, build_index
    from gymflow.view._load import FILES, RunReports, StepRow, load_run
    from gymflow.view._report import WRITE_REPORT_HTML, ReportJob, write_report_html
    from gymflow.view._server import ViewServer
    from gymflow.view._site import PAGE_SIZE, STATIC_DETAILS, STATIC_ROWS, server_page, static_report
    from gymflow.view._urls import DEFAULT_PORT, HOST, page_for, view_url

__all__ = [
    "DEFAULT_PORT",
    "FILES",
    "HOST",
    "PAGE_SIZE",
    "STATIC_DETAILS",
    "STATIC_ROWS",
    "WRITE_REPORT_HTML",
    "Filters",
    "Page",
    "ReportJob",
    "RolloutIndex",
    "RolloutRow",
    "RunReports",
    "StepRow",
    "ViewServer",
    "build_index",
    "load_run",
    "page_for",
    "server_page",
    "static_report",
    "view_url",
    "write_report_html",
]

_MODULES = {
    "DEFAULT_PORT": "_urls",
    "FILES": "_load",
    "Filters": "_index",
    "HOST": "_urls",
    "PAGE_SIZE": "_site",
    "Page": "_index",
    "ReportJob": "_report",
    "RolloutIndex": "_index",
    "RolloutRow": "_index",
    "RunReports": "_load",
    "STATIC_DETAILS": "_site",
    "STATIC_ROWS": "_site",
    "StepRow": "_load",
    "ViewServer": "_server",
    "WRITE_REPORT_HTML": "_report",
    "build_index": "_index",
    "load_run": "_load",
    "page_for": "_urls",
    "server_page": "_site",
    "static_report": "_site",
    "view_url": "_urls",
    "write_report_html": "_report",
}
"""The submodule that defines each public name."""


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

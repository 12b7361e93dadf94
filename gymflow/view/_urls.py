"""The addresses of ``gymflow view``: its default port and the page that shows each report.

The Prefect artifacts link every report to these URLs (``http://127.0.0.1:4280/...?run=URI``):
they open while ``gymflow view RUN`` is running with that port.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from gymflow import provenance, storage

__all__ = ["DEFAULT_PORT", "HOST", "page_for", "view_url"]

HOST = "127.0.0.1"
DEFAULT_PORT = 4280
"""Next to Prefect's 4200, and deterministic, so links written into artifacts keep working."""


def page_for(report_url: str) -> str:
    """The viewer's page (path and fragment) that shows the report named ``report_url``."""
    name = storage.name(report_url)
    if name.endswith(provenance.RECORD_SUFFIX):
        return f"provenance#record-{quote(name)}"
    if name.endswith("_failures.jsonl") or "reverified" in name:
        return "reverify"
    if name.endswith(".json") and "aggregate_metrics" in name:
        return "metrics"
    if name.endswith(".jsonl"):
        return "rollouts"
    return ""


def view_url(report_url: str, port: int = DEFAULT_PORT, run: str | None = None) -> str:
    """``gymflow view``'s URL of ``report_url`` (its run: the report's directory unless given)."""
    where = storage.to_uri(run if run is not None else storage.parent(storage.to_uri(report_url))).rstrip("/")
    page = page_for(report_url)
    path, _, fragment = page.partition("#")
    return f"http://{HOST}:{port}/{path}?{urlencode({'run': where})}" + (f"#{fragment}" if fragment else "")

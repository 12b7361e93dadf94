"""Whole pages: each page of ``gymflow view`` as its own document, and ``report.html``, every
page in one self-contained file (inline CSS, SVG and a few lines of script; no network)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from gymflow.provenance import FileCheck
from gymflow.view._html import Html, document, esc
from gymflow.view._index import Filters, Page
from gymflow.view._load import RunReports, StepRow
from gymflow.view._pages import failures_by_class, metrics_body, overview_body, provenance_body, reverify_body
from gymflow.view._rollout import rollout_body, rollouts_body

__all__ = [
    "PAGE_SIZE",
    "STATIC_DETAILS",
    "STATIC_ROWS",
    "ServerLinks",
    "StaticLinks",
    "choices",
    "server_page",
    "static_report",
]

PAGE_SIZE = 100
STATIC_ROWS = 1000
"""Rows of the rollouts table ``report.html`` holds (its first pages)."""
STATIC_DETAILS = 200
"""Rollouts ``report.html`` holds whole (findings and trajectory): the first of its table."""
PAGES = ("overview", "rollouts", "metrics", "reverify", "provenance")


@dataclass(frozen=True)
class ServerLinks:
    """Links between the pages ``gymflow view`` serves, each carrying the run's URI."""

    run: str
    static = False

    def _query(self, **params: object) -> str:
        return urlencode({"run": self.run, **{k: v for k, v in params.items() if v not in (None, "", 0)}})

    def page(self, name: str) -> str:
        return f"/{'' if name == 'overview' else name}?{self._query()}"

    def rollouts(self, filters: Filters, page: int = 0) -> str:
        return f"/rollouts?{self._query(**filters.active(), page=page)}"

    def rollout(self, number: int) -> str:
        return f"/rollout/{number}?{self._query()}"

    def verify(self, record_url: str) -> str | None:
        return f"/provenance/verify?{self._query(record=record_url)}"


@dataclass(frozen=True)
class StaticLinks:
    """Anchors inside ``report.html``; a rollout it does not hold links to the table."""

    held: frozenset[int] = frozenset()
    static = True

    def page(self, name: str) -> str:
        return f"#{name}"

    def rollouts(self, filters: Filters, page: int = 0) -> str:
        return "#rollouts"

    def rollout(self, number: int) -> str:
        return f"#rollout-{number}" if number in self.held else "#rollouts"

    def verify(self, record_url: str) -> str | None:
        return None


def choices(reports: RunReports) -> dict[str, list[str]]:
    """The values each filter offers (verdicts and checks by name, tasks in file order)."""
    index = reports.index
    if index is None:
        return {}
    return {"verdict": sorted(index.by_verdict), "check": sorted(index.by_check), "task": list(index.by_task)}


def _nav(links: ServerLinks | StaticLinks) -> dict[str, str]:
    return {name: links.page(name) for name in PAGES}


def server_page(
    reports: RunReports,
    name: str,
    *,
    filters: Filters | None = None,
    page_number: int = 0,
    rollout: int | None = None,
    verified: Mapping[str, Sequence[FileCheck]] | None = None,
) -> str:
    """Page ``name`` (one of :data:`PAGES`, or ``rollout`` with ``rollout`` set) of the server."""
    links = ServerLinks(reports.run)
    index = reports.index
    if name == "overview":
        body = overview_body(reports, links, reports.steps, failures_by_class(reports))
    elif name == "rollouts":
        if index is None:
            body = Html(
                "<section><h2>Rollouts</h2><p class=muted>no rollout_verdicts.jsonl in this run</p></section>"
            )
        else:
            filters = filters or Filters()
            body = rollouts_body(
                index.page(filters, page_number, PAGE_SIZE),
                filters,
                choices(reports),
                links,
                has_reverify=index.has_reverify,
                total_rows=len(index),
            )
    elif name == "rollout" and index is not None and rollout is not None:
        body = rollout_body(
            index.row(rollout),
            index.verdict_row(rollout),
            index.record(rollout),
            links,
            has_reverify=index.has_reverify,
        )
        name = "rollouts"
    elif name == "metrics":
        body = metrics_body(reports)
    elif name == "reverify":
        body = reverify_body(reports, links)
    elif name == "provenance":
        body = provenance_body(reports, links, verified)
    else:
        raise KeyError(name)
    return document(name, reports.run, _nav(links), name, body)


_FILTER_SCRIPT = """
(function(){var f=document.querySelector('#rollouts form.filters');if(!f)return;
function apply(){var v=f.verdict.value,c=f.check.value,t=f.task.value,n=0;
document.querySelectorAll('#rollouts table.rollouts tbody tr').forEach(function(r){
var ok=(!v||r.dataset.verdict===v)&&(!t||r.dataset.task===t)
&&(!c||(' '+r.dataset.checks+' ').indexOf(' '+c+' ')>=0);
r.style.display=ok?'':'none';if(ok)n++;});document.getElementById('shown').textContent=n;}
f.addEventListener('change',apply);f.addEventListener('input',apply);apply();})();
"""
_STATIC_CSS = (
    "<style>.page{display:none}.page:target{display:block}"
    "body:not(:has(.page:target)) #overview{display:block}</style>"
)


def static_report(
    reports: RunReports,
    steps: Sequence[StepRow],
    failures: Mapping[str, int],
    *,
    rows: int = STATIC_ROWS,
    details: int = STATIC_DETAILS,
) -> str:
    """``report.html``: every page in one file, switched by anchors (``#rollouts``, ...)."""
    index = reports.index
    held = frozenset(range(min(details, len(index)))) if index is not None else frozenset()
    links = StaticLinks(held)
    pages = [("overview", overview_body(reports, links, steps, failures))]
    if index is not None:
        page = Page([index.row(n) for n in range(min(rows, len(index)))], index.total, 0, rows)
        note = (
            f"{index.total - len(page.rows)} more are not in this file: run `gymflow view {reports.run}` "
            "to page, filter and open every rollout."
            if len(page.rows) < index.total
            else "This file holds every rollout."
        )
        table_body = rollouts_body(
            page,
            Filters(),
            choices(reports),
            links,
            has_reverify=index.has_reverify,
            total_rows=index.total,
            static_note=note,
        )
        shown = f"<p><span id=shown>{len(page.rows)}</span> rows shown by the filters above.</p>"
        pages.append(("rollouts", Html(str(table_body) + shown)))
    else:
        pages.append(
            (
                "rollouts",
                Html("<section><h2>Rollouts</h2><p class=muted>no rollout_verdicts.jsonl</p></section>"),
            )
        )
    pages += [
        ("metrics", metrics_body(reports)),
        ("reverify", reverify_body(reports, links)),
        ("provenance", provenance_body(reports, links)),
    ]
    body = [f'<div class="page" id="{esc(name)}">{html}</div>' for name, html in pages]
    if index is not None:
        for number in sorted(held):
            detail = rollout_body(
                index.row(number),
                index.verdict_row(number),
                index.record(number),
                links,
                has_reverify=index.has_reverify,
            )
            body.append(f'<div class="page" id="rollout-{number}">{detail}</div>')
    doc = document("report", reports.run, _nav(links), "", _STATIC_CSS + "".join(body), _FILTER_SCRIPT)
    return doc

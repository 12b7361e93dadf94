"""HTML building blocks of the viewer: escaping, tables, the page frame with its inline CSS, and
an inline SVG bar chart. Pure string functions, no I/O; nothing is fetched from a network."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

__all__ = ["CSS", "Html", "bar_chart", "cell", "document", "esc", "json_block", "link", "table"]


class Html(str):
    """Markup that is inserted as is (every other value is escaped)."""

    __slots__ = ()


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: Any) -> str:
    """A value as a table shows it: floats exact (``repr``), None as a dash, JSON as JSON."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value)  # exactly what the report holds (an auditor compares digits)
    if isinstance(value, (dict, list)):
        return orjson.dumps(value).decode()
    return str(value)


def cell(value: Any) -> str:
    return value if isinstance(value, Html) else esc(fmt(value))


def link(href: str, text: Any, **attrs: str) -> Html:
    extra = "".join(f' {name.rstrip("_").replace("_", "-")}="{esc(value)}"' for name, value in attrs.items())
    return Html(f'<a href="{esc(href)}"{extra}>{cell(text)}</a>')


def table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], *, css: str = "", row_attrs: Sequence[str] = ()
) -> Html:
    """A table; ``row_attrs`` (one string per row, already markup) adds attributes to each ``<tr>``."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for number, row in enumerate(rows):
        attrs = f" {row_attrs[number]}" if number < len(row_attrs) else ""
        body.append(f"<tr{attrs}>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>")
    klass = f' class="{esc(css)}"' if css else ""
    return Html(f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def json_block(value: Any) -> Html:
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    return Html(f"<pre class='json'>{esc(text)}</pre>")


def bar_chart(items: Sequence[tuple[str, int]], *, title: str) -> Html:
    """Horizontal bars, one per item, each labelled with its name and count (inline SVG)."""
    if not items:
        return Html("<p class='muted'>nothing to chart</p>")
    label_w, bar_w, row_h = 290, 360, 22
    top = max(count for _, count in items) or 1
    height = row_h * len(items) + 8
    parts = [
        f'<svg class="chart" role="img" aria-label="{esc(title)}" width="{label_w + bar_w + 60}" '
        f'height="{height}" xmlns="http://www.w3.org/2000/svg"><title>{esc(title)}</title>'
    ]
    for row, (name, count) in enumerate(items):
        y = 4 + row * row_h
        width = 0 if count <= 0 else max(2, round(bar_w * count / top))
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">{esc(name)}</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{width}" height="{row_h - 6}" '
            f'class="{"bar" if count else "bar zero"}"><title>{esc(name)}: {count}</title></rect>'
            f'<text x="{label_w + width + 6}" y="{y + 15}" class="count">{count}</text>'
        )
    parts.append("</svg>")
    return Html("".join(parts))


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;
background:#f6f7f9}
header{background:#1f2a44;color:#fff;padding:10px 18px}
header h1{font-size:17px;margin:0 0 6px 0}
header .run{font:12px monospace;opacity:.85;word-break:break-all}
nav a{color:#cfe0ff;margin-right:16px;text-decoration:none;font-weight:600}
nav a.on{color:#fff;border-bottom:2px solid #fff}
main{padding:14px 18px;max-width:1500px}
section{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:10px 14px;margin:0 0 14px 0}
h2{font-size:16px;margin:4px 0 10px}
h3{font-size:14px;margin:12px 0 6px}
table{border-collapse:collapse;margin:4px 0 8px}
th,td{border:1px solid #dde1e8;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eef1f6;font-weight:600}
td{font-variant-numeric:tabular-nums}
td.hash,.hash{font-family:monospace;font-size:12px;word-break:break-all}
.verdict-healthy{color:#17692c;font-weight:600}
.verdict-unhealthy{color:#a4161a;font-weight:600}
.verdict-unobserved{color:#8a6d00;font-weight:600}
.muted{color:#6b7385}
.note{background:#fff8e1;border:1px solid #f0d98c;padding:6px 10px;border-radius:4px}
pre.json{background:#f3f4f7;padding:6px 8px;border-radius:4px;max-height:420px;overflow:auto;
white-space:pre-wrap;word-break:break-all;font-size:12px}
.chart text{font-size:12px;fill:#1d2330}
.chart .bar{fill:#4c78c8}
.chart .bar.zero{fill:#c9ced8}
.chart .count{fill:#3b4252}
.msg{border-left:3px solid #c9ced8;padding:2px 8px;margin:4px 0;white-space:pre-wrap;
word-break:break-word}
.msg .role{font-weight:600;font-size:12px;color:#4c5567;text-transform:uppercase}
form.filters{margin:6px 0 10px}
form.filters select,form.filters input{margin-right:10px}
.pager a,.pager span{margin-right:10px}
.ok{color:#17692c;font-weight:600}
.bad{color:#a4161a;font-weight:600}
a.button{display:inline-block;background:#1f2a44;color:#fff;padding:3px 10px;border-radius:4px;
text-decoration:none}
.pill{display:inline-block;background:#eef1f6;border-radius:9px;padding:0 7px;margin:1px 2px;
font-size:12px}
"""


def document(title: str, run: str, nav: Mapping[str, str], active: str, body: str, script: str = "") -> str:
    """A whole HTML page: the header with the run's URI and navigation, then ``body``."""
    links = "".join(
        f'<a href="{esc(href)}"{" class=on" if name == active else ""}>{esc(name)}</a>'
        for name, href in nav.items()
    )
    tail = f"<script>{script}</script>" if script else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{esc(title)}</title><meta name=viewport content='width=device-width'>"
        f"<style>{CSS}</style></head><body><header><h1>gymflow · {esc(title)}</h1>"
        f"<div class=run>{esc(run)}</div><nav>{links}</nav></header><main>{body}</main>{tail}</body></html>"
    )

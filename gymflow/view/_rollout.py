"""The rollouts table (filters and pager) and one rollout: its findings, its trajectory
(messages, tool calls, model calls with their tokens) and its reward before and after reverify."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from gymflow.view._html import Html, esc, fmt, json_block, link, table
from gymflow.view._index import NOT_REVERIFIED, Filters, Page, RolloutRow

__all__ = ["Links", "message", "rollout_body", "rollouts_body", "table_rows", "verdict"]


class Links(Protocol):
    """Where the pages point: server URLs for ``gymflow view``, anchors in ``report.html``."""

    static: bool

    def page(self, name: str) -> str: ...

    def rollouts(self, filters: Filters, page: int = 0) -> str: ...

    def rollout(self, number: int) -> str: ...

    def verify(self, record_url: str) -> str | None: ...


def verdict(value: str) -> Html:
    return Html(f'<span class="verdict-{esc(value)}">{esc(value)}</span>')


def _pills(values: Sequence[str]) -> Html:
    return Html("".join(f'<span class="pill">{esc(v)}</span>' for v in values) or "—")


def _reverified(row: RolloutRow, has_reverify: bool) -> Any:
    if not has_reverify:
        return "—"
    return "not re-verified" if row.reverified is NOT_REVERIFIED else row.reverified


def table_rows(rows: Sequence[RolloutRow], links: Links, has_reverify: bool) -> Html:
    attrs = [
        f'data-verdict="{esc(r.verdict)}" data-task="{esc(r.task)}" data-checks="{esc(" ".join(r.checks))}"'
        for r in rows
    ]
    return table(
        ["#", "task", "rollout", "verdict", "checks", "reward", "reverified reward"],
        (
            [
                link(links.rollout(r.number), r.number),
                r.task,
                r.rollout if r.stage is None else f"{r.rollout} (stage {r.stage})",
                verdict(r.verdict),
                _pills(r.checks),
                r.reward,
                _reverified(r, has_reverify),
            ]
            for r in rows
        ),
        css="rollouts",
        row_attrs=attrs,
    )


MAX_OPTIONS = 200
"""A filter with more values than this is a text box (a run of 20,000 tasks)."""


def _select(name: str, values: Sequence[str], chosen: str | None) -> str:
    if len(values) > MAX_OPTIONS:
        value = esc(chosen or "")
        return (
            f'<label>{esc(name)} <input name="{esc(name)}" value="{value}" size=10 '
            f'placeholder="any of {len(values)}"></label>'
        )
    options = [f'<option value="">any {esc(name)}</option>']
    options += [
        f'<option value="{esc(v)}"{" selected" if v == chosen else ""}>{esc(v)}</option>' for v in values
    ]
    return f'<label>{esc(name)} <select name="{esc(name)}">{"".join(options)}</select></label>'


def rollouts_body(
    page: Page,
    filters: Filters,
    choices: Mapping[str, Sequence[str]],
    links: Links,
    *,
    has_reverify: bool,
    total_rows: int,
    static_note: str = "",
) -> Html:
    """The table with its filter form and pager (``report.html``: the rows it holds, filtered in
    the page by a few lines of inline script, and ``static_note`` on how to see the rest)."""
    form = (
        f'<form class="filters" method="get" action="{esc(links.page("rollouts"))}">'
        + _select("verdict", choices.get("verdict", ()), filters.verdict)
        + _select("check", choices.get("check", ()), filters.check)
        + _select("task", choices.get("task", ()), filters.task)
        + ("" if links.static else '<button type="submit">filter</button>')
        + "</form>"
    )
    if links.static:
        counts = f"<p>Showing the first {len(page.rows)} of {total_rows} rollouts. {esc(static_note)}</p>"
        pager = ""
    else:
        first = page.number * page.size + 1 if page.total else 0
        last = page.number * page.size + len(page.rows)
        active = ", ".join(f"{k} = {v}" for k, v in filters.active().items())
        counts = (
            f"<p>Rollouts {first}–{last} of {page.total} matching"
            f"{' (' + esc(active) + ')' if active else ''}; {total_rows} in the run.</p>"
        )
        steps = []
        if page.number > 0:
            steps.append(str(link(links.rollouts(filters, 0), "« first")))
            steps.append(str(link(links.rollouts(filters, page.number - 1), "‹ previous")))
        steps.append(f"<span>page {page.number + 1} of {page.pages}</span>")
        if page.number + 1 < page.pages:
            steps.append(str(link(links.rollouts(filters, page.number + 1), "next ›")))
            steps.append(str(link(links.rollouts(filters, page.pages - 1), "last »")))
        pager = f'<div class="pager">{"".join(steps)}</div>'
    rows = table_rows(page.rows, links, has_reverify)
    return Html(f"<section id=rollouts-table><h2>Rollouts</h2>{form}{counts}{pager}{rows}{pager}</section>")


def _text(content: Any) -> str:
    """The text of a message's content: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text", part.get("refusal"))
                parts.append(text if isinstance(text, str) else fmt(part))
            else:
                parts.append(fmt(part))
        return "\n".join(parts)
    return fmt(content)


def message(item: Any) -> Html:
    """One item of a Responses API input or output list as a labelled block."""
    if not isinstance(item, Mapping):
        return Html(f'<div class="msg">{esc(fmt(item))}</div>')
    kind = item.get("type", "message")
    if kind == "function_call":
        role = f"tool call {item.get('name', '?')} ({item.get('call_id', '')})"
        text = _text(item.get("arguments"))
    elif kind == "function_call_output":
        role = f"tool output ({item.get('call_id', '')})"
        text = _text(item.get("output"))
    elif kind == "reasoning":
        role = "reasoning"
        text = _text(item.get("summary") or item.get("content"))
    else:
        role = str(item.get("role", kind))
        text = _text(item.get("content"))
    return Html(f'<div class="msg"><div class="role">{esc(role)}</div>{esc(text)}</div>')


def _messages(items: Any) -> Html:
    if isinstance(items, str):
        return message({"role": "user", "content": items})
    if not isinstance(items, list):
        return Html("<p class=muted>none</p>")
    return Html("".join(message(item) for item in items))


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _model_calls(calls: Sequence[Any]) -> Html:
    if not calls:
        return Html("<p class=muted>no model calls recorded</p>")
    rows = []
    for call in calls:
        if not isinstance(call, Mapping):
            continue
        meta = call.get("response_metadata") or {}
        tokens = call.get("token_stats") or {}
        rows.append(
            [
                call.get("model_call_id"),
                meta.get("model"),
                meta.get("status_code"),
                meta.get("finish_reason") or meta.get("response_status"),
                call.get("duration_ms"),
                tokens.get("prompt_tokens"),
                tokens.get("completion_tokens"),
                tokens.get("reasoning_tokens"),
                tokens.get("total_tokens"),
            ]
        )
    summary = table(
        [
            "model call",
            "model",
            "status",
            "finish",
            "ms",
            "prompt",
            "completion",
            "reasoning",
            "total tokens",
        ],
        rows,
    )
    details = []
    for call in calls:
        if not isinstance(call, Mapping):
            continue
        request = _mapping(call.get("request"))
        response = _mapping(call.get("response"))
        details.append(
            f"<details><summary>{esc(call.get('model_call_id'))}: request and response</summary>"
            f"<h3>request</h3>{_messages(request.get('input'))}"
            f"<h3>response</h3>{_messages(response.get('output'))}</details>"
        )
    return Html(str(summary) + "".join(details))


def _trajectory(record: Mapping[str, Any]) -> Html:
    trajectory = record.get("ng_trajectory")
    params = record.get("responses_create_params")
    response = record.get("response")
    parts = []
    if isinstance(params, Mapping):
        parts.append(f"<h3>messages</h3>{_messages(params.get('input'))}")
    if isinstance(response, Mapping):
        parts.append(f"<h3>final response</h3>{_messages(response.get('output'))}")
        usage = response.get("usage")
        if isinstance(usage, Mapping):
            parts.append(table(["usage", "tokens"], [[k, v] for k, v in usage.items()]))
    if isinstance(trajectory, Mapping):
        turns = [t for t in trajectory.get("turns") or [] if isinstance(t, Mapping)]
        parts.append("<h3>turns</h3>")
        parts.append(
            table(
                ["turn", "question", "answer", "steps", "model calls"],
                [
                    [
                        t.get("turn_no"),
                        _text(t.get("question")),
                        _text(t.get("answer")),
                        t.get("step_count"),
                        ", ".join(
                            str(c.get("model_call_id"))
                            for c in t.get("model_calls") or []
                            if isinstance(c, Mapping)
                        ),
                    ]
                    for t in turns
                ],
            )
        )
        tools = [t for t in trajectory.get("tool_calls") or [] if isinstance(t, Mapping)]
        parts.append("<h3>tool calls</h3>")
        parts.append(
            table(
                ["tool call", "tool", "status", "ms", "output"],
                [
                    [
                        t.get("tool_call_id"),
                        t.get("tool_name"),
                        t.get("status"),
                        t.get("duration_ms"),
                        _text(t.get("output")),
                    ]
                    for t in tools
                ],
            )
            if tools
            else "<p class=muted>no tool calls</p>"
        )
        parts.append("<h3>model calls</h3>")
        parts.append(_model_calls(list(trajectory.get("model_calls") or [])))
        gaps = trajectory.get("gaps") or []
        if gaps:
            parts.append(f"<h3>gaps</h3>{json_block(gaps)}")
    else:
        parts.append("<p class=muted>this row carries no ng_trajectory</p>")
    raw = json_block({k: v for k, v in record.items() if k != "ng_trajectory"})
    parts.append(f"<details><summary>the whole record (without ng_trajectory)</summary>{raw}</details>")
    return Html("".join(parts))


def rollout_body(
    row: RolloutRow,
    verdict_row: Mapping[str, Any],
    record: Mapping[str, Any] | None,
    links: Links,
    *,
    has_reverify: bool,
    anchor: str = "",
) -> Html:
    """One rollout: identity and rewards, findings with their details, then its trajectory."""
    findings = [f for f in verdict_row.get("findings") or [] if isinstance(f, Mapping)]
    facts = table(
        ["task", "rollout", "rollout id", "verdict", "reward", "reverified reward"],
        [
            [
                row.task,
                row.rollout,
                verdict_row.get("rollout_id"),
                verdict(row.verdict),
                row.reward,
                _reverified(row, has_reverify),
            ]
        ],
    )
    if findings:
        found = table(
            ["check", "locator", "detail"],
            [
                [
                    link(links.rollouts(Filters(check=str(f.get("check")))), f.get("check")),
                    f.get("locator"),
                    json_block(f.get("detail")),
                ]
                for f in findings
            ],
            css="findings",
        )
    else:
        found = Html("<p>No findings.</p>")
    unobserved = verdict_row.get("unobserved") or []
    missing = (
        f"<p>Unobserved checks (evidence missing): {_pills([str(u) for u in unobserved])}</p>"
        if unobserved
        else ""
    )
    trajectory = (
        _trajectory(record)
        if record is not None
        else Html("<p class=muted>the rollouts file does not hold this row</p>")
    )
    ident = f" id={esc(anchor)}" if anchor else ""
    back = link(links.page("rollouts"), "← all rollouts")
    return Html(
        f"<section{ident} class=rollout>"
        f"<h2>Rollout {esc(row.number)}: task {esc(row.task)}, rollout {esc(row.rollout)}</h2>"
        f"<p>{back}</p>{facts}<h3>findings</h3>{found}{missing}<h2>Trajectory</h2>{trajectory}</section>"
    )

"""The viewer's pages as bodies of HTML (pure functions of a :class:`RunReports`): overview,
metrics, reverify and provenance. The rollouts table and one rollout are in ``_rollout``."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from gymflow.provenance import FileCheck
from gymflow.view._html import Html, bar_chart, esc, fmt, json_block, link, table
from gymflow.view._index import Filters
from gymflow.view._load import RunReports, StepRow
from gymflow.view._rollout import Links, verdict

__all__ = ["failures_by_class", "metrics_body", "overview_body", "provenance_body", "reverify_body"]

NOT_COMPUTED = "not computed"
_GROUP_COLUMNS = (
    "num_rollouts",
    "mean/reward",
    "min/reward",
    "max/reward",
    "std/reward",
    "mean/total_tokens",
)
_PASS_PREFIXES = ("pass@", "majority@", "no_answer", "pass_at")


def _section(title: str, body: str, ident: str = "") -> str:
    anchor = f" id={esc(ident)}" if ident else ""
    return f"<section{anchor}><h2>{esc(title)}</h2>{body}</section>"


def failures_by_class(reports: RunReports) -> dict[str, int]:
    """Re-verification failures by class (the sidecar's ``_ng_failure_class``)."""
    return dict(sorted(Counter(str(row.get("_ng_failure_class")) for row in reports.sidecar).items()))


def _agent(entry: Mapping[str, Any]) -> str:
    ref = entry.get("agent_ref")
    return str(ref.get("name")) if isinstance(ref, Mapping) else "?"


def _by_agent(entries: Sequence[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    return {_agent(entry): entry for entry in entries or ()}


def steps_table(steps: Sequence[StepRow]) -> Html:
    return table(["step", "status", "detail"], [[s.name, s.status, s.detail] for s in steps])


def _reverify_summary(reports: RunReports) -> str:
    index = reports.index
    if reports.reverified_url is None:
        return "<p class=muted>This run was not re-verified.</p>"
    reverified = sum(1 for v in index.reverified if v is not None) if index else 0
    changed = sum(1 for _ in index.changed()) if index else 0
    rows = [
        ["re-verified rollouts", reverified],
        ["reward changed", changed],
        ["failures (sidecar rows)", len(reports.sidecar)],
    ]
    for name, entry in _by_agent(reports.reverify_metrics).items():
        rows.append(
            [f"mean/reward after reverify ({name})", (entry.get("agent_metrics") or {}).get("mean/reward")]
        )
    return str(table(["reverify", "value"], rows))


def overview_body(
    reports: RunReports, links: Links, steps: Sequence[StepRow], failures: Mapping[str, int]
) -> Html:
    """Verdict counts, issues per check (chart), key metrics per agent, the reverify summary,
    failures by class and each step's status."""
    parts = []
    run = (reports.summary or {}).get("run", {})
    verdicts = run.get("verdicts") or {}
    if verdicts:
        total = sum(int(v) for v in verdicts.values())
        rows = [
            [link(links.rollouts(Filters(verdict=name)), name), count] for name, count in verdicts.items()
        ]
        rows.append(["all", total])
        parts.append(_section("Verdicts", str(table(["verdict", "rollouts"], rows)), "verdicts"))
    else:
        parts.append(_section("Verdicts", "<p class=muted>no health-check report (quality_summary.json)</p>"))
    issues = run.get("issues") or {}
    if issues:
        chart = bar_chart([(str(k), int(v)) for k, v in issues.items()], title="issues per check")
        rows = [[link(links.rollouts(Filters(check=k)), k) if v else k, v] for k, v in issues.items()]
        parts.append(_section("Issues per check", f"{chart}{table(['check', 'issues'], rows)}", "issues"))
    metrics: list[list[Any]] = []
    for name, entry in _by_agent(reports.metrics).items():
        metrics.extend([name, key, value] for key, value in (entry.get("key_metrics") or {}).items())
    parts.append(
        _section(
            "Key metrics per agent",
            str(table(["agent", "metric", "value"], metrics))
            if metrics
            else "<p class=muted>no aggregate metrics</p>",
            "key-metrics",
        )
    )
    parts.append(_section("Reverify", _reverify_summary(reports), "reverify-summary"))
    shown = table(["class", "count"], list(failures.items())) if failures else "<p>none</p>"
    parts.append(_section("Failures by class", str(shown), "failures"))
    parts.append(_section("Steps", str(steps_table(steps)), "steps"))
    return Html("".join(parts))


def _metric_rows(
    all_metrics: Mapping[str, Any], healthy: Mapping[str, Any] | None, keys: Sequence[str]
) -> list[list[Any]]:
    return [
        [key, all_metrics.get(key), NOT_COMPUTED if healthy is None else healthy.get(key)] for key in keys
    ]


def metrics_body(reports: RunReports) -> Html:
    """Per agent: rewards over all rollouts beside rewards over healthy rollouts only, pass@k,
    every agent metric, then the group (task) table."""
    if not reports.metrics:
        return Html(
            _section("Metrics", "<p class=muted>no aggregate metrics (rollouts_aggregate_metrics.json)</p>")
        )
    healthy_by_agent = _by_agent(reports.healthy_metrics) if reports.healthy_metrics is not None else None
    parts = []
    if healthy_by_agent is None:
        parts.append(
            "<p class=note>Metrics over healthy rollouts only: not computed "
            "(no rollouts_aggregate_metrics.healthy.json in this run).</p>"
        )
    totals = dict(zip(map(_agent, reports.metrics), reports.group_totals, strict=False))
    for name, entry in _by_agent(reports.metrics).items():
        agent_metrics = entry.get("agent_metrics") or {}
        healthy_entry = healthy_by_agent.get(name) if healthy_by_agent is not None else None
        healthy = (healthy_entry or {}).get("agent_metrics") if healthy_entry is not None else None
        if healthy_by_agent is not None and healthy is None:
            healthy = {}
        reward_keys = [k for k in agent_metrics if "reward" in k and "across_repeats" not in k]
        body = [
            "<h3>rewards: all rollouts and healthy rollouts only</h3>",
            str(
                table(
                    ["metric", "all rollouts", "healthy rollouts only"],
                    _metric_rows(agent_metrics, healthy, reward_keys),
                )
            ),
        ]
        pass_keys = [k for k in agent_metrics if k.startswith(_PASS_PREFIXES)]
        body.append("<h3>pass@k</h3>")
        body.append(
            str(
                table(
                    ["metric", "all rollouts", "healthy rollouts only"],
                    _metric_rows(agent_metrics, healthy, pass_keys),
                )
            )
            if pass_keys
            else "<p class=muted>no pass@k metrics (aggregate's pass_majority is off)</p>"
        )
        body.append("<h3>agent metrics</h3>")
        body.append(str(table(["metric", "value"], [[k, v] for k, v in agent_metrics.items()])))
        groups = [g for g in entry.get("group_level_metrics") or [] if isinstance(g, Mapping)]
        body.append("<h3>group (task) metrics</h3>")
        total = totals.get(name, len(groups))
        if total > len(groups):
            body.append(
                f"<p class=note>The first {len(groups):,} of {total:,} groups; "
                "the metrics file holds them all.</p>"
            )
        body.append(
            str(
                table(
                    ["task", *_GROUP_COLUMNS],
                    [[g.get("_ng_task_index"), *(g.get(c) for c in _GROUP_COLUMNS)] for g in groups],
                )
            )
        )
        repeats = [r for r in entry.get("repeat_level_metrics") or [] if isinstance(r, Mapping)]
        if repeats:
            columns = ("sample_count", "missing_count", "mean/reward", "mean/total_tokens")
            body.append("<h3>repeat metrics</h3>")
            body.append(
                str(
                    table(
                        ["repeat", *columns],
                        [[r.get("_ng_rollout_index"), *(r.get(c) for c in columns)] for r in repeats],
                    )
                )
            )
        parts.append(_section(f"Agent {name}", "".join(body), f"agent-{name}"))
    return Html("".join(parts))


def reverify_body(reports: RunReports, links: Links) -> Html:
    """Rows whose reward changed (old x new per task, then each row) and the failure sidecar."""
    if reports.reverified_url is None:
        return Html(
            _section(
                "Reverify", "<p class=muted>This run was not re-verified (no rollouts_reverified.jsonl).</p>"
            )
        )
    index = reports.index
    changed = list(index.changed()) if index is not None else []
    parts = [
        _section("Reverify", _reverify_summary(reports) + f"<p class=hash>{esc(reports.reverified_url)}</p>")
    ]
    by_task: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
    for row in changed:
        by_task[row.task][(fmt(row.reward), fmt(row.reverified))] += 1
    matrices = []
    for task, counts in by_task.items():
        olds = sorted({old for old, _ in counts})
        news = sorted({new for _, new in counts})
        rows = [[f"old {old}", *(counts.get((old, new), 0) for new in news)] for old in olds]
        matrices.append(
            f"<h3>task {esc(task)}</h3>" + str(table(["old \\ new", *(f"new {n}" for n in news)], rows))
        )
    if changed:
        rows_table = table(
            ["#", "task", "rollout", "verdict", "reward", "reverified reward"],
            [
                [
                    link(links.rollout(r.number), r.number),
                    r.task,
                    r.rollout,
                    verdict(r.verdict),
                    r.reward,
                    r.reverified,
                ]
                for r in changed
            ],
        )
        parts.append(
            _section(f"Rewards that changed ({len(changed)})", "".join(matrices) + str(rows_table), "changed")
        )
    else:
        parts.append(_section("Rewards that changed", "<p>No reward changed.</p>", "changed"))
    if reports.sidecar:
        rows = [
            [
                r.get("_ng_task_index"),
                r.get("_ng_rollout_index"),
                r.get("_ng_failure_class"),
                r.get("_ng_failure_judge_error") or r.get("failure_reason") or r.get("_ng_failure_message"),
            ]
            for r in reports.sidecar
        ]
        sidecar = str(table(["task", "rollout", "class", "error"], rows))
    else:
        sidecar = "<p>No failures.</p>"
    where = f"<p class=hash>{esc(reports.sidecar_url)}</p>" if reports.sidecar_url else ""
    parts.append(_section(f"Failure sidecar ({len(reports.sidecar)})", where + sidecar, "sidecar"))
    return Html("".join(parts))


def _files(entries: Sequence[Any]) -> Html:
    rows = [
        [e.get("uri"), e.get("bytes"), Html(f"<span class=hash>{esc(e.get('sha256'))}</span>")]
        for e in entries
        if isinstance(e, Mapping)
    ]
    return table(["uri", "bytes", "sha256"], rows, css="files")


def _code(code: Mapping[str, Any]) -> Html:
    rows: list[list[Any]] = [["gymflow", code.get("gymflow")], ["python", code.get("python")]]
    git = code.get("git")
    if isinstance(git, Mapping):
        rows.append(["git commit", Html(f"<span class=hash>{esc(git.get('commit'))}</span>")])
        rows.append(["dirty", bool(git.get("dirty"))])
    if code.get("files_sha256"):
        rows.append(
            ["installed files sha256", Html(f"<span class=hash>{esc(code.get('files_sha256'))}</span>")]
        )
    for name, version in (code.get("packages") or {}).items():
        rows.append([name, version])
    return table(["code", "version"], rows)


def _checks(checks: Sequence[FileCheck]) -> Html:
    rows = [
        [Html(f"<span class={'ok' if c.status == 'ok' else 'bad'}>{esc(c.status)}</span>"), c.uri]
        for c in checks
    ]
    verdict_line = "all files verify" if all(c.status == "ok" for c in checks) else "some files do not verify"
    return Html(
        f"<p class=verify-result><b>{esc(verdict_line)}</b></p>" + str(table(["status", "uri"], rows))
    )


def provenance_body(
    reports: RunReports, links: Links, verified: Mapping[str, Sequence[FileCheck]] | None = None
) -> Html:
    """Every record: inputs and outputs with size and full SHA-256, parameters, code (version,
    git commit and dirty flag, or installed files' hash), verifier identity, orchestrator; a link
    that runs ``provenance verify`` live (the server), or how to run it (``report.html``)."""
    if not reports.records:
        return Html(_section("Provenance", "<p class=muted>no provenance records in this run</p>"))
    inputs: dict[str, Mapping[str, Any]] = {}
    for _, record in reports.records:
        for entry in record.get("inputs") or []:
            if isinstance(entry, Mapping) and entry.get("uri") not in inputs:
                inputs[str(entry.get("uri"))] = entry
    parts = [_section("Every input of this run", str(_files(list(inputs.values()))), "inputs")]
    for url, record in reports.records:
        name = url.rsplit("/", 1)[-1]
        checks = (verified or {}).get(url)
        href = links.verify(url)
        if checks is not None:
            live = _checks(checks)
        elif href is not None:
            live = Html(
                f"<p>{link(href, 'verify now (re-hash every file)', class_='button', role='button')}</p>"
            )
        else:
            live = Html(
                f"<p class=muted>Check it: <code>gymflow provenance verify {esc(url)}</code> "
                "(or open this run in <code>gymflow view</code>).</p>"
            )
        orchestrator = record.get("orchestrator") or {}
        facts = table(
            ["field", "value"],
            [
                ["command", record.get("command")],
                ["cache key", Html(f"<span class=hash>{esc(record.get('cache_key'))}</span>")],
                ["started", record.get("started_at")],
                ["finished", record.get("finished_at")],
                ["orchestrator", orchestrator.get("kind")],
                [
                    "flow run",
                    link(orchestrator["flow_run_url"], orchestrator["flow_run_url"])
                    if orchestrator.get("flow_run_url")
                    else "—",
                ],
            ],
        )
        verifier = record.get("verifier")
        body = [
            str(live),
            str(facts),
            "<h3>inputs</h3>",
            str(_files(record.get("inputs") or [])),
            "<h3>outputs</h3>",
            str(_files(record.get("outputs") or [])),
            "<h3>parameters</h3>",
            str(json_block(record.get("parameters"))),
            "<h3>code</h3>",
            str(_code(record.get("code") or {})),
            "<h3>verifier</h3>",
            str(json_block(verifier)) if verifier else "<p class=muted>none (no /verify server involved)</p>",
            f"<details><summary>resolved config</summary>{json_block(record.get('config'))}</details>",
        ]
        parts.append(_section(name, "".join(body), f"record-{name}"))
    return Html("".join(parts))

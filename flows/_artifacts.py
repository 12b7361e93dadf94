"""The artifacts each command's outcome publishes to its flow run: a markdown summary, its inputs
with their SHA-256, a link to every report (:func:`gymflow.flows._publish.publish`).

The commands' packages are imported where an outcome of theirs is published, not with this
module: a flow imports it before its work starts, and one command's flow needs one of them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gymflow import storage
from gymflow.flows._publish import publish, record_inputs

if TYPE_CHECKING:
    from gymflow.aggregate import AggregateOutcome
    from gymflow.health import HealthOutcome
    from gymflow.healthy import HealthyOutcome
    from gymflow.join import JoinResult
    from gymflow.reverify import ReverifyOutcome


def publish_health(outcome: HealthOutcome, *, tag: bool = True) -> None:
    """The run's artifacts (also for a cached run: they link the reports it found up to date)."""
    report_dir = storage.parent(outcome.summary_url)
    run = outcome.run
    rows = ["| verdict | rollouts |", "|---|---|"]
    rows += [f"| {verdict} | {count} |" for verdict, count in run["verdicts"].items()]
    rows += [f"| issue: {check} | {count} |" for check, count in run["issues"].items() if count]
    state = " (up to date: nothing recomputed)" if outcome.up_to_date else ""
    markdown = "\n".join([f"# eval health-check\n\n**{outcome.console_line}**{state}\n", *rows])
    reports = {
        "quality summary": outcome.summary_url,
        "rollout verdicts": outcome.verdicts_url,
        "provenance": outcome.record_url,
    }
    publish("eval-health-check", report_dir, markdown, record_inputs(outcome.record_url), reports, tag=tag)


def _key_metrics(entry: dict[str, Any]) -> str:
    return ", ".join(f"{name} {value}" for name, value in entry.get("key_metrics", {}).items())


def _aggregate_markdown(outcome: AggregateOutcome) -> str:
    rows = ["# eval aggregate", "", "| group | key metrics |", "|---|---|"]
    for entry in outcome.entries:
        rows.append(f"| {entry['agent_ref']['name']} | {_key_metrics(entry)} |")
    state = "up to date (nothing recomputed)" if outcome.up_to_date else "computed"
    return "\n".join([*rows, "", f"{len(outcome.shards)} shard(s); {state}."])


def publish_aggregate(outcome: AggregateOutcome, *, tag: bool = True) -> None:
    reports = {"aggregate metrics": outcome.metrics_path, "provenance": outcome.record_path}
    if outcome.merged:
        reports = {"merged rollouts": outcome.output, **reports}
    publish(
        "eval-aggregate",
        outcome.output,
        _aggregate_markdown(outcome),
        record_inputs(outcome.record_path),
        reports,
        tag=tag,
    )


def publish_healthy(outcome: HealthyOutcome) -> None:
    """The healthy-only metrics of ``eval post`` (a step of its run: never tags it)."""
    from gymflow.aggregate import covered

    rows = ["# metrics over healthy rollouts", "", "| group | rollouts | key metrics |", "|---|---|---|"]
    for entry, rollouts in zip(outcome.entries, covered(outcome.entries, outcome.rollouts), strict=True):
        rows.append(f"| {entry['agent_ref']['name']} | {rollouts} | {_key_metrics(entry)} |")
    state = "up to date (nothing recomputed)" if outcome.up_to_date else "computed"
    reports = {"healthy aggregate metrics": outcome.output, "provenance": outcome.record_path}
    markdown = "\n".join([*rows, "", f"Rows whose health verdict is healthy only; {state}."])
    publish(
        "healthy-metrics",  # not "eval-post-…": those keys are the post run's own
        outcome.output,
        markdown,
        record_inputs(outcome.record_path),
        reports,
        tag=False,
    )


def publish_join(result: JoinResult, *, tag: bool = True) -> None:
    """The run's artifacts (also for a cached run: they link the output it found up to date)."""
    from gymflow.join import summary_paragraph

    summary = result.summary
    if result.up_to_date:
        markdown = "# eval join\n\nJoined rollouts are up to date: nothing recomputed."
    else:
        rows = ["| measure | value |", "|---|---|"]
        rows += [
            f"| {k} | {summary[k]} |"
            for k in ("rows", "merged", "projected", "projection_failed", "perf_rows", "row_errors")
        ]
        rows += [f"| gap: {code} | {count} |" for code, count in summary["gap_counts"].items()]
        markdown = "\n".join([f"# eval join\n\n**{summary_paragraph(summary)}**\n", *rows])
    reports = {"joined rollouts": result.settings.output, "provenance": result.record_url}
    publish("eval-join", result.settings.output, markdown, record_inputs(result.record_url), reports, tag=tag)


def publish_reverify(outcome: ReverifyOutcome, *, tag: bool = True) -> None:
    reports = {"reverified rollouts": outcome.output, "failures sidecar": outcome.sidecar}
    if outcome.metrics_path:
        reports["aggregate metrics"] = outcome.metrics_path
    reports["provenance"] = outcome.record_path
    markdown = _reverify_markdown(outcome)
    publish("eval-reverify", outcome.output, markdown, record_inputs(outcome.record_path), reports, tag=tag)


def _reverify_markdown(outcome: ReverifyOutcome) -> str:
    tally = outcome.tally
    failures = ", ".join(f"{count} {name}" for name, count in sorted(tally.failures.items())) or "none"
    return (
        "# eval reverify\n\n"
        f"| selected | skipped by resume | verified | succeeded | failed | duplicates | unmatched |\n"
        "|---|---|---|---|---|---|---|\n"
        f"| {tally.selected} | {tally.skipped_by_resume} | {tally.verified} | {tally.succeeded} "
        f"| {tally.routed_failures} | {tally.duplicates} | {tally.unmatched} |\n\n"
        f"Failures by class: {failures}."
    )


def publish_outcome(outcome: object) -> None:
    """The artifacts of any command's outcome, without its tags (what ``eval post`` and ``eval
    aggregate`` publish for each step: their own run is tagged with their own command)."""
    from gymflow.aggregate import AggregateOutcome
    from gymflow.health import HealthOutcome
    from gymflow.healthy import HealthyOutcome
    from gymflow.join import JoinResult
    from gymflow.reverify import ReverifyOutcome

    if isinstance(outcome, AggregateOutcome):
        publish_aggregate(outcome, tag=False)
    elif isinstance(outcome, HealthOutcome):
        publish_health(outcome, tag=False)
    elif isinstance(outcome, JoinResult):
        publish_join(outcome, tag=False)
    elif isinstance(outcome, ReverifyOutcome):
        publish_reverify(outcome, tag=False)
    elif isinstance(outcome, HealthyOutcome):
        publish_healthy(outcome)

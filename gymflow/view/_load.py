"""What a run directory holds, read through :mod:`gymflow.storage` (local or any fsspec URL).

Every file is optional: a run that was only aggregated has no verdicts, one never re-verified has
no sidecar. Reports are found by the names ``eval post`` writes; the rollouts health-check judged
and the re-verified rollouts are taken from the provenance records when they are there, so a
copied or moved run directory is read from its own files (:func:`gymflow.provenance.located`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson

from gymflow import provenance, storage
from gymflow.aggregate import read_metrics_file
from gymflow.errors import InputError
from gymflow.view._index import RolloutIndex, build_index

__all__ = ["FILES", "RunReports", "StepRow", "load_run", "read_lines"]

FILES = {
    "summary": "quality_summary.json",
    "verdicts": "rollout_verdicts.jsonl",
    "rollouts": "rollouts.jsonl",
    "joined": "rollouts_joined.jsonl",
    "metrics": "rollouts_aggregate_metrics.json",
    "healthy_metrics": "rollouts_aggregate_metrics.healthy.json",
    "reverified": "rollouts_reverified.jsonl",
    "report": "report.html",
}
_COMMANDS = {
    "eval aggregate": "aggregate",
    "eval join": "join",
    "eval health-check": "health-check",
    "eval reverify": "reverify",
}
STEP_ORDER = ("aggregate", "join", "health-check", "reverify")


@dataclass(frozen=True)
class StepRow:
    """One step of ``eval post`` as the page shows it."""

    name: str
    status: str
    detail: str = ""


@dataclass
class RunReports:
    """The reports of one run directory, parsed (the rollouts are an index, never loaded whole)."""

    run: str
    """The run's URI."""
    summary: dict[str, Any] | None = None
    metrics: list[dict[str, Any]] | None = None
    """The entries of the metrics file, each with its first :data:`GROUP_ROWS` groups."""
    group_totals: list[int] = field(default_factory=list)
    """How many groups each entry of :attr:`metrics` has in the file."""
    healthy_metrics: list[dict[str, Any]] | None = None
    reverify_metrics: list[dict[str, Any]] | None = None
    records: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """Every ``*.provenance.json`` of the run: (URI, record)."""
    steps: list[StepRow] = field(default_factory=list)
    sidecar: list[dict[str, Any]] = field(default_factory=list)
    sidecar_url: str | None = None
    reverified_url: str | None = None
    sources: list[str] = field(default_factory=list)
    """The rollouts files the verdicts judge."""
    index: RolloutIndex | None = None

    def path(self, name: str) -> str:
        return storage.join(self.run, name)

    def record_for(self, command: str) -> tuple[str, dict[str, Any]] | None:
        """The newest record written by ``command`` (``eval health-check``, ...)."""
        found = [(url, rec) for url, rec in self.records if rec.get("command") == command]
        return max(found, key=lambda item: str(item[1].get("finished_at", ""))) if found else None


class _Summary(msgspec.Struct):
    """What the pages read of ``quality_summary.json``: its run block (the per-task entries, which
    grow with the run, are skipped unparsed)."""

    run: Any = None


def _summary(url: str) -> dict[str, Any] | None:
    if not storage.isfile(url):
        return None
    try:
        with storage.open_read(url) as f:
            run = msgspec.json.decode(f.read(), type=_Summary).run
    except (msgspec.MsgspecError, InputError):
        return None
    return {"run": run} if isinstance(run, dict) else {}


def read_lines(url: str, limit: int) -> Iterator[dict[str, Any]]:
    """The first ``limit`` JSON objects of a JSONL file (unreadable lines skipped)."""
    shown = 0
    for _, line in storage.iter_lines(url):
        if shown >= limit:
            return
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            shown += 1
            yield value


def _listed(record_url: str, record: dict[str, Any], side: str) -> list[str]:
    origin = provenance.written_beside(record, record_url)
    return [
        provenance.located(entry, record_url, origin)
        for entry in record.get(side, [])
        if isinstance(entry, dict) and isinstance(entry.get("uri"), str)
    ]


def _steps(reports: RunReports) -> list[StepRow]:
    rows = []
    for name in STEP_ORDER:
        command = next(c for c, step in _COMMANDS.items() if step == name)
        found = reports.record_for(command)
        if found is None:
            rows.append(StepRow(name, "not run", "no provenance record in the run"))
            continue
        url, record = found
        outputs = ", ".join(storage.name(uri) for uri in _listed(url, record, "outputs"))
        where = (record.get("orchestrator") or {}).get("kind", "?")
        rows.append(StepRow(name, "done", f"{record.get('finished_at', '?')} ({where}): {outputs}"))
    return rows


def load_run(run: str, *, index: bool = True, held: int | None = None) -> RunReports:
    """Read the reports of ``run`` (and index its rollouts unless ``index`` is False: all of them,
    or the first ``held``)."""
    uri = storage.to_uri(run).rstrip("/")
    if not storage.isdir(run) and not storage.glob(storage.join(run, "*")):
        raise InputError(f"{uri}: no such run directory")
    reports = RunReports(uri)
    reports.summary = _summary(reports.path(FILES["summary"]))
    aggregate = read_metrics_file(reports.path(FILES["metrics"]))
    if aggregate is not None:
        reports.metrics, reports.group_totals = aggregate.entries, aggregate.group_totals
    healthy = read_metrics_file(reports.path(FILES["healthy_metrics"]))
    reports.healthy_metrics = healthy.entries if healthy is not None else None
    for url in sorted(storage.glob(storage.join(run, "*" + provenance.RECORD_SUFFIX))):
        try:
            record = provenance.read_record(url)
        except InputError:
            continue
        if record is not None:
            reports.records.append((storage.to_uri(url), record))
    reports.steps = _steps(reports)

    health = reports.record_for("eval health-check")
    if health is not None:
        reports.sources = [u for u in _listed(*health, "inputs") if storage.isfile(u)]
    if not reports.sources:
        default = reports.path(FILES["joined"])
        reports.sources = [default if storage.isfile(default) else reports.path(FILES["rollouts"])]

    reverify = reports.record_for("eval reverify")
    if reverify is not None:
        outputs = _listed(*reverify, "outputs")
        rows = [u for u in outputs if u.endswith(".jsonl") and not u.endswith("_failures.jsonl")]
        sidecars = [u for u in outputs if u.endswith("_failures.jsonl")]
        metrics = [u for u in outputs if u.endswith("_aggregate_metrics.json")]
        reports.reverified_url = rows[0] if rows else None
        reports.sidecar_url = sidecars[0] if sidecars else None
        answer = read_metrics_file(metrics[0]) if metrics else None
        reports.reverify_metrics = answer.entries if answer is not None else None
    elif storage.isfile(reports.path(FILES["reverified"])):
        reports.reverified_url = reports.path(FILES["reverified"])
    if reports.sidecar_url and storage.isfile(reports.sidecar_url):
        reports.sidecar = list(read_lines(reports.sidecar_url, 1000))

    verdicts = reports.path(FILES["verdicts"])
    if index and storage.isfile(verdicts):
        reports.index = build_index(verdicts, reports.sources, reports.reverified_url, limit=held)
    return reports

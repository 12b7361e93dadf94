"""What the end of a run needs of each output row, gathered as the row is appended, so
:func:`~gymflow.reverify.finish` neither reads the output back to sort it nor parses it again
for the metrics (reverify.md §2.7, §4 point 6).

Gathered only for a run whose output was empty once ``prepare`` was done (no ``--append`` rows,
no seeded or resumed rows): then the output holds exactly the rows this run appended, in the
order they were appended. Each row is kept as its server's ``/aggregate_metrics`` receives it;
its metrics facts are read only when they are needed: at once with ``--local-metrics`` (where a
row whose facts cannot be read, an index that is not an integer, stops the gathering and
``finish`` reads the file as it always could), else from the kept row, for a server that does
not answer (the rows of a fresh run carry the indices of their requests).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gymflow.aggregate._rows import RowFacts, extract
from gymflow.errors import InputError
from gymflow.gym_config import RouteError, Routing
from gymflow.jsonline import loads_exact
from gymflow.reverify._sent import SentRows, Span

__all__ = ["LAST", "Collected", "OutputRow", "label_key", "output_row", "sent_facts", "sort_key", "stripped"]

LAST = (float("inf"), float("inf"))
"""The sort key of a line without integer (task, rollout): after every keyed line."""

SortKey = tuple[float, float]


def sort_key(task: Any, rollout: Any) -> SortKey:
    """A line's place in the sorted output: its top-level (task, rollout) when both are integers."""
    if type(task) is int and type(rollout) is int:
        return task, rollout
    return LAST


def label_key(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """A row's metrics group (its environment-server stamp or its agent's name) and agent, or
    None for a row the metrics leave out."""
    stamp = row.get("_ng_environment_server")
    agent_ref = row.get("agent_ref")
    agent = agent_ref.get("name") if isinstance(agent_ref, Mapping) else None
    if isinstance(stamp, str) and stamp:
        return stamp, agent if isinstance(agent, str) and agent else stamp
    if isinstance(agent, str) and agent:
        return agent, agent
    return None


_NOT_SENT = ("response", "responses_create_params", "_ng_atif_provenance", "_ng_reverify_key")
"""What 0.7.0 strips before ``/aggregate_metrics``, and gymflow's own content key (the server
gets the rows 0.7.0 would send it)."""


def stripped(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row as ``/aggregate_metrics`` receives it."""
    out = {k: v for k, v in row.items() if k not in _NOT_SENT}
    response = row.get("response")
    usage = response.get("usage") if isinstance(response, Mapping) else None
    if usage:
        out["response"] = {"usage": usage}
    return out


@dataclass(frozen=True, slots=True)
class OutputRow:
    """What the metrics need of one labelled row: its group, routed server, and its facts or
    where the row as the server receives it is kept (or both)."""

    label: tuple[str, str]
    environment: bool
    server: str
    facts: RowFacts | None
    """None for a row kept in ``sent``: its facts are read from there if the server's metrics
    are missing (:func:`sent_facts`)."""
    sent: Span | None


def output_row(
    row: Mapping[str, Any], routing: Routing, sent: SentRows | None, where: str, *, facts: bool = True
) -> OutputRow | None:
    """The :class:`OutputRow` of a parsed output row (None: not labelled, not in the metrics),
    the row as the server receives it added to ``sent`` (None: local metrics, nothing sent).
    Without ``facts`` (a row this run stamped itself, kept in ``sent``), its facts are not read
    now. Raises :class:`InputError` for a row whose indices are not integers."""
    labelled = label_key(row)
    if labelled is None:
        return None
    try:
        server = routing.route_row(row)
    except RouteError:
        server = ""
    read = extract(row, None, where) if facts or sent is None else None
    span = None if sent is None else sent.add(stripped(row))
    return OutputRow(labelled, "_ng_environment_server" in row, server, read, span)


def sent_facts(sent: SentRows, spans: Sequence[Span]) -> list[RowFacts]:
    """The facts of the rows kept in ``sent`` at ``spans``: those of the rows themselves (what
    :func:`stripped` leaves out is no number of the metrics)."""
    return [extract(loads_exact(line)[0]) for line in sent.rows(spans)]


@dataclass
class Collected:
    """The output's lines as appended: each one's sort key, byte span and metrics row (and,
    unless the metrics are local, in ``sent``, the rows as the server receives them)."""

    routing: Routing
    sent: SentRows | None
    keys: list[SortKey] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    rows: list[OutputRow | None] = field(default_factory=list)
    size: int = 0

    def add(self, row: Mapping[str, Any], length: int) -> bool:
        """Gather one appended output row of ``length`` bytes; False when its facts cannot be
        read (the caller stops gathering)."""
        try:
            gathered = output_row(row, self.routing, self.sent, "", facts=False)
        except InputError:
            return False
        self.keys.append(sort_key(row.get("_ng_task_index"), row.get("_ng_rollout_index")))
        self.spans.append((self.size, length))
        self.rows.append(gathered)
        self.size += length
        return True

    def order(self) -> list[int]:
        """The lines' indices in sorted order (stable: equal keys keep their append order)."""
        keys = self.keys
        return sorted(range(len(keys)), key=keys.__getitem__)

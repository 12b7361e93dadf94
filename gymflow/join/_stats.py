"""Counts over joined rows, mergeable across byte ranges, and the join summary (§1 [G])."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gymflow.join._capture_store import FileRead
from gymflow.join._row import FAILED, RowOutcome
from gymflow.perf_summary import PerfAccumulator

__all__ = ["MAX_ERRORS", "JoinStats", "summary_paragraph"]

MAX_ERRORS = 20
"""Row-error messages kept for the console; the count is always exact."""


@dataclass
class JoinStats:
    """What happened to the rows of one byte range (or, merged, of the whole file)."""

    rows: int = 0
    merged: int = 0
    projected: int = 0
    projection_failed: int = 0
    perf_rows: int = 0
    row_errors: int = 0
    gap_counts: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    perf: PerfAccumulator = field(default_factory=PerfAccumulator)
    files_read: list[FileRead] = field(default_factory=list)

    def add(self, outcome: RowOutcome, where: str) -> None:
        row = outcome.row
        self.rows += 1
        self.merged += outcome.merged
        self.projected += outcome.projected
        self.projection_failed += outcome.projection_failed
        if outcome.error is not None:
            self.row_errors += 1
            if len(self.errors) < MAX_ERRORS:
                self.errors.append(f"{where}: {outcome.error}")
        ng_perf = row.get("ng_perf")
        if isinstance(ng_perf, dict):
            self.perf_rows += 1
        self.perf.add(ng_perf)
        for code in _gap_codes(outcome):
            self.gap_counts[code] = self.gap_counts.get(code, 0) + 1

    def merge(self, other: JoinStats) -> None:
        """Add ``other``'s rows after this one's."""
        self.rows += other.rows
        self.merged += other.merged
        self.projected += other.projected
        self.projection_failed += other.projection_failed
        self.perf_rows += other.perf_rows
        self.row_errors += other.row_errors
        for code, count in other.gap_counts.items():
            self.gap_counts[code] = self.gap_counts.get(code, 0) + count
        self.errors.extend(other.errors[: max(0, MAX_ERRORS - len(self.errors))])
        self.perf.merge(other.perf)
        self.files_read.extend(other.files_read)

    def summary(self) -> dict[str, Any]:
        """The summary JSON of evidence.md §1, plus ``gap_counts`` (sorted by code)."""
        return {
            "rows": self.rows,
            "merged": self.merged,
            "projected": self.projected,
            "projection_failed": self.projection_failed,
            "perf_rows": self.perf_rows,
            "row_errors": self.row_errors,
            "perf_summary": self.perf.result(),
            "gap_counts": dict(sorted(self.gap_counts.items())),
        }


def _gap_codes(outcome: RowOutcome) -> list[str]:
    """Gap codes of a joined row: its trajectory's gaps, or where a failed projection put them."""
    row = outcome.row
    trajectory = row.get("ng_trajectory")
    if outcome.projected and isinstance(trajectory, dict):
        return [g["code"] for g in trajectory["gaps"]]
    if not outcome.projection_failed:
        return []
    for key in ("ng_model_call_capture", "ng_agent_observations"):
        holder = row.get(key)
        gaps = holder.get("gaps") if isinstance(holder, dict) else None
        if isinstance(gaps, list):
            codes = [str(g["code"]) for g in gaps if isinstance(g, dict) and isinstance(g.get("code"), str)]
            if FAILED in codes:
                return codes
    return [FAILED]


def summary_paragraph(summary: dict[str, Any]) -> str:
    """One paragraph for the console."""
    gaps = summary["gap_counts"]
    gap_text = ", ".join(f"{code} {count}" for code, count in gaps.items()) if gaps else "none"
    text = (
        f"Joined {summary['rows']} rows: {summary['merged']} merged with captured calls, "
        f"{summary['projected']} trajectories projected, {summary['projection_failed']} projection failures, "
        f"{summary['perf_rows']} with ng_perf, {summary['row_errors']} row errors. Gaps by code: {gap_text}."
    )
    return text

"""One batch: POST every row, stamp and classify the answers (§2.6, §4 point 1), then record them."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from gymflow.kept import kept_files
from gymflow.reverify._client import Request, Result, Stream, failure_fields, run, secure, verify_stream
from gymflow.reverify._plan import Echo, ReverifyPlan, Routed
from gymflow.reverify._results import Destination, alarm_line, answer_problem, classify, stamp

__all__ = [
    "BatchResult",
    "OnRow",
    "completed_row",
    "record_batch",
    "record_row",
    "requests_of",
    "verify_batch",
]

OnRow = Callable[[Destination, dict[str, Any], bytes], None]
"""Called once per completed row with where it goes, the stamped row and its JSONL line (empty for a
row that is not persisted)."""


@dataclass
class BatchResult:
    """The completed rows of one batch: where each goes and its JSONL line."""

    lines: list[tuple[Destination, bytes]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    no_persist: int = 0
    kept: str | None = None
    """A local file holding the batch's output lines instead of :attr:`lines` (a stored result:
    :func:`with_kept_rows`)."""
    kept_rows: int = 0

    @property
    def verified(self) -> int:
        return len(self.lines) + self.kept_rows + self.no_persist

    @property
    def files(self) -> list[str]:
        """The files the result names (:func:`gymflow.kept.present`)."""
        return [] if self.kept is None else [self.kept]


def with_kept_rows(result: BatchResult, keep_dir: str, key: str) -> BatchResult:
    """``result`` (a batch without failures: all its lines are output rows) with its lines in a
    file under ``keep_dir`` (:mod:`gymflow.kept`): the stored result names the file instead of
    carrying every row (pickled, base64-encoded and wrapped in the result store, 1,000 rows of
    4 KB took 20 ms a batch; written as they are, 5 ms)."""
    with kept_files(keep_dir, key) as (staging, final):
        with open(os.path.join(staging, _KEPT_ROWS), "wb") as out:
            out.writelines(line for _, line in result.lines)
    return BatchResult(
        no_persist=result.no_persist, kept=os.path.join(final, _KEPT_ROWS), kept_rows=len(result.lines)
    )


_KEPT_ROWS = "rows.jsonl"


def dumps(row: dict[str, Any]) -> bytes:
    """Compact JSON + newline (big integers and non-finite floats fall back to the json module)."""
    try:
        return orjson.dumps(row) + b"\n"
    except TypeError:
        return json.dumps(row, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _request(routed: Routed) -> Request:
    body = routed.item.body
    if "_ng_atif_provenance" in body:
        body = {k: v for k, v in body.items() if k != "_ng_atif_provenance"}
    return Request(f"{routed.url}/verify", dumps(body)[:-1])


def requests_of(rows: Iterable[Routed]) -> Iterator[tuple[Routed, Request]]:
    """Each row with its POST, built when the client pulls it."""
    for routed in rows:
        yield routed, _request(routed)


def completed_row(plan: ReverifyPlan, routed: Routed, outcome: Result) -> tuple[Destination, dict[str, Any]]:
    """The stamped row of one outcome and where it goes (§2.6 steps 1-3, §4 point 1).

    An answer that would be scored but is malformed (:func:`answer_problem`: a reward that is not a
    finite number, a required field missing) becomes a ``verify_invalid_response`` failure row.
    """
    if outcome.answer is not None:
        row = stamp(
            outcome.answer, routed.item.body, routed.reverify_key, plan.options.retry_invalid_judge_responses
        )
        destination = classify(row, plan.options.atif)
        problem = answer_problem(row) if destination == "output" else None
        if problem is None:
            return destination, row
        failure = failure_fields(
            "verify_invalid_response",
            "InvalidResponse",
            f"POST {routed.url}/verify answered HTTP {outcome.status} with {problem}",
            outcome.status,
            None if outcome.body is None else outcome.body.decode("utf-8", errors="replace"),
            outcome.attempts,
        )
    else:
        failure = outcome.failure or {}
    row = stamp({}, routed.item.body, routed.reverify_key, False)
    row.update(failure)
    return classify(row, plan.options.atif), row


def verify_batch(
    plan: ReverifyPlan,
    batch: Iterable[Routed],
    on_row: OnRow | None = None,
    count: int | None = None,
    *,
    keep: bool = True,
    stream: Stream | None = None,
) -> BatchResult:
    """Verify ``batch`` (at most ``--concurrency`` requests in flight, per-row retries inside),
    pulling its rows lazily (``count``: how many, when ``batch`` is not a sequence).

    Runs its own event loop, so it may be called from a worker thread. Nothing is written here;
    ``on_row`` is called in the loop as each row completes. Without ``keep`` the result holds no
    row (a run that records each row as it completes and caches no batch: memory stays flat).
    With a ``stream`` the batch is verified on its loop and connections, not on its own."""
    result = BatchResult()

    def on_result(routed: Routed, outcome: Result) -> None:
        destination, row = completed_row(plan, routed, outcome)
        line = b""
        if destination == "none":
            result.no_persist += 1
        else:
            line = dumps(row)
            if keep:
                result.lines.append((destination, line))
                if destination == "sidecar":
                    result.failures.append(row)
        if on_row is not None:
            on_row(destination, row, line)

    size = count if count is not None else len(batch)  # type: ignore[arg-type]
    if size and stream is not None:
        stream.verify(requests_of(batch), on_result)
    elif size:
        tls = secure(plan.urls.values())
        run(verify_stream(requests_of(batch), plan.settings, on_result, plan.transport, pool=size, tls=tls))
    return result


def record_row(
    plan: ReverifyPlan,
    destination: Destination,
    row: dict[str, Any],
    echo: Echo,
    *,
    flush: bool = True,
    line: bytes = b"",
) -> None:
    """Append one completed row (compact JSON: ``line`` when the caller has it), flushed unless the
    caller flushes; count it; the 🚨 line of a failure."""
    tally = plan.tally
    tally.verified += 1
    if destination == "none":
        tally.no_persist += 1
        plan.place((destination, row, b""))
        return
    plan.place((destination, row, line or dumps(row)))
    if flush:
        plan.flush_file(destination)
    if destination == "output":
        tally.succeeded += 1
    else:
        tally.failed(str(row.get("_ng_failure_class")))
        echo(alarm_line(row))


def record_batch(plan: ReverifyPlan, result: BatchResult, echo: Echo) -> None:
    """Append successes to the output and failures to the sidecar (flushed), print the 🚨 lines.
    The rows come as the batch completed them: rows held for key order are appended first, and
    the order is given up."""
    plan.release()
    tally = plan.tally
    for destination, line in result.lines:
        plan.write(destination, None, line)
    if result.kept is not None:
        with open(result.kept, "rb") as rows:
            for line in rows:
                plan.write("output", None, line)
    plan.flush()
    tally.verified += result.verified
    tally.no_persist += result.no_persist
    tally.succeeded += result.kept_rows + sum(1 for destination, _ in result.lines if destination == "output")
    for row in result.failures:
        tally.failed(str(row.get("_ng_failure_class")))
        echo(alarm_line(row))

"""What an existing output already holds, and the ``--resume`` filter (reverify.md §2.8, §4 point 4)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import orjson

from gymflow.errors import GymflowError
from gymflow.reverify._inputs import Key, key_of

__all__ = ["Existing", "ResumeCounts", "max_attempts", "read_existing", "resume_filter"]

MAX_ATTEMPTS_ENV = "NEMO_GYM_MAX_ROLLOUT_ATTEMPTS"
DEFAULT_MAX_ATTEMPTS = 3
TIMEOUT_CLASSES = frozenset({"timeout_exceeded", "reference_missing", "eval_missing", "transport_ineligible"})


@dataclass(frozen=True, slots=True)
class Attempt:
    """One sidecar row: its content key (None for rows gymflow did not write), class, terminal flag."""

    reverify_key: str | None
    failure_class: str | None
    terminal: bool


@dataclass
class Existing:
    """Keys of the rows already in an output and its sidecar."""

    output: dict[Key, set[str | None]] = field(default_factory=dict)
    sidecar: dict[Key, list[Attempt]] = field(default_factory=dict)
    sidecar_keys: set[str] = field(default_factory=set)
    found: bool = False


def _lines(path: str) -> list[bytes]:
    with open(path, "rb") as handle:
        return [line for line in handle if line.strip()]


def read_existing(output: str | None, sidecar: str | None) -> Existing:
    """Read the local output and sidecar (either may be missing); unparsable lines are ignored."""
    existing = Existing()
    for path, is_output in ((output, True), (sidecar, False)):
        if path is None or not os.path.isfile(path):
            continue
        existing.found = True
        for line in _lines(path):
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(row, dict):
                continue
            key = key_of(row)
            if key is None:
                continue
            content = row.get("_ng_reverify_key")
            content = content if isinstance(content, str) else None
            if is_output:
                existing.output.setdefault(key, set()).add(content)
                continue
            if content is not None:
                existing.sidecar_keys.add(content)
            failure_class = row.get("_ng_failure_class")
            existing.sidecar.setdefault(key, []).append(
                Attempt(
                    content,
                    failure_class if isinstance(failure_class, str) else None,
                    bool(row.get("_ng_failure_terminal")),
                )
            )
    return existing


def max_attempts(echo: Callable[[str], None]) -> int:
    """``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS`` (default 3), warning on an unusable value."""
    raw = os.environ.get(MAX_ATTEMPTS_ENV)
    if raw is None:
        return DEFAULT_MAX_ATTEMPTS
    try:
        value = int(raw)
        if value < 1:
            raise ValueError(f"must be >= 1, got {value}")
    except ValueError as exc:
        echo(
            f"WARNING: could not parse {MAX_ATTEMPTS_ENV}={raw!r} ({exc}); "
            f"falling back to default {DEFAULT_MAX_ATTEMPTS}."
        )
        return DEFAULT_MAX_ATTEMPTS
    return value


@dataclass
class ResumeCounts:
    """The ``Resumed from cache`` block. As 0.7.0 prints it, ``total`` and ``todo`` count the
    selected rows and the other three describe the files: keys in the output, keys terminal in
    the sidecar, keys with at least the cap of attempts there (a key may be in several; with
    ``--limit``, also keys outside the selection). An attempt counts as in :func:`resume_filter`."""

    total: int = 0
    done: int = 0
    terminal: int = 0
    maxed: int = 0
    todo: int = 0
    legacy_matches: int = 0

    def lines(self) -> list[str]:
        return [
            "Resumed from cache. Found:",
            f"- {self.total} total rows to be re-verified",
            f"- {self.done} rows already done (in main jsonl)",
            f"- {self.terminal} sidecar-terminal (for example skipped) → not retried",
            f"- {self.maxed} hit max_attempts → not retried",
            f"- {self.todo} rows that still need to be run",
        ]


class ResumeConflict(GymflowError):
    """The output holds results of other inputs or another verifier configuration."""


def _is_terminal(attempt: Attempt, retry_terminal_timeouts: bool) -> bool:
    if attempt.failure_class == "skipped":
        return True
    if not attempt.terminal:
        return False
    return not (retry_terminal_timeouts and attempt.failure_class in TIMEOUT_CLASSES)


def resume_filter(
    selected: Sequence[tuple[Key, str]],
    existing: Existing,
    *,
    atif: bool,
    retry_terminal_timeouts: bool,
    cap: int,
    output_name: str,
) -> tuple[list[int], ResumeCounts]:
    """Indices of ``selected`` ((task, rollout), content key) still to verify, and the counts.

    A row is done when the output holds its content key (or, in gym mode, a row of its
    (task, rollout) without a content key). Raises :class:`ResumeConflict` when the output holds
    rows of the same (task, rollout) computed from other bytes or another verifier.
    """
    counts = ResumeCounts(total=len(selected), done=len(existing.output))
    todo: list[int] = []
    conflicts: list[Key] = []
    legacy_refused: list[Key] = []

    def attempts_of(key: Key, content: str | None) -> list[Attempt]:
        return [
            a
            for a in existing.sidecar.get(key, ())
            if a.reverify_key == content or (a.reverify_key is None and not atif)
        ]

    for index, (key, content) in enumerate(selected):
        held = existing.output.get(key)
        if held is not None:
            if content in held:
                continue
            if None in held:
                if atif:
                    legacy_refused.append(key)
                    continue
                counts.legacy_matches += 1
                continue
            conflicts.append(key)
            continue
        attempts = attempts_of(key, content)
        if any(_is_terminal(a, retry_terminal_timeouts) for a in attempts):
            continue
        if len(attempts) >= cap:
            continue
        todo.append(index)
    # The sidecar's keys as 0.7.0 counts them: a selected key by its matching attempts, any
    # other key (beyond --limit, say) by all of its rows.
    contents = dict(selected)
    for key, rows in existing.sidecar.items():
        attempts = attempts_of(key, contents[key]) if key in contents else rows
        counts.terminal += any(_is_terminal(a, retry_terminal_timeouts) for a in attempts)
        counts.maxed += len(attempts) >= cap
    if legacy_refused:
        first = min(legacy_refused)
        raise ResumeConflict(
            f"Cannot resume: {output_name!r} holds {len(legacy_refused)} result(s) without _ng_reverify_key "
            f"(first: task {first[0]}, rollout {first[1]}); ATIF mode resumes by content key only. "
            "Pass --overwrite or choose another --output."
        )
    if conflicts:
        first = min(conflicts)
        raise ResumeConflict(
            f"Cannot resume: {output_name!r} holds {len(conflicts)} result(s) computed from different inputs "
            f"or verifier configuration (first: task {first[0]}, rollout {first[1]}). Pass --overwrite or "
            "choose another --output."
        )
    counts.todo = len(todo)
    return todo, counts

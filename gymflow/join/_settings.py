"""Settings of a join: where to read and write, the switches that change output bytes, the result.

``gymflow eval join``'s defaults live here (:func:`resolve_settings`); the direct path and the
Prefect flow take the same :class:`JoinSettings` and return the same :class:`JoinResult`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from gymflow import storage
from gymflow.errors import UsageError

__all__ = ["COMMAND", "JoinResult", "JoinSettings", "default_output", "resolve_settings"]

COMMAND: Final = "eval join"
DEFAULT_ROLLOUTS: Final = "rollouts.jsonl"
DEFAULT_CAPTURE_DIR: Final = "model-calls"


@dataclass(frozen=True)
class JoinSettings:
    """Where to read and write, and the two switches that change output bytes."""

    rollouts: str
    output: str
    capture_dir: str | None
    perf: bool = True

    def parameters(self) -> dict[str, Any]:
        """Output-affecting parameters (the cache key's); paths are not part of the key."""
        return {"capture": self.capture_dir is not None, "perf": self.perf}

    def record_parameters(self) -> dict[str, Any]:
        return {
            **self.parameters(),
            "rollouts": storage.to_uri(self.rollouts),
            "capture_dir": None if self.capture_dir is None else storage.to_uri(self.capture_dir),
            "output": storage.to_uri(self.output),
        }


@dataclass
class JoinResult:
    """What a join did; ``up_to_date`` means nothing was recomputed."""

    settings: JoinSettings
    summary: dict[str, Any]
    record_url: str
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    up_to_date: bool = False


def default_output(rollouts: str) -> str:
    """``<stem>_joined.jsonl`` beside the rollouts file."""
    base = storage.name(rollouts)
    stem = base[: -len(".jsonl")] if base.endswith(".jsonl") else base
    return rollouts[: len(rollouts.rstrip("/")) - len(base)] + f"{stem}_joined.jsonl"


def resolve_settings(
    run_dir: str,
    rollouts: str | None = None,
    capture_dir: str | None = None,
    output: str | None = None,
    *,
    no_capture: bool = False,
    perf: bool = True,
) -> JoinSettings:
    """Defaults of ``gymflow eval join``: relative paths resolve under ``run_dir``."""
    rollouts_url = storage.resolve_under(run_dir, rollouts or DEFAULT_ROLLOUTS)
    output_url = storage.resolve_under(run_dir, output) if output else default_output(rollouts_url)
    if storage.to_uri(output_url) == storage.to_uri(rollouts_url):
        raise UsageError(f"--output {output_url} is the input file; the join never edits its input in place")
    capture = None if no_capture else storage.resolve_under(run_dir, capture_dir or DEFAULT_CAPTURE_DIR)
    return JoinSettings(rollouts=rollouts_url, output=output_url, capture_dir=capture, perf=perf)

"""What every input format (native Gym rows, ATIF trajectories) hands the reverify core: one
selected rollout to re-verify. Its own module, beside both packages, so that `gymflow.atif`
never imports `gymflow.reverify` (which imports `gymflow.atif` for ATIF input)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

InputFormat = Literal["gym", "atif"]


@dataclass(frozen=True)
class Item:
    """One rollout to send to ``/verify`` (reverify.md §2.2 native, §3.7 ATIF).

    ``body`` is the request body before sending (ATIF bodies still hold ``_ng_atif_provenance``,
    which the client removes); ``source_sha256`` is the hex digest of §4 point 4 (native: the
    materialized line, ``\\n``, the rollout or sidecar line; ATIF: the trajectory file's bytes),
    from which the core derives ``_ng_reverify_key`` once the row is routed.
    """

    task: int
    rollout: int
    body: dict[str, Any]
    source_sha256: str
    mode: InputFormat = "gym"

    @property
    def key(self) -> tuple[int, int]:
        return (self.task, self.rollout)

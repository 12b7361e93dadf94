"""Binding turn and invocation references to captured calls (health spec §4).

A reference binds only by ``model_call_id`` or by the exact (``model_ref``, ``response_id``) pair:
never by position, time, model name or payload.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gymflow.evidence import ModelCallRef, ModelServerRef, TrajectoryModelCall, TrajectoryRecord
from gymflow.evidence.references import CallIndex


@dataclass(frozen=True, slots=True)
class BindingView:
    """How the references of one view resolve."""

    references: tuple[str, ...]
    """Reference keys, in order, one per distinct reference identity."""
    missing: tuple[str, ...]
    duplicated: tuple[tuple[str, int], ...]
    bound: tuple[int, ...]
    """Captured positions of the bound calls, de-duplicated and ascending."""

    @property
    def observed(self) -> bool:
        return bool(self.references)

    @property
    def complete(self) -> bool:
        return self.observed and not self.missing and not self.duplicated


def _ref_tuple(ref: ModelServerRef | None) -> tuple[str, str] | None:
    return None if ref is None else (ref.type, ref.name)


def reference_key(ref: ModelCallRef) -> str:
    if ref.model_call_id:
        return f"call:{ref.model_call_id}"
    server = ref.model_ref
    kind, name = (server.type, server.name) if server is not None else ("", "")
    return f"response:{kind}:{name}:{ref.response_id or ''}"


def key_locator(key: str) -> str:
    """The text after a key's last ``:`` (so ``response:...:resp:9`` reports ``9``)."""
    return key.rsplit(":", 1)[-1]


def _identity(ref: ModelCallRef) -> tuple[str, str, str, str]:
    server = ref.model_ref
    return (
        ref.model_call_id or "",
        server.type if server is not None else "",
        server.name if server is not None else "",
        ref.response_id or "",
    )


def index_calls(calls: Sequence[TrajectoryModelCall]) -> CallIndex:
    """The shared reference index over one record's captured calls."""
    return CallIndex(
        (call.model_call_id, _ref_tuple(call.response_metadata.model_ref), call.response_metadata.response_id)
        for call in calls
    )


def bind(refs: Iterable[ModelCallRef], index: CallIndex) -> BindingView:
    seen: set[tuple[str, str, str, str]] = set()
    references: list[str] = []
    missing: list[str] = []
    duplicated: list[tuple[str, int]] = []
    bound: set[int] = set()
    for ref in refs:
        identity = _identity(ref)
        if identity in seen:
            continue
        seen.add(identity)
        key = reference_key(ref)
        references.append(key)
        positions = index.resolve(ref.model_call_id, _ref_tuple(ref.model_ref), ref.response_id)
        if not positions:
            missing.append(key)
        elif len(positions) > 1:
            duplicated.append((key, len(positions)))
        else:
            bound.add(positions[0])
    return BindingView(tuple(references), tuple(missing), tuple(duplicated), tuple(sorted(bound)))


def turn_references(record: TrajectoryRecord) -> list[ModelCallRef]:
    return [ref for turn in record.turns for ref in turn.model_calls]


def owned_references(record: TrajectoryRecord) -> list[ModelCallRef]:
    return turn_references(record) + [ref for inv in record.invocations for ref in inv.model_calls]

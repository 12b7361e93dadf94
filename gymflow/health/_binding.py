"""Binding turn and invocation references to captured calls (health spec §4).

A reference binds only by ``model_call_id`` or by the exact (``model_ref``, ``response_id``) pair:
never by position, time, model name or payload.
"""

from __future__ import annotations

from collections.abc import Sequence
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


def index_calls(calls: Sequence[TrajectoryModelCall]) -> CallIndex:
    """The shared reference index over one record's captured calls."""
    return CallIndex(
        (call.model_call_id, _ref_tuple(call.response_metadata.model_ref), call.response_metadata.response_id)
        for call in calls
    )


class _Binder:
    """Binds references one by one; :meth:`view` snapshots the references added so far."""

    __slots__ = ("_bound", "_duplicated", "_index", "_missing", "_references", "_seen")

    def __init__(self, index: CallIndex) -> None:
        self._index = index
        self._seen: set[tuple[str, str, str, str]] = set()
        self._references: list[str] = []
        self._missing: list[str] = []
        self._duplicated: list[tuple[str, int]] = []
        self._bound: set[int] = set()

    def add(self, ref: ModelCallRef) -> None:
        server = ref.model_ref
        server_key = None if server is None else (server.type, server.name)
        identity = (
            ref.model_call_id or "",
            server_key[0] if server_key is not None else "",
            server_key[1] if server_key is not None else "",
            ref.response_id or "",
        )
        if identity in self._seen:
            return
        self._seen.add(identity)
        key = reference_key(ref)
        self._references.append(key)
        positions = self._index.resolve(ref.model_call_id, server_key, ref.response_id)
        if not positions:
            self._missing.append(key)
        elif len(positions) > 1:
            self._duplicated.append((key, len(positions)))
        else:
            self._bound.add(positions[0])

    def view(self) -> BindingView:
        return BindingView(
            tuple(self._references), tuple(self._missing), tuple(self._duplicated), tuple(sorted(self._bound))
        )


def bind_views(record: TrajectoryRecord) -> tuple[BindingView, BindingView]:
    """The turn view (references of the turns) and the owned view (those of the turns, then of
    the invocations), bound against the record's captured calls in one pass."""
    binder = _Binder(index_calls(record.model_calls))
    for turn in record.turns:
        for ref in turn.model_calls:
            binder.add(ref)
    turn_view = binder.view()
    if not any(invocation.model_calls for invocation in record.invocations):
        return turn_view, turn_view
    for invocation in record.invocations:
        for ref in invocation.model_calls:
            binder.add(ref)
    return turn_view, binder.view()

"""Binding turn and invocation references to captured calls (health spec §4).

A reference binds only by ``model_call_id`` or by the exact (``model_ref``, ``response_id``) pair:
never by position, time, model name or payload.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gymflow.evidence import ModelCallRef, ModelServerRef, TrajectoryModelCall, TrajectoryRecord


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


class CallIndex:
    """Captured calls indexed by call id and by (server, response id), built once per record,
    with each distinct reference resolved once for both views."""

    def __init__(self, calls: Sequence[TrajectoryModelCall]) -> None:
        self.calls = calls
        self.by_id: dict[str, list[int]] = {}
        self.by_response: dict[tuple[str, str, str], list[int]] = {}
        for position, call in enumerate(calls):
            meta = call.response_metadata
            if call.model_call_id:
                self.by_id.setdefault(call.model_call_id, []).append(position)
            if meta.model_ref is not None and meta.response_id:
                key = (meta.model_ref.type, meta.model_ref.name, meta.response_id)
                self.by_response.setdefault(key, []).append(position)
        self.resolved: dict[tuple[str, str, str, str], list[int]] = {}

    def matches(self, ref: ModelCallRef, identity: tuple[str, str, str, str]) -> list[int]:
        found = self.resolved.get(identity)
        if found is None:
            found = self._resolve(ref)
            self.resolved[identity] = found
        return found

    def _resolve(self, ref: ModelCallRef) -> list[int]:
        wanted_server = _ref_tuple(ref.model_ref)
        if ref.model_call_id:
            return [
                position
                for position in self.by_id.get(ref.model_call_id, ())
                if (
                    wanted_server is None
                    or _ref_tuple(self.calls[position].response_metadata.model_ref) == wanted_server
                )
                and (
                    ref.response_id is None
                    or self.calls[position].response_metadata.response_id == ref.response_id
                )
            ]
        assert wanted_server is not None and ref.response_id  # a valid reference
        return list(self.by_response.get((*wanted_server, ref.response_id), ()))


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
        positions = index.matches(ref, identity)
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

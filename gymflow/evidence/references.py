"""Resolving model-call references against captured calls (evidence.md §6 step 2, health spec §4).

A reference names a call by ``model_call_id`` (kept only where its ``model_ref`` and
``response_id``, when set, agree with the call's) or, without a call id, by the exact triple
``(model_ref.type, model_ref.name, response_id)``. Position, time, model name and payload never
decide. The join (candidates, claims, ``ng_perf``) and the health checks (binding views) both
resolve through :class:`CallIndex`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

__all__ = ["CallIndex", "ServerKey", "server_key"]

ServerKey = tuple[Any, Any]
"""``(type, name)`` of a model server reference."""

_NONE: Final[Sequence[int]] = ()


def server_key(model_ref: Any) -> ServerKey | None:
    """``(type, name)`` of a dumped ``ModelServerRef`` (an object), else None."""
    if isinstance(model_ref, dict):
        return (model_ref.get("type"), model_ref.get("name"))
    return None


class CallIndex:
    """Captured calls indexed by ``model_call_id`` and by ``(type, name, response_id)``.

    ``calls`` holds one ``(model_call_id, server, response_id)`` triple per captured position,
    ``server`` being a :data:`ServerKey` or None. Only string, non-empty ids are indexed.
    """

    __slots__ = ("_by_id", "_by_response", "_resolved", "calls")

    def __init__(self, calls: Iterable[tuple[Any, ServerKey | None, Any]]) -> None:
        self.calls = list(calls)
        by_id: dict[str, list[int]] = {}
        by_response: dict[tuple[Any, Any, str], list[int]] = {}
        for position, (call_id, server, response_id) in enumerate(self.calls):
            if call_id and type(call_id) is str:
                if call_id in by_id:
                    by_id[call_id].append(position)
                else:
                    by_id[call_id] = [position]
            if server is not None and response_id and type(response_id) is str:
                by_response.setdefault((server[0], server[1], response_id), []).append(position)
        self._by_id = by_id
        self._by_response = by_response
        self._resolved: dict[tuple[Any, ServerKey | None, Any], Sequence[int]] = {}

    def find(self, model_call_id: Any, server: ServerKey | None, response_id: Any) -> Sequence[int]:
        """Positions of the calls a reference names (ascending; the result must not be changed)."""
        if model_call_id:
            found = self._by_id.get(model_call_id, _NONE)
            if server is None and response_id is None:
                return found
            calls = self.calls
            return [
                position
                for position in found
                if (server is None or calls[position][1] == server)
                and (response_id is None or calls[position][2] == response_id)
            ]
        if server is None or not response_id:
            return _NONE
        return self._by_response.get((server[0], server[1], response_id), _NONE)

    def find_ref(self, ref: Mapping[str, Any]) -> Sequence[int]:
        """:meth:`find` for a dumped ``ModelCallRef`` object."""
        return self.find(ref.get("model_call_id"), server_key(ref.get("model_ref")), ref.get("response_id"))

    def resolve(self, model_call_id: Any, server: ServerKey | None, response_id: Any) -> Sequence[int]:
        """:meth:`find`, remembered per reference (for callers that resolve one reference often)."""
        key = (model_call_id, server, response_id)
        found = self._resolved.get(key)
        if found is None:
            found = self._resolved[key] = self.find(model_call_id, server, response_id)
        return found

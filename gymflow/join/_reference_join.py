"""The reference join: agent observations' model-call references against captured calls (§6).

A reference names a call by ``model_call_id`` (optionally confirmed by ``model_ref`` and
``response_id``) or by the exact pair ``(model_ref, response_id)``. A match must be unique; the
first invocation to match a record claims it. Timestamps and list order never decide ownership.
Candidates come from the shared :class:`~gymflow.evidence.references.CallIndex`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from gymflow.evidence.references import CallIndex, server_key

__all__ = ["dedupe_gaps", "join_references"]

Obj = dict[str, Any]

_STALE_CODES: Final = frozenset(
    {"model_call_reference_unmatched", "model_call_reference_ambiguous", "model_call_reference_conflict"}
)
OWNERSHIP: Final = "model_call_ownership_unavailable"


def _gap(code: str, invocation_id: str | None, detail: str | None) -> Obj:
    return {"code": code, "invocation_id": invocation_id, "detail": detail}


def dedupe_gaps(gaps: Iterable[Obj]) -> list[Obj]:
    """Drop repeats of ``(code, invocation_id, detail)``, keeping the first."""
    seen: set[tuple[Any, Any, Any]] = set()
    out: list[Obj] = []
    for item in gaps:
        key = (item.get("code"), item.get("invocation_id"), item.get("detail"))
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _canonical(record: Obj) -> Obj:
    return {
        "model_call_id": record["model_call_id"],
        "model_ref": record["model_ref"],
        "response_id": record["response_id"],
    }


def _attach_sessions(invocations: dict[str, Obj], records: list[Obj]) -> None:
    for record in records:
        session, call_id = record["client_session_id"], record["model_call_id"]
        if not session or not call_id or session not in invocations:
            continue
        invocation = invocations[session]
        ref, response_id = server_key(record["model_ref"]), record["response_id"]
        keys = {
            (call_id, None, None),
            (call_id, ref, None),
            (call_id, None, response_id),
            (call_id, ref, response_id),
        }
        if ref is not None and response_id:
            keys.add((None, ref, response_id))
        existing = {
            (r["model_call_id"], server_key(r["model_ref"]), r["response_id"])
            for r in invocation["model_calls"]
        }
        if not keys & existing:
            invocation["model_calls"].append(_canonical(record))


def _record_name(record: Obj) -> Any:
    return record["model_call_id"] or record["response_id"]


def join_references(bundle: Obj, records: list[Obj]) -> None:
    """Resolve every reference of the dumped ``bundle`` against ``records``, in place.

    Matched references become canonical ``{model_call_id, model_ref, response_id}``; the bundle's
    stale join gaps are replaced by this join's gaps, then one ownership gap per unclaimed record.
    """
    invocations = [r for r in bundle["records"] if r["kind"] == "agent_invocation"]
    compactions = [r for r in bundle["records"] if r["kind"] == "context_compaction"]
    _attach_sessions({inv["invocation_id"]: inv for inv in invocations}, records)
    index = CallIndex((r["model_call_id"], server_key(r["model_ref"]), r["response_id"]) for r in records)
    claims: dict[int, str] = {}
    gaps: list[Obj] = []

    for invocation in invocations:
        owner = invocation["invocation_id"]
        refs = invocation["model_calls"]
        for i, ref in enumerate(refs):
            found = index.find_ref(ref)
            if len(found) != 1:
                code = "model_call_reference_unmatched" if not found else "model_call_reference_ambiguous"
                gaps.append(_gap(code, owner, ref["model_call_id"] or ref["response_id"]))
            elif found[0] in claims:
                gaps.append(_gap("model_call_reference_conflict", owner, _record_name(records[found[0]])))
            else:
                claims[found[0]] = owner
                refs[i] = _canonical(records[found[0]])

    for item in compactions:
        owner = item["invocation_id"]
        refs = item["model_calls"]
        for i, ref in enumerate(refs):
            found = index.find_ref(ref)
            if len(found) != 1:
                code = "model_call_reference_unmatched" if not found else "model_call_reference_ambiguous"
                gaps.append(_gap(code, owner, f"model_calls:{ref['model_call_id'] or ref['response_id']}"))
                continue
            record = records[found[0]]
            claimant = claims.get(found[0])
            if claimant != owner:
                code = "model_call_reference_conflict" if claimant is not None else OWNERSHIP
                gaps.append(_gap(code, owner, f"model_calls:{_record_name(record)}"))
            else:
                refs[i] = _canonical(record)
        for name in ("before_model_call", "after_model_call"):
            ref = item[name]
            if ref is None:
                continue
            found = index.find_ref(ref)
            if len(found) == 1:
                claimant = claims.get(found[0])
                if claimant is not None and claimant != owner:
                    gaps.append(
                        _gap(
                            "model_call_reference_conflict",
                            owner,
                            f"{name}:{_record_name(records[found[0]])}",
                        )
                    )
                else:
                    item[name] = _canonical(records[found[0]])
            else:
                code = "model_call_reference_unmatched" if not found else "model_call_reference_ambiguous"
                gaps.append(_gap(code, owner, f"{name}:{ref['model_call_id'] or ref['response_id']}"))

    kept = [
        g
        for g in bundle["gaps"]
        if g["code"] not in _STALE_CODES
        and not (
            g["code"] == OWNERSHIP
            and g["invocation_id"] is None
            and isinstance(g["detail"], str)
            and g["detail"].startswith("capture:")
        )
    ]
    for position, record in enumerate(records):
        if position not in claims:
            name = _record_name(record) or "unknown"
            gaps.append(_gap(OWNERSHIP, None, f"capture:{name}:call_index={record['call_index']}"))
    bundle["gaps"] = dedupe_gaps([*kept, *gaps])

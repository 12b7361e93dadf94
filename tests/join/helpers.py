"""Builders for join tests, in the notation of evidence.md §13."""

from __future__ import annotations

import uuid
from typing import Any

import fsspec  # type: ignore[import-untyped]
import orjson

from gymflow.join import CaptureStore, RowOutcome, join_row, join_row_outcome

POLICY = {"type": "responses_api_models", "name": "policy_model"}
JUDGE = {"type": "responses_api_models", "name": "judge_model"}

Obj = dict[str, Any]


def answer(text: str = "ok") -> list[Obj]:
    return [
        {
            "type": "message",
            "role": "assistant",
            "id": "o",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
    ]


def L(  # noqa: N802 - the spec's notation
    call_id: str | None,
    *,
    response_id: str | None = None,
    usage: Obj | None = None,
    ref: Obj | None = POLICY,
    started: float = 1.0,
    latency: Any = 50.0,
    response: Any = "default",
    request: Any = "default",
    **extra: Any,
) -> Obj:
    """A capture line for ``call_id``: policy model, 50 ms, a Responses answer."""
    if response == "default":
        response = {
            "id": response_id if response_id is not None else f"resp_{call_id}",
            "status": "completed",
            "output": answer(),
            "usage": usage if usage is not None else {"input_tokens": 5, "output_tokens": 2},
        }
    line: Obj = {
        "model_call_id": call_id,
        "dialect": "responses",
        "model_ref": ref,
        "started_at": started,
        "completed_at": started + 0.05,
        "latency_ms": latency,
        "latency_ttft_ms": None,
        "status_code": 200,
        "error_category": None,
        "request": {"input": [{"role": "user", "content": "q"}]} if request == "default" else request,
        "response": response,
    }
    line.update(extra)
    return line


def jsonl(*lines: Any) -> bytes:
    """File bytes: dict lines are encoded, str lines written as they are."""
    out = b""
    for line in lines:
        out += (line if isinstance(line, str) else orjson.dumps(line).decode()).encode() + b"\n"
    return out


def row(task: Any, rollout: Any, **extra: Any) -> Obj:
    return {"_ng_task_index": task, "_ng_rollout_index": rollout, **extra}


def ref(call_id: str | None = None, response_id: str | None = None, model_ref: Obj | None = None) -> Obj:
    out: Obj = {}
    if call_id is not None:
        out["model_call_id"] = call_id
    if model_ref is not None:
        out["model_ref"] = model_ref
    if response_id is not None:
        out["response_id"] = response_id
    return out


def inv(invocation_id: str, *refs: Obj, **extra: Any) -> Obj:
    return {"kind": "agent_invocation", "invocation_id": invocation_id, "model_calls": list(refs), **extra}


def bundle(*records: Obj, gaps: list[Obj] | None = None, source: str = "example_agent") -> Obj:
    return {"source": source, "records": list(records), "gaps": gaps or []}


def memory_store(files: dict[str, bytes]) -> CaptureStore:
    """A :class:`CaptureStore` over a new directory of fsspec's ``memory://`` holding ``files``
    (file name -> bytes); the ``memfs`` fixture empties the memory filesystem around each test."""
    directory = f"memory://capture-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    fs.mkdir(directory)
    for name, data in files.items():
        fs.pipe(f"{directory}/{name}", data)
    return CaptureStore(directory)


def store(**files: bytes) -> CaptureStore:
    """``store(**{"3-1": jsonl(...)})``; a name ending ``.incomplete`` is a marker."""
    out: dict[str, bytes] = {}
    for name, data in files.items():
        if name.endswith(".incomplete"):
            out[name.removesuffix(".incomplete") + ".capture.incomplete"] = data
        else:
            out[name + ".capture.jsonl"] = data
    return memory_store(out)


def join(r: Obj, capture: CaptureStore | None = None, *, perf: bool = True) -> Obj:
    return join_row(r, capture if capture is not None else store(), perf=perf)


def outcome(r: Obj, capture: CaptureStore | None = None, *, perf: bool = True) -> RowOutcome:
    return join_row_outcome(r, capture if capture is not None else store(), perf=perf)


def codes(gaps: list[Obj]) -> list[str]:
    return [g["code"] for g in gaps]


def gap_tuples(gaps: list[Obj]) -> list[tuple[Any, Any, Any]]:
    return [(g["code"], g.get("invocation_id"), g.get("detail")) for g in gaps]

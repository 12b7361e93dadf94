"""Conversation items (OpenAI Responses input items) as 0.7.0 validates and re-dumps them (§5).

Function calls, their outputs, reasoning items and role messages are checked and gain the SDK's
null defaults; an untyped item is classified by its shape, and one that fits no shape becomes the
``mcp_list_tools`` fallback object 0.7.0 produces. [G] Other typed items (hosted tools, shell, MCP,
compaction, ...) pass through unchanged (0.7.0 fills their SDK defaults): a known divergence.
Keys a known item type does not define are kept after the defined ones, so nothing is dropped.
"""

from __future__ import annotations

from typing import Any, Final

from gymflow.evidence.lax import fail, opt_literal, opt_str, req_str

__all__ = ["conversation_item"]

Obj = dict[str, Any]

_ROLES: Final = frozenset({"user", "assistant", "system", "developer"})
_ITEM_STATUS: Final = frozenset({"in_progress", "completed", "incomplete"})
_FUNCTION_CALL_KEYS: Final = ("arguments", "call_id", "name", "type", "id", "status", "namespace")
_OUTPUT_KEYS: Final = ("call_id", "output", "type", "id", "status")
_REASONING_KEYS: Final = ("id", "summary", "type", "encrypted_content", "content")


def _extras(item: Obj, out: Obj, known: tuple[str, ...]) -> Obj:
    if len(item) <= len(out) and item.keys() <= out.keys():
        return out
    for key, value in item.items():
        if key not in known:
            out[key] = value
    return out


def _function_call(item: Obj, where: str) -> Obj:
    get = item.get
    arguments, call_id, name = get("arguments"), get("call_id"), get("name")
    if type(arguments) is not str or type(call_id) is not str or type(name) is not str:
        fail(where, "function_call needs string arguments, call_id and name")
    out = {
        "arguments": arguments,
        "call_id": call_id,
        "name": name,
        "type": "function_call",
        "id": opt_str(get("id"), "id"),
        "status": opt_literal(get("status"), _ITEM_STATUS, "status"),
        "namespace": opt_str(get("namespace"), "namespace"),
    }
    return _extras(item, out, _FUNCTION_CALL_KEYS)


def _function_call_output(item: Obj, where: str) -> Obj:
    output = item.get("output")
    if not isinstance(output, str | list):
        fail("output", "a string or a list is required")
    out = {
        "call_id": req_str(item.get("call_id"), "call_id"),
        "output": output,
        "type": "function_call_output",
        "id": opt_str(item.get("id"), "id"),
        "status": opt_literal(item.get("status"), _ITEM_STATUS, "status"),
    }
    return _extras(item, out, _OUTPUT_KEYS)


def _reasoning(item: Obj, where: str) -> Obj:
    summary = item.get("summary")
    if not isinstance(summary, list):
        fail("summary", "a list is required")
    out = {
        "id": req_str(item.get("id"), "id"),
        "summary": summary,
        "type": "reasoning",
        "encrypted_content": opt_str(item.get("encrypted_content"), "encrypted_content"),
        "content": item.get("content"),
    }
    return _extras(item, out, _REASONING_KEYS)


def _output_part(part: Any) -> Any:
    if isinstance(part, dict) and part.get("type") == "output_text" and "logprobs" not in part:
        return {**part, "logprobs": None}
    return part


def _message(item: Obj, where: str) -> Obj:
    role = item.get("role")
    if not (isinstance(role, str) and role in _ROLES):
        fail("role", f"must be one of {sorted(_ROLES)}")
    content = item.get("content")
    if not isinstance(content, str | list):
        fail("content", "a string or a list is required")
    status = item.get("status")
    if role != "assistant" and isinstance(content, list) and status in _ITEM_STATUS:
        out: Obj = {"content": content, "role": role, "status": status, "type": "message"}
        return _extras(item, out, ("content", "role", "status", "type"))
    item_id = item.get("id")
    first = content[0] if isinstance(content, list) and content else None
    if (
        role == "assistant"
        and isinstance(item_id, str)
        and isinstance(first, dict)
        and first.get("type") in ("output_text", "refusal")
    ):
        out = {
            "id": item_id,
            "content": [_output_part(part) for part in content],
            "role": role,
            "status": opt_literal(status, _ITEM_STATUS, "status") or "completed",
            "type": "message",
            "phase": item.get("phase"),
        }
        return _extras(item, out, ("id", "content", "role", "status", "type", "phase"))
    out = {"content": content, "role": role, "type": "message", "phase": item.get("phase")}
    return _extras(item, out, ("content", "role", "type", "phase"))


def conversation_item(item: Any, where: str = "conversation[]") -> Any:
    """Validate one input item and return its 0.7.0 dump (a new object; the input is not changed)."""
    if not isinstance(item, dict):
        fail(where, "an object is required")
    kind = item.get("type")
    if kind == "function_call":
        return _function_call(item, where)
    if kind == "function_call_output":
        return _function_call_output(item, where)
    if kind == "reasoning":
        return _reasoning(item, where)
    if kind == "message":
        return _message(item, where)
    if "type" in item:
        return item
    if "name" in item and "arguments" in item and "call_id" in item:
        return _function_call(item, where)
    if isinstance(item.get("call_id"), str) and "output" in item:
        return _function_call_output(item, where)
    if isinstance(item.get("id"), str) and isinstance(item.get("summary"), list):
        return _reasoning(item, where)
    if "role" in item:
        return _message(item, where)
    return {"id": None, "server_label": None, "tools": [], "type": "mcp_list_tools", "error": None, **item}

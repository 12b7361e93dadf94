"""Conversation items (OpenAI Responses input items) as 0.7.0 validates and re-dumps them (§5).

Routing follows 0.7.0's discriminator:

* a ``type`` key that is present must hold one of the known item types exactly
  (:data:`ITEM_TYPES`); anything else (``""``, ``null``, a number, a boolean, an object, an
  unknown or differently cased string, a routing alias such as ``"easy_message"``) is invalid;
* ``"message"`` picks the input, output or easy message form from the role, content and status;
* an untyped item is classified by its shape; one that fits no shape becomes the
  ``mcp_list_tools`` fallback object.

Messages, function calls, their outputs and reasoning items are checked and dumped with their
defaults; keys those models do not define are dropped, as 0.7.0 drops them. ``mcp_call`` and
``mcp_list_tools`` keep unknown keys after the defined ones. Items carrying token metadata
(``prompt_token_ids``, ...) need all three required token fields and dump them first, as the
training variants do. Reasoning summary and content parts, message input content parts and
``function_call_output`` output parts (:mod:`gymflow.evidence.content_parts`) are checked.

[G] Other typed items (hosted tools, shell, compaction, ...) pass through unchanged (0.7.0 fills
their SDK defaults and checks their fields), and output-text annotations and ``routed_experts``
are not checked element by element: known divergences.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from gymflow.evidence.content_parts import input_part, output_item_part
from gymflow.evidence.lax import ValidationError, fail, lax_float, lax_int, opt_literal, opt_str, req_str

__all__ = ["ITEM_TYPES", "conversation_item", "conversation_items", "raise_discrimination_errors"]

Obj = dict[str, Any]

ITEM_TYPES: Final = frozenset(
    {
        "message",
        "function_call",
        "function_call_output",
        "reasoning",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "file_search_call",
        "web_search_call",
        "computer_call",
        "image_generation_call",
        "code_interpreter_call",
        "local_shell_call",
        "custom_tool_call",
        "computer_call_output",
        "custom_tool_call_output",
        "local_shell_call_output",
        "mcp_approval_response",
        "apply_patch_call",
        "apply_patch_call_output",
        "compaction",
        "shell_call",
        "shell_call_output",
        "tool_search_call",
        "tool_search_output",
        "compaction_trigger",
        "additional_tools",
    }
)
"""The ``type`` values 0.7.0 accepts on a conversation item."""

_SIMPLE_ROLES: Final = frozenset({"user", "system", "developer"})
_ROLES: Final = _SIMPLE_ROLES | {"assistant"}
_ITEM_STATUS: Final = frozenset({"in_progress", "completed", "incomplete"})
_PHASES: Final = frozenset({"commentary", "final_answer"})
_OUTPUT_PARTS: Final = frozenset({"output_text", "refusal"})
_TOKEN_REQUIRED: Final = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
_TOKEN_FIELDS: Final = frozenset({*_TOKEN_REQUIRED, "routed_experts"})
_TRAINABLE: Final = frozenset({"easy", "input", "output", "function_call", "reasoning"})


def _first_part_type(content: Any) -> Any:
    """The ``type`` of the first content part (``refusal`` for an untyped refusal part), or None."""
    if not isinstance(content, list) or not content:
        return None
    first = content[0]
    if isinstance(first, dict):
        return first.get("type") or ("refusal" if "refusal" in first else None)
    return None


def _message_form(item: Obj) -> str:
    """``input``, ``output`` or ``easy``: which message model 0.7.0 routes a message to."""
    content = item.get("content")
    if item.get("role") in _SIMPLE_ROLES:
        if isinstance(content, list) and item.get("status") in _ITEM_STATUS:
            return "input"
        return "easy"
    if isinstance(content, list):
        if content:
            if _first_part_type(content) in _OUTPUT_PARTS:
                return "output"
        elif isinstance(item.get("id"), str):
            return "output"
    return "easy"


def _untyped_form(item: Obj) -> str:
    role, content = item.get("role"), item.get("content")
    if role in _ROLES and isinstance(content, str | list):
        form = _message_form(item)
        if form == "output":
            return form if isinstance(item.get("id"), str) else "mcp_list_tools"
        return form if _first_part_type(content) not in _OUTPUT_PARTS else "mcp_list_tools"
    if (
        "role" not in item
        and isinstance(item.get("id"), str)
        and isinstance(content, list)
        and (not content or _first_part_type(content) in _OUTPUT_PARTS)
    ):
        return "output"
    if "arguments" in item and "name" in item:
        return "function_call" if "call_id" in item else "mcp_call"
    if isinstance(item.get("call_id"), str) and "output" in item:
        return "function_call_output"
    if isinstance(item.get("id"), str) and isinstance(item.get("summary"), list):
        return "reasoning"
    return "mcp_list_tools"


def _literal_default(value: Any, allowed: frozenset[str], default: str, where: str) -> str:
    if value is _MISSING:
        return default
    if isinstance(value, str) and value in allowed:
        return value
    fail(where, f"must be one of {sorted(allowed)}: {value!r}")


_MISSING: Final = object()


def _type_literal(item: Obj, kind: str) -> str:
    """The item's ``type``: ``kind`` when absent, else it must be exactly ``kind``."""
    value = item.get("type", kind)
    if isinstance(value, str) and value == kind:
        return kind
    fail("type", f"must be {kind!r}: {value!r}")


def _content_list(value: Any, where: str) -> list[Any]:
    if isinstance(value, list):
        return value
    fail(where, "a list is required")


def _easy_message(item: Obj) -> Obj:
    content = item.get("content")
    if isinstance(content, list):
        content = [input_part(part) for part in content]
    elif not isinstance(content, str):
        fail("content", "a string or a list is required")
    role = item.get("role")
    if not (isinstance(role, str) and role in _ROLES):
        fail("role", f"must be one of {sorted(_ROLES)}")
    return {
        "content": content,
        "role": role,
        "type": _type_literal(item, "message"),
        "phase": opt_literal(item.get("phase"), _PHASES, "phase"),
    }


def _input_message(item: Obj) -> Obj:
    content = [input_part(part) for part in _content_list(item.get("content"), "content")]
    role = item.get("role")
    if not (isinstance(role, str) and role in _SIMPLE_ROLES):
        fail("role", f"must be one of {sorted(_SIMPLE_ROLES)}")
    return {
        "content": content,
        "role": role,
        "status": _literal_default(item.get("status", _MISSING), _ITEM_STATUS, "completed", "status"),
        "type": _type_literal(item, "message"),
    }


def _output_part(part: Any) -> Obj:
    if not isinstance(part, dict):
        fail("content[]", "an object is required")
    if isinstance(part.get("text"), str) and isinstance(part.get("annotations"), list):
        if part.get("type", "output_text") == "output_text":
            logprobs = part.get("logprobs")
            if logprobs is None or isinstance(logprobs, list):
                return {
                    "annotations": part["annotations"],
                    "text": part["text"],
                    "type": "output_text",
                    "logprobs": logprobs,
                }
    if isinstance(part.get("refusal"), str) and part.get("type", "refusal") == "refusal":
        return {"refusal": part["refusal"], "type": "refusal"}
    fail("content[]", "an output_text or refusal part is required")


def _output_message(item: Obj) -> Obj:
    content = _content_list(item.get("content"), "content")
    return {
        "id": req_str(item.get("id"), "id"),
        "content": [_output_part(part) for part in content],
        "role": _literal_default(item.get("role", _MISSING), frozenset({"assistant"}), "assistant", "role"),
        "status": _literal_default(item.get("status", _MISSING), _ITEM_STATUS, "completed", "status"),
        "type": _type_literal(item, "message"),
        "phase": opt_literal(item.get("phase"), _PHASES, "phase"),
    }


def _function_call(item: Obj) -> Obj:
    get = item.get
    return {
        "arguments": req_str(get("arguments"), "arguments"),
        "call_id": req_str(get("call_id"), "call_id"),
        "name": req_str(get("name"), "name"),
        "type": _type_literal(item, "function_call"),
        "id": opt_str(get("id"), "id"),
        "status": opt_literal(get("status"), _ITEM_STATUS, "status"),
        "namespace": opt_str(get("namespace"), "namespace"),
    }


def _function_call_output(item: Obj) -> Obj:
    output = item.get("output")
    if isinstance(output, list):
        output = [output_item_part(part) for part in output]
    elif not isinstance(output, str):
        fail("output", "a string or a list is required")
    return {
        "call_id": req_str(item.get("call_id"), "call_id"),
        "output": output,
        "type": _type_literal(item, "function_call_output"),
        "id": opt_str(item.get("id"), "id"),
        "status": opt_literal(item.get("status"), _ITEM_STATUS, "status"),
    }


def _text_part(part: Any, kind: str, where: str) -> Obj:
    """A ``{text, type}`` part of a reasoning item (an SDK model: extra keys are kept)."""
    if not isinstance(part, dict):
        fail(where, "an object is required")
    if part.get("type") != kind:
        fail(f"{where}.type", f"must be {kind!r}")
    return _with_extras(part, {"text": req_str(part.get("text"), f"{where}.text"), "type": kind})


def _reasoning(item: Obj) -> Obj:
    content = item.get("content")
    if content is not None:
        content = [
            _text_part(part, "reasoning_text", "content[]") for part in _content_list(content, "content")
        ]
    summary = _content_list(item.get("summary"), "summary")
    return {
        "id": req_str(item.get("id"), "id"),
        "summary": [_text_part(part, "summary_text", "summary[]") for part in summary],
        "type": _type_literal(item, "reasoning"),
        "encrypted_content": opt_str(item.get("encrypted_content"), "encrypted_content"),
        "content": content,
    }


def _with_extras(item: Obj, out: Obj) -> Obj:
    """``out`` followed by the keys of ``item`` it does not define (SDK models allow extras)."""
    for key, value in item.items():
        if key not in out:
            out[key] = value
    return out


def _mcp_call(item: Obj) -> Obj:
    get = item.get
    out = {
        "id": opt_str(get("id"), "id"),
        "arguments": req_str(get("arguments"), "arguments"),
        "name": req_str(get("name"), "name"),
        "server_label": opt_str(get("server_label"), "server_label"),
        "type": _type_literal(item, "mcp_call"),
        "approval_request_id": opt_str(get("approval_request_id"), "approval_request_id"),
        "error": opt_str(get("error"), "error"),
        "output": opt_str(get("output"), "output"),
        "status": opt_str(get("status"), "status"),
    }
    return _with_extras(item, out)


def _mcp_list_tools(item: Obj) -> Obj:
    get = item.get
    tools = get("tools", [])
    if not isinstance(tools, list):
        fail("tools", "a list is required")
    out = {
        "id": opt_str(get("id"), "id"),
        "server_label": opt_str(get("server_label"), "server_label"),
        "tools": tools,
        "type": _type_literal(item, "mcp_list_tools"),
        "error": opt_str(get("error"), "error"),
    }
    return _with_extras(item, out)


_FORMS: Final = {
    "easy": _easy_message,
    "input": _input_message,
    "output": _output_message,
    "function_call": _function_call,
    "function_call_output": _function_call_output,
    "reasoning": _reasoning,
    "mcp_call": _mcp_call,
    "mcp_list_tools": _mcp_list_tools,
}


def _numbers(value: Any, where: str, coerce: Callable[[Any, str], Any]) -> list[Any]:
    if not isinstance(value, list):
        fail(where, "a list is required")
    out = [coerce(element, where) for element in value]
    if None in out:
        fail(where, "null is not a number")
    return out


def _token_metadata(item: Obj) -> Obj | None:
    """The training token fields of ``item`` (all required ones, or none), checked; None without them."""
    present = _TOKEN_FIELDS.intersection(item)
    if not present:
        return None
    missing = [name for name in _TOKEN_REQUIRED if name not in item]
    if missing:
        fail("token metadata", f"must include all required fields; missing: {', '.join(missing)}")
    prompt = _numbers(item["prompt_token_ids"], "prompt_token_ids", lax_int)
    generation = _numbers(item["generation_token_ids"], "generation_token_ids", lax_int)
    log_probs = _numbers(item["generation_log_probs"], "generation_log_probs", lax_float)
    experts = item.get("routed_experts")
    if experts is not None and not isinstance(experts, str | list):
        fail("routed_experts", "a string or a nested list is required")
    return {
        "prompt_token_ids": prompt,
        "generation_token_ids": generation,
        "generation_log_probs": log_probs,
        "routed_experts": experts,
    }


def conversation_item(item: Any, where: str = "conversation[]") -> Any:
    """Validate one input item and return its 0.7.0 dump (a new object; the input is not changed)."""
    if not isinstance(item, dict):
        fail(where, "an object is required")
    tokens = _token_metadata(item)
    if "type" in item:
        kind = item["type"]
        if kind is None:
            _untyped_form(item)  # routed as untyped first (a TypeError there escapes), as 0.7.0 does
        if not (type(kind) is str and kind in ITEM_TYPES):
            fail(f"{where}.type", f"not a known item type: {kind!r}")
        form = _message_form(item) if kind == "message" else kind
        if form not in _FORMS:
            return item
    else:
        form = _untyped_form(item)
    out = _FORMS[form](item)
    if tokens is not None and form in _TRAINABLE:
        return {**tokens, **out}
    return out


def conversation_items(items: list[Any], where: str = "conversation[]") -> list[Any]:
    """Validate a conversation as 0.7.0 does: every item is examined before the first validation
    error is raised, so a later item's ``TypeError`` (an unhashable ``role``, ``status`` or part
    ``type`` met while routing) wins, as it escapes pydantic's error collection."""
    out: list[Any] = []
    error: ValidationError | None = None
    for item in items:
        try:
            out.append(conversation_item(item, where))
        except ValidationError as exc:
            error = error or exc
    if error is not None:
        raise error
    return out


def raise_discrimination_errors(invocations: Iterable[Any]) -> None:
    """Raise the ``TypeError`` 0.7.0 meets routing a conversation item of these invocations.

    For validators that stop at the first error: 0.7.0 validates every field and item, and a
    ``TypeError`` escapes wherever it occurs, so it replaces any validation error. Only objects
    whose ``conversation`` is a list are examined (0.7.0 does not route the items otherwise).
    """
    for invocation in invocations:
        if isinstance(invocation, dict) and isinstance(conversation := invocation.get("conversation"), list):
            for item in conversation:
                try:
                    conversation_item(item)
                except ValidationError:
                    pass

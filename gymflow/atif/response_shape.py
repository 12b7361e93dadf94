"""The full Responses shape of a projected response (reverify.md §3.7: absent optional fields as null).

Key order and the fields each object carries are those NeMo Gym 0.7.0 sends (openai 2.44 models
dumped in JSON mode), so a verifier sees the same document.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REQUEST_FIELDS = (
    "background",
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "metadata",
    "parallel_tool_calls",
    "previous_response_id",
    "prompt",
    "reasoning",
    "service_tier",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "truncation",
    "user",
)
"""Keys of the materialized ``responses_create_params`` copied over the projected response."""

NOT_NULLABLE = frozenset({"parallel_tool_calls", "tool_choice", "tools"})
"""Request fields that, when null, keep the projected value (G, §3.9 point 9)."""

_RESPONSE_KEYS = (
    "id",
    "created_at",
    "error",
    "incomplete_details",
    "instructions",
    "metadata",
    "model",
    "object",
    "output",
    "parallel_tool_calls",
    "temperature",
    "tool_choice",
    "tools",
    "top_p",
    "background",
    "completed_at",
    "conversation",
    "max_output_tokens",
    "max_tool_calls",
    "moderation",
    "previous_response_id",
    "prompt",
    "prompt_cache_key",
    "prompt_cache_retention",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "status",
    "text",
    "top_logprobs",
    "truncation",
    "usage",
    "user",
)

_SHAPES: dict[str, tuple[str, ...]] = {
    "reasoning": ("context", "effort", "generate_summary", "summary"),
    "prompt": ("id", "variables", "version"),
}
_FUNCTION_TOOL = ("name", "parameters", "strict", "type", "defer_loading", "description")


def _filled(value: Any, keys: tuple[str, ...]) -> Any:
    """``value`` with ``keys`` first (missing ones null), then its other keys; non-objects as is."""
    if not isinstance(value, Mapping):
        return value
    result = {key: value.get(key) for key in keys}
    result.update({k: v for k, v in value.items() if k not in result})
    return result


def _tool(tool: Any) -> Any:
    if isinstance(tool, Mapping) and tool.get("type") == "function":
        return _filled(tool, _FUNCTION_TOOL)
    return tool


def normalize_request_value(name: str, value: Any) -> Any:
    """A request field's value the way the response model renders it."""
    if name in _SHAPES:
        return _filled(value, _SHAPES[name])
    if name == "text" and isinstance(value, Mapping):
        return _filled(value, ("format", "verbosity"))
    if name == "tools" and isinstance(value, list):
        return [_tool(tool) for tool in value]
    return value


def response_object(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The response with every key of the full shape, in order; unset ones null."""
    return {key: fields.get(key) for key in _RESPONSE_KEYS}

"""One capture line -> one ``ModelCallRecord`` (evidence.md §4.1-§4.3).

Everything a reader derives from a line: the response id, token counts, cache figures, tool calls
and reasoning text, by the *shape* of the response (Responses ``output``, Chat ``choices``,
Anthropic ``content``), never by the line's ``dialect``. A type violation in a field copied from
the line raises a ``ValidationError`` (``gymflow.evidence.lax``'s, or pydantic's for ``model_ref``): the line
is invalid.
"""

from __future__ import annotations

from typing import Any, Final, NoReturn, get_args

import orjson

from gymflow.evidence import ModelServerRef
from gymflow.evidence.lax import fail, lax_bool, lax_float, lax_int, opt_literal, opt_str

__all__ = ["PAYLOAD_KEYS", "build_record", "parse_arguments", "usage_counts"]

Obj = dict[str, Any]

PAYLOAD_KEYS: Final = ("request", "response", "request_raw", "response_raw")
_POLICY_TYPE: Final = get_args(ModelServerRef.model_fields["type"].annotation)[0]
_SOURCE: Final = frozenset({"upstream", "local"})
_EMPTY: Final[Obj] = {}


def _count(value: Any) -> int | None:
    """A token count is valid only as a JSON integer >= 0 (not a boolean, not a float)."""
    return value if type(value) is int and value >= 0 else None


def _first(*values: Any) -> int | None:
    for value in values:
        count = _count(value)
        if count is not None:
            return count
    return None


def _sub(usage: Obj, key: str) -> Obj:
    value = usage.get(key)
    return value if isinstance(value, dict) else {}


_NO_USAGE: Final = (None, None, None, None, None, None, None)


def usage_counts(usage: Any) -> tuple[Any, ...]:
    """``(tokens_in, tokens_out, tokens_reasoning, tokens_total, cache_hit, cached, cache_creation)``."""
    if type(usage) is not dict:
        return _NO_USAGE
    get = usage.get
    v = get("input_tokens")
    tokens_in = v if type(v) is int and v >= 0 else _count(get("prompt_tokens"))
    v = get("output_tokens")
    tokens_out = v if type(v) is int and v >= 0 else _count(get("completion_tokens"))
    read = _count(get("cache_read_input_tokens"))
    creation = _count(get("cache_creation_input_tokens"))
    if (read is not None or creation is not None) and (
        tokens_in is not None or (read or 0) + (creation or 0) > 0
    ):
        tokens_in = (tokens_in or 0) + (read or 0) + (creation or 0)
    v = get("total_tokens")
    tokens_total = v if type(v) is int and v >= 0 else None
    if tokens_total is None and tokens_in is not None and tokens_out is not None:
        tokens_total = tokens_in + tokens_out
    output_details = get("output_tokens_details")
    v = output_details.get("reasoning_tokens") if type(output_details) is dict else None
    reasoning = v if type(v) is int and v >= 0 else None
    if reasoning is None:
        reasoning = _first(
            _sub(usage, "completion_tokens_details").get("reasoning_tokens"), get("reasoning_output_tokens")
        )
    prompt_details = get("prompt_tokens_details")
    input_details = get("input_tokens_details")
    cached = None
    if type(prompt_details) is dict:
        cached = _first(prompt_details.get("cached_tokens"), prompt_details.get("cached_input_tokens"))
    if cached is None and type(input_details) is dict:
        cached = _first(input_details.get("cached_tokens"), input_details.get("cached_input_tokens"))
    if cached is None:
        cached = _first(get("cache_read_input_tokens"), get("cached_input_tokens"))
    cache_hit = None if cached is None else cached > 0
    return tokens_in, tokens_out, reasoning, tokens_total, cache_hit, cached, creation


def parse_arguments(value: Any) -> Any:
    """Tool-call arguments: an object stays, a string is JSON-decoded (else ``{"_raw": s}``), else ``{}``."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return {"_raw": value}
    return {}


def _tools_and_reasoning(response: Obj) -> tuple[list[Obj], str | None]:
    tools: list[Obj] = []
    texts: list[str] = []
    output = response.get("output")
    if isinstance(output, list):
        for item in output:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind == "function_call":
                tools.append(
                    {
                        "call_id": item.get("call_id") or item.get("id"),
                        "name": item.get("name"),
                        "arguments": parse_arguments(item.get("arguments")),
                    }
                )
            elif kind == "reasoning":
                summary = item.get("summary")
                if isinstance(summary, list):
                    for part in summary:
                        text = part.get("text") if isinstance(part, dict) else None
                        if isinstance(text, str) and text:
                            texts.append(text)
        return tools, ("\n".join(texts) if texts else None)
    choices = response.get("choices")
    content = response.get("content")
    if isinstance(choices, list):
        for choice in choices:
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict):
                continue
            for call in message.get("tool_calls") or ():
                if not isinstance(call, dict):
                    continue
                function = call.get("function")
                function = function if isinstance(function, dict) else {}
                tools.append(
                    {
                        "call_id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": parse_arguments(function.get("arguments")),
                    }
                )
            text = message.get("reasoning_content") or message.get("reasoning")
            if isinstance(text, str) and text:
                texts.append(text)
    elif isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "tool_use":
                tools.append(
                    {
                        "call_id": block.get("id"),
                        "name": block.get("name"),
                        "arguments": parse_arguments(block.get("input") or {}),
                    }
                )
            elif kind in ("thinking", "redacted_thinking"):
                text = block.get("thinking")
                if isinstance(text, str) and text:
                    texts.append(text)
    return tools, ("\n".join(texts) if texts else None)


def _finish_reason(response: Obj) -> str | None:
    stop = response.get("stop_reason")
    if isinstance(stop, str):
        return stop
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        reason = choices[0].get("finish_reason")
        if isinstance(reason, str):
            return reason
    details = response.get("incomplete_details")
    if isinstance(details, dict) and isinstance(details.get("reason"), str):
        reason = details["reason"]
        return str(reason)
    return None


def _bad(name: str, value: Any) -> NoReturn:
    fail(name, f"wrong type: {value!r}")


def _str_field(line: Obj, name: str) -> Any:
    """``line[name]``: a string or absent; anything else is refused."""
    value = line.get(name)
    if value is not None and type(value) is not str:
        _bad(name, value)
    return value


def _float_field(line: Obj, name: str) -> Any:
    """``line[name]`` as it is when a float or absent, else through pydantic's lax float rule."""
    value = line.get(name)
    return value if value is None or type(value) is float else lax_float(value, name)


def build_record(line: Obj, position: int, *, payloads: bool = True) -> Obj:
    """The ``ModelCallRecord`` of a parsed capture line at non-blank position ``position``.

    With ``payloads=False`` the four payload keys are left out (the ``multimodal_history_redacted`` rule).
    Values of the exact JSON type are taken as they are (a float where a float is declared); anything
    else goes through pydantic's lax rules.
    """
    get = line.get
    raw_response = get("response")
    raw_request = get("request")
    response: Obj = raw_response if type(raw_response) is dict else _EMPTY
    request: Obj = raw_request if type(raw_request) is dict else _EMPTY
    tokens_in, tokens_out, reasoning_tokens, tokens_total, cache_hit, cached, creation = usage_counts(
        response.get("usage")
    )
    tools, reasoning_text = _tools_and_reasoning(response) if response else ([], None)
    call_id = _str_field(line, "model_call_id")
    ref = get("model_ref")
    if ref is not None:
        if not (
            type(ref) is dict
            and len(ref) == 2
            and ref.get("type") == _POLICY_TYPE
            and type(ref.get("name")) is str
        ):
            ref = ModelServerRef.model_validate(ref).model_dump()
    dialect = _str_field(line, "dialect")
    status_code = get("status_code")
    if status_code is not None and type(status_code) is not int:
        status_code = lax_int(status_code, "status_code")
    started = _float_field(line, "started_at")
    completed = _float_field(line, "completed_at")
    latency = _float_field(line, "latency_ms")
    ttft = _float_field(line, "latency_ttft_ms")
    category = _str_field(line, "error_category")
    response_id = response.get("id")
    session = get("client_session_id")
    model = response.get("model") or request.get("model")
    status = response.get("status")
    record: Obj = {
        "model_call_id": call_id,
        "response_id": response_id if type(response_id) is str else None,
        "client_session_id": session if type(session) is str else None,
        "call_index": position,
        "model_ref": ref,
        "model": model if type(model) is str else None,
        "dialect": dialect,
        "status_code": status_code,
        "response_status": status if type(status) is str else None,
        "finish_reason": _finish_reason(response) if response else None,
        "upstream_attempted": None,
        "response_source": None,
        "upstream_status_code": None,
        "local_response_reason": None,
        "started_at": started,
        "completed_at": completed,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "tokens_reasoning": reasoning_tokens,
        "tokens_total": tokens_total,
    }
    if (
        "upstream_attempted" in line
        or "response_source" in line
        or "upstream_status_code" in line
        or ("local_response_reason" in line)
    ):
        record["upstream_attempted"] = lax_bool(get("upstream_attempted"), "upstream_attempted")
        record["response_source"] = opt_literal(get("response_source"), _SOURCE, "response_source")
        record["upstream_status_code"] = lax_int(get("upstream_status_code"), "upstream_status_code")
        record["local_response_reason"] = opt_str(get("local_response_reason"), "local_response_reason")
    if payloads:
        request_raw = get("request_raw")
        response_raw = get("response_raw")
        record["request"] = raw_request if type(raw_request) is dict else None
        record["response"] = raw_response if type(raw_response) is dict else None
        record["request_raw"] = request_raw if type(request_raw) is str else None
        record["response_raw"] = response_raw if type(response_raw) is str else None
    record["tool_calls"] = tools
    record["reasoning_content"] = reasoning_text
    record["cache_hit"] = cache_hit
    record["cached_tokens"] = cached
    record["cache_creation_tokens"] = creation
    record["error_category"] = category
    record["latency_total_ms"] = latency
    record["latency_ttft_ms"] = ttft
    return record

"""Seeded generator of NeMo Gym 0.7.0-style rollout records (``rollouts.jsonl``).

Used for the example run directory (``examples/run``), the benchmarks and the tests. Everything is
drawn from one ``random.Random(seed)``: the same arguments always give the same bytes.

A record is a multi-turn agent rollout: ``responses_create_params`` (the input), ``response`` (a
Responses-API object whose ``usage`` is the transcript usage), ``reward``, two verifier fields and an
``ng_trajectory`` that validates under the health spec (§2.4) and uses only the keys it allows. For
healthy rows the transcript usage equals the sum of the turn-bound call tokens, so every health
check is evaluated and none fires. Other kinds of rows break that on purpose:

* ``unhealthy``: a hollow turn, a 500 that ends the rollout, a zero-completion call, a usage that
  disagrees with the captured calls, a length-limited empty response;
* ``unobserved``: no trajectory (absent or ``null``), a ``model_calls_unavailable`` or a
  ``turns_unavailable`` gap;
* ``unreadable``: ``{bad``, ``[]`` or a record cut short;
* ``duplicate``: an exact copy of a recent record, or a re-run with the same identity.

Several rollouts share a task (``_ng_rollout_index`` 0..repeats-1); as in a real collection, rows
arrive out of order (identities are shuffled within blocks of ``IDENTITY_WINDOW``).

Payload text is sliced at random offsets from one large seeded word string, and every record is
sized to a per-row target (uniform within ±50 % of ``avg_bytes``) by filling its text slots with the
byte budget left over by the record's skeleton (measured once per turn count). About 40-50 MB/s:
650 MB take well under a minute. Below 8 KB a row (the example) records are compact: short ids,
one tool, no reasoning items.

Run ``python -m bench.corpus OUT_PATH --rows N --seed S [--avg-bytes B] [--shards K]`` or
``python -m bench.corpus OUT_PATH --example``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

KINDS: tuple[str, ...] = ("healthy", "unhealthy", "unobserved", "unreadable", "duplicate")
"""Row kinds accepted in ``mix``."""

VARIANTS: dict[str, tuple[str, ...]] = {
    "healthy": ("healthy",),
    "unhealthy": ("hollow_turn", "failed_call", "zero_completion", "token_mismatch", "length_empty"),
    "unobserved": ("no_trajectory", "null_trajectory", "calls_unavailable", "turns_unavailable"),
    "unreadable": ("bad_json", "not_object", "truncated"),
    "duplicate": ("copy", "rerun"),
}
"""The concrete shapes each kind is drawn from (uniformly)."""

DEFAULT_MIX: dict[str, float] = {
    "healthy": 0.90,
    "unhealthy": 0.06,
    "unobserved": 0.025,
    "unreadable": 0.005,
    "duplicate": 0.01,
}

IDENTITY_WINDOW = 64
"""Generated corpora emit identities shuffled within blocks of this many rollouts (the example: in order)."""

EXAMPLE_AVG_BYTES = 2_000
EXAMPLE_PLAN: tuple[tuple[str, str], ...] = (
    # task 0: four healthy repeats
    ("healthy", "healthy"),
    ("healthy", "healthy"),
    ("healthy", "healthy"),
    ("healthy", "healthy"),
    # task 1
    ("healthy", "healthy"),
    ("unhealthy", "hollow_turn"),
    ("healthy", "healthy"),
    ("healthy", "healthy"),
    # task 2
    ("healthy", "healthy"),
    ("unhealthy", "failed_call"),
    ("healthy", "healthy"),
    ("unreadable", "bad_json"),
    ("duplicate", "copy"),
    # task 3
    ("unhealthy", "zero_completion"),
    ("healthy", "healthy"),
    ("unhealthy", "token_mismatch"),
    ("healthy", "healthy"),
    # task 4
    ("unobserved", "no_trajectory"),
    ("healthy", "healthy"),
    ("duplicate", "rerun"),
    ("unobserved", "calls_unavailable"),
    ("healthy", "healthy"),
    # task 5: every repeat unhealthy (task_consistently_unhealthy fires)
    ("unhealthy", "length_empty"),
    ("unhealthy", "hollow_turn"),
    ("unhealthy", "failed_call"),
    ("unhealthy", "token_mismatch"),
    # task 6
    ("healthy", "healthy"),
    ("unobserved", "null_trajectory"),
    ("unobserved", "turns_unavailable"),
    ("healthy", "healthy"),
    ("duplicate", "copy"),
    # task 7
    ("healthy", "healthy"),
    ("healthy", "healthy"),
    ("unreadable", "not_object"),
    ("healthy", "healthy"),
    # task 8
    ("healthy", "healthy"),
    ("unreadable", "truncated"),
    ("healthy", "healthy"),
    ("healthy", "healthy"),
    ("duplicate", "rerun"),
)
"""The fixed row plan of ``--example``: 40 rows over 9 tasks of 4 repeats, every variant present."""

MODEL = "policy-model"
MODEL_REF = {"type": "responses_api_models", "name": "policy"}
MAX_OUTPUT_TOKENS = 4096
BASE_TIME = 1_760_000_000.0
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "search",
        "description": "Search the document store.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        "strict": True,
    },
    {
        "type": "function",
        "name": "python",
        "description": "Run Python code.",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
        "strict": True,
    },
]
TOOLS_COMPACT: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "search",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    }
]
_TOOL_ARG = {"search": "query", "python": "code"}
_COMPACT_BELOW = 8_000
"""Below this average size records use short ids, one tool and requests without a tool list."""

_WORDS_CHARS = 1 << 19
"""Length of the seeded word string payload text is sliced from."""
_MIN_SLOT_CHARS = 24
_SYLLABLES = (
    "ka lo mi re tu sa ne vo pi da lu ge ro fa ti mo be su na ri co la pe di ma so ve nu to ga".split()
)
_SPECIAL_WORDS = ("naïve", "café", "Zürich", "東京", "μ-law", '"quoted"', "x\\y", "a/b", "50%", "<tag>")

_CUT_RANGE = 0.5
"""Per-row target sizes are drawn uniformly in avg_bytes × [1 − this, 1 + this]."""


@dataclass(frozen=True, slots=True)
class Row:
    """One generated JSONL line and what it is."""

    kind: str
    variant: str
    task: int | None
    """Identity of the record (``None`` for unreadable lines)."""
    rollout: int | None
    record: dict[str, Any] | None
    """The parsed record (``None`` for unreadable lines); do not mutate it."""
    line: bytes
    """Serialised record ending in ``\\n``."""


def _word_string(rng: random.Random) -> str:
    vocab = ["".join(rng.choices(_SYLLABLES, k=rng.choice((1, 2, 2, 3, 3, 4)))) for _ in range(3000)]
    vocab.extend(_SPECIAL_WORDS)
    cumulative = list(itertools.accumulate([1.0] * 3000 + [0.02] * len(_SPECIAL_WORDS)))
    words = rng.choices(vocab, cum_weights=cumulative, k=_WORDS_CHARS // 6)
    endings = (". ", ". ", ". ", "? ", ", ", ".\n\n")
    parts: list[str] = []
    start = 0
    while start < len(words):
        stop = start + rng.randint(6, 18)
        parts.append(" ".join(words[start:stop]).capitalize() + rng.choice(endings))
        start = stop
    return "".join(parts)


class CorpusGenerator:
    """Deterministic source of rows; one instance per corpus (it owns the RNG)."""

    def __init__(self, seed: int = 0, avg_bytes: int = 16_000, repeats: int = 4, window: int = 1) -> None:
        """``window`` > 1 hands out identities in shuffled blocks of that many rollouts."""
        if avg_bytes < 1:
            raise ValueError("avg_bytes must be positive")
        if repeats < 1 or window < 1:
            raise ValueError("repeats and window must be at least 1")
        self._rng = random.Random(seed)
        self.avg_bytes = avg_bytes
        self.repeats = repeats
        self.window = window
        self._pending: list[int] = []
        self._words = _word_string(self._rng)
        # JSON bytes per character of the word string (escapes and UTF-8 included).
        self._byte_ratio = (len(orjson.dumps(self._words)) - 2) / len(self._words)
        self._max_turns = max(2, min(8, round(avg_bytes / 3_000)))
        self._compact = avg_bytes < _COMPACT_BELOW
        self._id_bits = 48 if self._compact else 96
        self._slot = 0
        self._recent: deque[Row] = deque(maxlen=8)
        self._shapes: dict[int, tuple[list[int], int]] = {}

    @property
    def rng(self) -> random.Random:
        """The generator's random source (row kinds are drawn from it too)."""
        return self._rng

    # -- text -----------------------------------------------------------------------------------

    def _text(self, chars: int) -> str:
        """About ``chars`` characters of seeded text, whole words where possible (never blank)."""
        words = self._words
        chars = max(1, chars)
        if chars > len(words) - 64:
            words = words * (chars // len(words) + 2)
        start = self._rng.randrange(len(words) - chars - 32)
        space = words.find(" ", start, start + 31)
        if space >= 0:
            start = space + 1
        text = words[start : start + chars]
        end = text.rfind(" ")
        return text[:end] if end > chars // 2 else text

    def _hex(self, bits: int = 0) -> str:
        bits = bits or self._id_bits
        return f"{self._rng.getrandbits(bits):0{bits // 4}x}"

    # -- rows -----------------------------------------------------------------------------------

    def _next_identity(self) -> tuple[int, int]:
        # Collection finishes rollouts out of order: identities come from a shuffled window.
        if not self._pending:
            self._pending = list(range(self._slot, self._slot + self.window))
            self._rng.shuffle(self._pending)
            self._slot += self.window
        slot = self._pending.pop()
        return slot // self.repeats, slot % self.repeats

    def row(self, kind: str, variant: str) -> Row:
        """Generate the next row of the given kind and variant."""
        if kind == "duplicate":
            if not self._recent:
                return self.row("healthy", "healthy")
            if variant == "copy":
                source = self._recent[-1]
                return Row(kind, variant, source.task, source.rollout, source.record, source.line)
            source = self._rng.choice(self._recent)
            assert source.task is not None and source.rollout is not None
            record = self.rollout_record(source.task, source.rollout, "healthy")
            return Row(kind, variant, source.task, source.rollout, record, _line(record))
        task, rollout = self._next_identity()
        if kind == "unreadable":
            return Row(kind, variant, None, None, None, self._unreadable_line(task, rollout, variant))
        record = self.rollout_record(task, rollout, variant)
        row = Row(kind, variant, task, rollout, record, _line(record))
        self._recent.append(row)
        return row

    def _unreadable_line(self, task: int, rollout: int, variant: str) -> bytes:
        if variant == "bad_json":
            return b"{bad\n"
        if variant == "not_object":
            return b"[]\n"
        if variant != "truncated":
            raise ValueError(f"unknown unreadable variant: {variant}")
        whole = _line(self.rollout_record(task, rollout, "healthy"))
        cut = self._rng.randint(len(whole) // 3, len(whole) - 3)
        return whole[:cut] + b"\n"

    def rollout_record(self, task: int, rollout: int, variant: str) -> dict[str, Any]:
        """A record for identity ``(task, rollout)``, healthy then altered by ``variant``."""
        rng = self._rng
        target = int(self.avg_bytes * rng.uniform(1 - _CUT_RANGE, 1 + _CUT_RANGE))
        if self._compact:
            n_turns = rng.choice((1, 1, 1, 1, 2))
        else:
            n_turns = rng.randint(max(1, self._max_turns // 2), self._max_turns)
        choices = ("search",) if self._compact else ("search", "search", "python")
        tools = [rng.choice(choices) for _ in range(n_turns - 1)]
        draws = _Draws(
            compact=self._compact,
            task=task,
            rollout=rollout,
            rollout_id=f"{task}-{rollout}",
            invocation_id=f"inv-{self._hex(self._id_bits * 2 // 3)}",
            tools=tools,
            tool_args=[self._text(rng.randint(16, 64)) for _ in tools],
            call_ids=[f"mc-{self._hex()}" for _ in range(n_turns)],
            response_ids=[f"resp_{self._hex()}" for _ in range(n_turns)],
            item_ids=[self._hex() for _ in range(n_turns)],
            tool_call_ids=[f"call_{self._hex(self._id_bits * 2 // 3)}" for _ in tools],
            call_seconds=[rng.uniform(0.4, 9.0) for _ in range(n_turns)],
            tool_seconds=[rng.uniform(0.05, 3.0) for _ in tools],
            start=BASE_TIME + task * 97.0 + rollout * 11.0 + rng.random(),
            expected=self._text(rng.randint(4, 24)),
            reward=1.0 if rng.random() < 0.6 else 0.0,
        )
        # Text slots: system, user, then per turn a reasoning summary and a tool output or answer.
        weights = [rng.uniform(0.5, 1.5), rng.uniform(1.0, 3.0)]
        for turn in range(n_turns):
            weights.append(rng.uniform(0.3, 1.2))
            weights.append(rng.uniform(2.0, 5.0) if turn < n_turns - 1 else rng.uniform(1.0, 2.0))
        # How often each slot is embedded and the size without text depend (almost) only on the
        # number of turns: measure them on the first record of each length, reuse them after.
        shape = self._shapes.get(n_turns)
        if shape is None:
            uses = [0] * len(weights)
            skeleton = _assemble(draws, [""] * len(weights), uses)
            shape = self._shapes[n_turns] = (uses, len(orjson.dumps(skeleton)) + 1)
        uses, overhead = shape
        budget = (target - overhead) / self._byte_ratio
        scale = max(budget, 0.0) / sum(w * u for w, u in zip(weights, uses, strict=True))
        texts = [self._text(max(_MIN_SLOT_CHARS, int(w * scale))) for w in weights]
        record = _assemble(draws, texts, None)
        _apply_variant(record, variant, rng)
        return record


def _line(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)


@dataclass(slots=True)
class _Draws:
    """The random choices of one record, drawn before it is assembled."""

    compact: bool
    task: int
    rollout: int
    rollout_id: str
    invocation_id: str
    tools: list[str]
    tool_args: list[str]
    call_ids: list[str]
    response_ids: list[str]
    item_ids: list[str]
    tool_call_ids: list[str]
    call_seconds: list[float]
    tool_seconds: list[float]
    start: float
    expected: str
    reward: float


def _tokens(chars: int) -> int:
    return max(1, (chars + 3) // 4)


def _response_object(
    d: _Draws, response_id: str, created: float, output: list[dict[str, Any]], usage: dict[str, int]
) -> dict[str, Any]:
    if d.compact:
        return {"id": response_id, "model": MODEL, "status": "completed", "output": output, "usage": usage}
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(created),
        "model": MODEL,
        "status": "completed",
        "output": output,
        "usage": usage,
    }


def _drop_final_turn_output(record: dict[str, Any]) -> None:
    """Remove the final message (and its reasoning item) from the transcript output."""
    output = record["response"]["output"]
    if output and output[-1]["type"] == "message":
        output.pop()
    if output and output[-1]["type"] == "reasoning":
        output.pop()


def _assemble(d: _Draws, texts: list[str], uses: list[int] | None) -> dict[str, Any]:
    """Build the record from its draws and slot texts; count slot embeddings into ``uses``."""

    def text(slot: int) -> str:
        if uses is not None:
            uses[slot] += 1
        return texts[slot]

    def input_messages() -> list[dict[str, Any]]:
        return [
            {"type": "message", "role": "system", "content": text(0)},
            {"type": "message", "role": "user", "content": text(1)},
        ]

    n_turns = len(d.call_ids)
    final = n_turns - 1
    history: list[Callable[[], dict[str, Any]]] = []
    history_chars = len(texts[0]) + len(texts[1])
    transcript_output: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    tool_calls: list[dict[str, Any]] = []
    refs: list[dict[str, Any]] = []
    clock = d.start
    prompt_total = completion_total = 0

    for turn in range(n_turns):
        reasoning_slot, content_slot = 2 + 2 * turn, 3 + 2 * turn
        item_id = d.item_ids[turn]

        def reasoning(item_id: str = item_id, slot: int = reasoning_slot) -> list[dict[str, Any]]:
            if d.compact:
                return []
            summary = [{"type": "summary_text", "text": text(slot)}]
            return [{"type": "reasoning", "id": f"rs_{item_id}", "summary": summary}]

        request: dict[str, Any] = {"model": MODEL, "input": input_messages() + [item() for item in history]}
        if not d.compact:
            request.update(tools=TOOLS, max_output_tokens=MAX_OUTPUT_TOKENS, temperature=1.0)
        prompt = _tokens(history_chars) + 8 * len(request["input"]) + 120
        completion_chars = 0 if d.compact else len(texts[reasoning_slot])
        if turn < final:
            tool = d.tools[turn]
            arguments = orjson.dumps({_TOOL_ARG[tool]: d.tool_args[turn]}).decode()
            call_id = d.tool_call_ids[turn]

            def function_call(
                item_id: str = item_id, call_id: str = call_id, tool: str = tool, arguments: str = arguments
            ) -> dict[str, Any]:
                return {
                    "type": "function_call",
                    "id": f"fc_{item_id}",
                    "call_id": call_id,
                    "name": tool,
                    "arguments": arguments,
                    "status": "completed",
                }

            def function_output(call_id: str = call_id, slot: int = content_slot) -> dict[str, Any]:
                return {"type": "function_call_output", "call_id": call_id, "output": text(slot)}

            output = [*reasoning(), function_call()]
            answer: Any = [function_call()]
            finish_reason = "tool_calls"
            completion_chars += len(arguments)
        else:

            def message(item_id: str = item_id, slot: int = content_slot) -> dict[str, Any]:
                return {
                    "type": "message",
                    "id": f"msg_{item_id}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text(slot), "annotations": []}],
                }

            output = [*reasoning(), message()]
            answer = text(content_slot)
            finish_reason = "stop"
            completion_chars += len(texts[content_slot])
        completion = _tokens(completion_chars) + 4
        prompt_total += prompt
        completion_total += completion
        started = round(clock, 3)
        completed = round(clock + d.call_seconds[turn], 3)
        clock = completed
        usage = {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion}
        calls.append(
            {
                "model_call_id": d.call_ids[turn],
                "started_at": started,
                "completed_at": completed,
                "duration_ms": round((completed - started) * 1000.0, 3),
                "request": request,
                "response": _response_object(d, d.response_ids[turn], started, output, usage),
                "response_metadata": {
                    "response_id": d.response_ids[turn],
                    "model": MODEL,
                    "model_ref": dict(MODEL_REF),
                    "status_code": 200,
                    "response_status": "completed",
                    "finish_reason": finish_reason,
                },
                "token_stats": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )
        ref = {"model_call_id": d.call_ids[turn]}
        refs.append(dict(ref))
        turns.append(
            {
                "invocation_id": d.invocation_id,
                "task_id": str(d.task),
                "rollout_id": d.rollout_id,
                "turn_no": turn + 1,
                "timestamp": completed,
                "question": text(1) if turn == 0 else None,
                "answer": answer,
                "reasoning_content": None if d.compact else text(reasoning_slot),
                "step_count": turn,
                "model_calls": [ref],
            }
        )
        transcript_output.extend(reasoning())
        if turn < final:
            transcript_output.append(function_call())
            transcript_output.append(function_output())
            history.append(function_call)
            history.append(function_output)
            history_chars += len(arguments) + len(texts[content_slot])
            tool_started = completed
            tool_completed = round(completed + d.tool_seconds[turn], 3)
            clock = tool_completed
            tool_calls.append(
                {
                    "invocation_id": d.invocation_id,
                    "tool_call_id": d.tool_call_ids[turn],
                    "tool_name": d.tools[turn],
                    "started_at": tool_started,
                    "completed_at": tool_completed,
                    "duration_ms": round((tool_completed - tool_started) * 1000.0, 3),
                    "timing_source": "harness",
                    "status": "completed",
                    "output": text(content_slot),
                }
            )
        else:
            transcript_output.append(message())

    extracted = d.expected if d.reward == 1.0 else d.expected[::-1]
    return {
        "_ng_task_index": d.task,
        "_ng_rollout_index": d.rollout,
        "responses_create_params": {
            "input": input_messages(),
            "tools": TOOLS_COMPACT if d.compact else TOOLS,
            "max_output_tokens": MAX_OUTPUT_TOKENS,
            "temperature": 1.0,
        },
        "response": _response_object(
            d,
            d.response_ids[final],
            d.start,
            transcript_output,
            {
                "input_tokens": prompt_total,
                "output_tokens": completion_total,
                "total_tokens": prompt_total + completion_total,
            },
        ),
        "reward": d.reward,
        "expected_answer": d.expected,
        "extracted_answer": extracted,
        "ng_trajectory": {
            "schema_version": "1.0",
            "task_id": str(d.task),
            "rollout_id": d.rollout_id,
            "invocations": [
                {
                    "invocation_id": d.invocation_id,
                    "status": "completed",
                    "duration_ms": round((clock - d.start) * 1000.0, 3),
                    "model_calls": refs,
                }
            ],
            "turns": turns,
            "model_calls": calls,
            "tool_calls": tool_calls,
            "gaps": [],
        },
    }


def _resum_usage(record: dict[str, Any]) -> None:
    """Make the transcript usage equal the sum of the captured calls' token counts again."""
    prompt = completion = 0
    for call in record["ng_trajectory"]["model_calls"]:
        prompt += call["token_stats"]["prompt_tokens"]
        completion += call["token_stats"]["completion_tokens"]
    record["response"]["usage"] = {
        "input_tokens": prompt,
        "output_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _apply_variant(record: dict[str, Any], variant: str, rng: random.Random) -> None:
    if variant == "healthy":
        return
    trajectory = record["ng_trajectory"]
    turns = trajectory["turns"]
    calls = trajectory["model_calls"]
    last_call, last_turn = calls[-1], turns[-1]
    if variant == "hollow_turn":
        turn = rng.choice(turns)
        turn["answer"] = rng.choice(("", None, "   "))
        turn["reasoning_content"] = None
    elif variant == "failed_call":
        last_call["response"] = {"error": {"type": "server_error", "message": "Internal Server Error"}}
        last_call["response_metadata"].update(
            status_code=500, response_status="failed", finish_reason=None, error_category="server_error"
        )
        prompt = last_call["token_stats"]["prompt_tokens"]
        last_call["token_stats"] = {"prompt_tokens": prompt, "completion_tokens": 0, "total_tokens": prompt}
        last_turn["answer"] = None
        last_turn["reasoning_content"] = None
        invocation = trajectory["invocations"][0]
        invocation["status"] = "failed"
        invocation["error_type"] = "ModelServerError"
        record["response"]["status"] = "failed"
        _drop_final_turn_output(record)
        record["reward"] = 0.0
        _resum_usage(record)
    elif variant == "zero_completion":
        stats = rng.choice(calls)["token_stats"]
        stats["completion_tokens"] = 0
        stats["total_tokens"] = stats["prompt_tokens"]
        _resum_usage(record)
    elif variant == "token_mismatch":
        usage = record["response"]["usage"]
        usage["input_tokens"] += rng.randint(1, 900)
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    elif variant == "length_empty":
        last_call["response"] = {
            "id": last_call["response_metadata"]["response_id"],
            "object": "response",
            "model": MODEL,
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [],
        }
        last_call["response_metadata"].update(response_status="incomplete", finish_reason="length")
        stats = last_call["token_stats"]
        stats["completion_tokens"] = MAX_OUTPUT_TOKENS
        stats["total_tokens"] = stats["prompt_tokens"] + MAX_OUTPUT_TOKENS
        last_turn["answer"] = None
        last_turn["reasoning_content"] = None
        record["response"]["status"] = "incomplete"
        _drop_final_turn_output(record)
        record["reward"] = 0.0
        _resum_usage(record)
    elif variant == "no_trajectory":
        del record["ng_trajectory"]
    elif variant == "null_trajectory":
        record["ng_trajectory"] = None
    elif variant == "calls_unavailable":
        trajectory["model_calls"] = []
        for owner in (*turns, *trajectory["invocations"]):
            owner["model_calls"] = []
        trajectory["gaps"] = [
            {
                "code": "model_calls_unavailable",
                "invocation_id": trajectory["invocations"][0]["invocation_id"],
                "detail": "model-call capture was disabled for this run",
            }
        ]
    elif variant == "turns_unavailable":
        trajectory["turns"] = []
        trajectory["gaps"] = [
            {"code": "turns_unavailable", "invocation_id": None, "detail": "agent does not report turns"}
        ]
    else:
        raise ValueError(f"unknown variant: {variant}")


def _normalised_mix(mix: Mapping[str, float] | None) -> tuple[list[str], list[float]]:
    chosen = dict(DEFAULT_MIX if mix is None else mix)
    unknown = sorted(set(chosen) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown row kind(s): {', '.join(unknown)}; expected some of {', '.join(KINDS)}")
    if any(weight < 0 for weight in chosen.values()) or sum(chosen.values()) <= 0:
        raise ValueError("mix weights must be non-negative and not all zero")
    kinds = [kind for kind in KINDS if chosen.get(kind, 0) > 0]
    total = sum(chosen[kind] for kind in kinds)
    cumulative: list[float] = []
    running = 0.0
    for kind in kinds:
        running += chosen[kind] / total
        cumulative.append(running)
    cumulative[-1] = 1.0
    return kinds, cumulative


def iter_rows(
    n: int,
    seed: int = 0,
    avg_bytes: int = 16_000,
    mix: Mapping[str, float] | None = None,
    repeats: int = 4,
    plan: Sequence[tuple[str, str]] | None = None,
) -> Iterator[Row]:
    """Yield ``n`` rows (or one per ``plan`` entry, ``n`` ignored) with their kinds and records."""
    kinds, cumulative = _normalised_mix(mix)
    window = 1 if plan is not None else IDENTITY_WINDOW
    generator = CorpusGenerator(seed=seed, avg_bytes=avg_bytes, repeats=repeats, window=window)
    if plan is not None:
        for kind, variant in plan:
            if variant not in VARIANTS.get(kind, ()):
                raise ValueError(f"unknown variant {variant!r} of kind {kind!r}")
            yield generator.row(kind, variant)
        return
    rng = generator.rng
    for _ in range(n):
        draw = rng.random()
        kind = kinds[-1]
        for candidate, bound in zip(kinds, cumulative, strict=True):
            if draw < bound:
                kind = candidate
                break
        yield generator.row(kind, rng.choice(VARIANTS[kind]))


def generate_records(
    n: int,
    seed: int = 0,
    avg_bytes: int = 16_000,
    mix: Mapping[str, float] | None = None,
    repeats: int = 4,
) -> Iterator[bytes]:
    """Yield ``n`` JSONL lines (bytes ending in ``\\n``), deterministic in all arguments."""
    for row in iter_rows(n, seed=seed, avg_bytes=avg_bytes, mix=mix, repeats=repeats):
        yield row.line


def example_rows(seed: int = 0) -> Iterator[Row]:
    """The rows of the committed example run directory (``EXAMPLE_PLAN``, about 2 KB each)."""
    return iter_rows(len(EXAMPLE_PLAN), seed=seed, avg_bytes=EXAMPLE_AVG_BYTES, plan=EXAMPLE_PLAN)


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, stop)`` row ranges of ``shards`` near-equal shards."""
    return [(i * n // shards, (i + 1) * n // shards) for i in range(shards)]


def _write_lines(paths: list[Path], bounds: list[tuple[int, int]], lines: Iterator[bytes]) -> None:
    for path, (start, stop) in zip(paths, bounds, strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(temporary, "wb", buffering=1 << 20) as handle:
                for _ in range(stop - start):
                    handle.write(next(lines))
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)


def write_corpus(
    path: str,
    n: int,
    seed: int = 0,
    avg_bytes: int = 16_000,
    mix: Mapping[str, float] | None = None,
    repeats: int = 4,
    shards: int = 1,
) -> list[str]:
    """Stream ``n`` rows to disk and return the files written.

    With one shard ``path`` is the output file (``path/rollouts.jsonl`` if ``path`` is a directory).
    With ``shards`` > 1 ``path`` is a directory receiving ``rollouts_shard_{i}.jsonl``, each holding a
    contiguous range of the rows (their concatenation equals the one-shard file). Each file is written
    to a temporary name and renamed, so a file that exists is complete.
    """
    if shards < 1:
        raise ValueError("shards must be at least 1")
    if n < 0:
        raise ValueError("n must be non-negative")
    target = Path(path)
    if shards == 1:
        paths = [target / "rollouts.jsonl" if target.is_dir() else target]
    else:
        paths = [target / f"rollouts_shard_{i}.jsonl" for i in range(shards)]
    lines = generate_records(n, seed=seed, avg_bytes=avg_bytes, mix=mix, repeats=repeats)
    _write_lines(paths, shard_bounds(n, shards), lines)
    return [str(p) for p in paths]


def write_example(path: str, seed: int = 0) -> list[str]:
    """Write the example run's ``rollouts.jsonl`` (``EXAMPLE_PLAN``) to ``path``."""
    target = Path(path)
    if target.is_dir():
        target = target / "rollouts.jsonl"
    _write_lines([target], [(0, len(EXAMPLE_PLAN))], (row.line for row in example_rows(seed)))
    return [str(target)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.corpus", description=__doc__.splitlines()[0])
    parser.add_argument("out_path", metavar="OUT_PATH", help="output file (a directory with --shards > 1)")
    parser.add_argument("--rows", type=int, help="number of rows (required unless --example)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--avg-bytes", type=int, default=16_000, help="average line size (default 16000)")
    parser.add_argument("--repeats", type=int, default=4, help="rollouts per task (default 4)")
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument(
        "--example", action="store_true", help="write the fixed 40-row example plan (about 2 KB a row)"
    )
    args = parser.parse_args(argv)
    began = time.perf_counter()
    if args.example:
        if args.rows is not None or args.shards != 1:
            parser.error("--example takes neither --rows nor --shards")
        paths = write_example(args.out_path, seed=args.seed)
    else:
        if args.rows is None:
            parser.error("--rows is required unless --example is given")
        paths = write_corpus(
            args.out_path,
            args.rows,
            seed=args.seed,
            avg_bytes=args.avg_bytes,
            repeats=args.repeats,
            shards=args.shards,
        )
    elapsed = time.perf_counter() - began
    size = sum(os.path.getsize(p) for p in paths)
    print(
        f"wrote {size / 1e6:.1f} MB to {len(paths)} file(s) in {elapsed:.2f} s "
        f"({size / 1e6 / max(elapsed, 1e-9):.0f} MB/s): {', '.join(paths)}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

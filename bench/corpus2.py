"""A second seeded generator of NeMo Gym 0.7.0-style rollouts, with other shapes than ``bench.corpus``.

The benchmarks report both corpora so no figure is tuned on one layout alone. Where
``bench.corpus`` makes rows of one size band (uniform within ±50 % of the average), two to eight
turns, one tool call per turn, ASCII-heavy text, orjson bytes only and contiguous shards, this one
makes:

* **sizes** from three classes: half short (one turn, no tools, ~35 % of the average), medium
  (two to four turns) and an eighth long (six to fourteen turns, up to four parallel tool calls a
  turn, ~3.8x the average); below about 8 KB the records' structure alone exceeds the targets;
* **many tool calls**: tool turns carry one to four ``function_call`` items, each with its
  ``function_call_output`` and its ``tool_calls`` record (some failed, some with structured
  outputs instead of strings);
* **reasoning items**: one to three per model call, each with one to four summary parts and an
  ``encrypted_content`` blob;
* **text** from a multi-script vocabulary (accented Latin, Cyrillic, Greek, CJK, Arabic, Devanagari,
  emoji with ZWJ sequences, U+2028, tabs, quotes, backslashes), plus code with newlines;
* **numbers**: extra top-level metrics up to 2**63 - 1 and ``18446744073709551615``, floats from
  ``5e-324`` to ``1.7976931348623157e308``, negative integers; ``big_int_share`` of the rows (1 %)
  also get an integer beyond 64 bits, which orjson cannot write (those lines are the json
  module's), aggregate reads exactly and the health check reads as a float;
* **encodings**: most lines are orjson bytes; some are ``json.dumps`` with ``\\uXXXX`` escapes,
  some with ``", "``/``": "`` separators, some end in CRLF, and blank lines fall between rows;
* **bindings**: a share of the turns reference their calls by ``model_ref`` + ``response_id``
  instead of ``model_call_id``; some turns make two model calls;
* **identities**: tasks have 1, 2, 4, 8 or 16 rollouts, and rollouts finish out of order within
  windows of 1,000; shards are round-robin (row ``i`` in shard ``i % k``) unless asked otherwise;
* **rows that go wrong** in other ways: unreadable lines with invalid UTF-8, ``NaN``, ``1e400``,
  trailing garbage, a JSON scalar or a cut; duplicates copied from up to 2,000 rows back,
  re-serialised or re-run; unhealthy rows with a retried 500 inside a turn, a hollow middle turn,
  an off-by-one usage, a runaway final call, an unmatched reference or a free-form value nested
  300 deep; unobserved rows without a trajectory or with a capture gap.

Deterministic in all arguments (one ``random.Random(seed)``). Usage:
``python -m bench.corpus2 OUT_PATH --rows N [--seed S] [--avg-bytes B] [--shards K] [--contiguous]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

KINDS: tuple[str, ...] = ("healthy", "unhealthy", "unobserved", "unreadable", "duplicate")
VARIANTS: dict[str, tuple[str, ...]] = {
    "healthy": ("healthy",),
    "unhealthy": (
        "retried_500",
        "hollow_middle",
        "usage_off_by_one",
        "runaway",
        "unmatched_ref",
        "deep_value",
    ),
    "unobserved": ("no_trajectory", "capture_incomplete", "turns_unavailable"),
    "unreadable": ("bad_utf8", "nan", "float_overflow", "trailing_garbage", "scalar", "truncated"),
    "duplicate": ("copy_far", "reserialised", "rerun"),
}
DEFAULT_MIX: dict[str, float] = {
    "healthy": 0.86,
    "unhealthy": 0.07,
    "unobserved": 0.03,
    "unreadable": 0.02,
    "duplicate": 0.02,
}
SIZE_CLASSES: tuple[tuple[str, float, float], ...] = (
    # (name, share of rows, size relative to the average)
    ("short", 0.50, 0.35),
    ("medium", 0.38, 1.00),
    ("long", 0.12, 3.80),
)
STYLES: tuple[tuple[str, float], ...] = (
    ("orjson", 0.93),
    ("ascii_escaped", 0.03),
    ("spaced", 0.02),
    ("crlf", 0.02),
)
"""How a row's line is serialised, and how often."""
AGENTS: tuple[tuple[str, str | None], ...] = (
    ("math_agent", None),
    ("code_agent", "sandbox_env"),
    ("søk_agent", None),
)
"""Agent names and the environment-server stamp their rows carry (aggregate groups)."""
REPEATS = (1, 2, 4, 4, 8, 16)
WINDOW = 1_000
COPY_DISTANCE = 2_000
MAX_OUTPUT_TOKENS = 8192
BASE_TIME = 1_790_000_000.0
DEEP_LEVELS = 300
BIG_INT = 2**70 + 12345
POLICY = {"type": "responses_api_models", "name": "policy_model"}
TOOL_NAMES = ("run_python", "search_web", "read_file", "calculator", "sql_query")
_WORDS = (
    "alpha beta gamma delta kernel vector matrix proof lemma theorem query index cache shard "
    "naïve façade señor Ærø Zürich crème brûlée déjà-vu coöperate "
    "привет мир данные модель задача ответ "
    "λόγος αλήθεια μέτρον "
    "東京 数据 模型 推理 答案 問題 日本語 한국어 "
    "مرحبا بيانات نموذج "
    "नमस्ते डेटा "
    "🙂 🚀 👩\u200d💻 🇫🇷 ∑ ≤ ≥ ∞ √ "
    '"quoted" back\\slash tab\there line\u2028sep 50% <tag> &amp; a/b'
).split(" ")
_CODE = (
    "def f(x):\n    return x ** 2  # sq\n",
    "import math\nprint(math.pi)\n",
    "for i in range(10):\n\tprint(i, end=',')\n",
    's = "naïve"\nprint(s.upper())\n',
    "rows = [r for r in data if r['k'] > 3]\n",
)


@dataclass(frozen=True, slots=True)
class Row:
    """One generated line and what it is."""

    kind: str
    variant: str
    size_class: str
    style: str
    task: int | None
    rollout: int | None
    record: dict[str, Any] | None
    line: bytes


def _compact(record: dict[str, Any]) -> bytes:
    """Compact JSON: orjson's, or the json module's where orjson refuses (a value nested deeper
    than orjson serialises, an integer beyond 64 bits)."""
    try:
        return orjson.dumps(record)
    except TypeError:
        return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()


def _serialise(record: dict[str, Any], style: str) -> bytes:
    if style == "orjson":
        return _compact(record) + b"\n"
    if style == "ascii_escaped":
        return json.dumps(record, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"
    if style == "spaced":
        return json.dumps(record, ensure_ascii=False).encode() + b"\n"
    if style == "crlf":
        return _compact(record) + b"\r\n"
    raise ValueError(f"unknown style: {style}")


def _pick(rng: random.Random, table: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
    draw = rng.random()
    for entry in table:
        draw -= entry[1]
        if draw < 0:
            return entry
    return table[-1]


class Corpus2:
    """Deterministic source of rows (owns the RNG)."""

    def __init__(self, seed: int = 0, avg_bytes: int = 16_000, big_int_share: float = 0.01) -> None:
        if avg_bytes < 1:
            raise ValueError("avg_bytes must be positive")
        self.rng = random.Random(seed)
        self.avg_bytes = avg_bytes
        self.big_int_share = big_int_share
        rng = self.rng
        words = rng.choices(_WORDS, k=120_000)
        for i in range(0, len(words), 11):
            words[i] = "".join(rng.choices("bcdfghklmnprstvz", k=3)) + rng.choice("aeiouy")
        self._text_source = " ".join(words)
        self._pending: list[tuple[int, int]] = []
        self._next_task = 0
        self._recent: deque[Row] = deque(maxlen=COPY_DISTANCE)
        # Text budget gain per size class: adjusted after each record so sizes meet their targets.
        self._gain = {name: 0.3 for name, _, _ in SIZE_CLASSES}

    # -- pieces ---------------------------------------------------------------------------------

    def _text(self, chars: int) -> str:
        source = self._text_source
        chars = max(3, min(chars, len(source) - 8))
        start = self.rng.randrange(0, len(source) - chars)
        text = source[start : start + chars].strip()
        return text or "ok"

    def _hex(self, n: int) -> str:
        return f"{self.rng.getrandbits(4 * n):0{n}x}"

    def _identity(self) -> tuple[int, int]:
        if not self._pending:
            block: list[tuple[int, int]] = []
            while len(block) < WINDOW:
                repeats = self.rng.choice(REPEATS)
                block.extend((self._next_task, r) for r in range(repeats))
                self._next_task += 1
            self.rng.shuffle(block)
            self._pending = block[::-1]
        return self._pending.pop()

    # -- rows -----------------------------------------------------------------------------------

    def row(self, kind: str, variant: str) -> Row:
        rng = self.rng
        style = _pick(rng, STYLES)[0]
        if kind == "duplicate":
            if not self._recent:
                return self.row("healthy", "healthy")
            source = self._recent[rng.randrange(len(self._recent))]
            assert source.record is not None and source.task is not None and source.rollout is not None
            if variant == "copy_far":
                line = source.line
            elif variant == "reserialised":
                line = _serialise(source.record, "spaced" if source.style != "spaced" else "orjson")
            else:
                record, size_class = self.record(source.task, source.rollout, "healthy")
                return Row(kind, variant, size_class, style, source.task, source.rollout, record,
                           _serialise(record, style))  # fmt: skip
            return Row(
                kind, variant, source.size_class, style, source.task, source.rollout, source.record, line
            )
        task, rollout = self._identity()
        if kind == "unreadable":
            return Row(
                kind, variant, "short", "orjson", None, None, None, self._unreadable(task, rollout, variant)
            )
        record, size_class = self.record(task, rollout, variant)
        if rng.random() < self.big_int_share:
            record["_ng_seed_state"] = BIG_INT + rng.randrange(1 << 20)
            style = "orjson"  # the json module's compact bytes (orjson refuses the integer)
        line = _serialise(record, style)
        row = Row(kind, variant, size_class, style, task, rollout, record, line)
        self._recent.append(row)
        return row

    def _unreadable(self, task: int, rollout: int, variant: str) -> bytes:
        rng = self.rng
        record, _ = self.record(task, rollout, "healthy", size_class="short")
        whole = orjson.dumps(record)
        if variant == "bad_utf8":
            at = whole.index(b'"content":"') + len(b'"content":"')
            return whole[:at] + b"\xff\xfe" + whole[at:] + b"\n"
        if variant == "nan":
            return whole[:-1] + b',"judge_score":NaN}\n'
        if variant == "float_overflow":
            return whole[:-1] + b',"judge_score":1e400}\n'
        if variant == "trailing_garbage":
            return whole + b' {"x":1}\n'
        if variant == "scalar":
            return rng.choice((b'"rollout"\n', b"42\n", b"null\n", b"true\n"))
        if variant == "truncated":
            return whole[: rng.randint(len(whole) // 4, len(whole) - 2)] + b"\n"
        raise ValueError(f"unknown unreadable variant: {variant}")

    def record(
        self, task: int, rollout: int, variant: str, size_class: str | None = None
    ) -> tuple[dict[str, Any], str]:
        """A record for ``(task, rollout)``: healthy, then altered by ``variant``."""
        rng = self.rng
        if size_class is None:
            name, _, relative = _pick(rng, SIZE_CLASSES)
        else:
            name, relative = size_class, next(r for n, _, r in SIZE_CLASSES if n == size_class)
        target = self.avg_bytes * relative * rng.uniform(0.7, 1.3)
        if name == "short":
            n_turns = 1
        elif name == "medium":
            n_turns = rng.randint(2, 4)
        else:
            n_turns = rng.randint(6, 14)
        fan_out = 4 if name == "long" else 2
        plan = [rng.randint(1, fan_out) for _ in range(n_turns - 1)] + [0]
        slots = 2 + sum(2 + 2 * tools for tools in plan)
        chars = max(8, int(target * self._gain[name] / slots))
        record = _Builder(self, task, rollout, plan, chars).build()
        _apply(record, variant, rng)
        size = len(_compact(record))
        # Feedback on the text budget: the gain converges so each class meets its target size.
        ratio = max(0.5, min(2.0, target / max(size, 1)))
        self._gain[name] = max(0.01, min(10.0, self._gain[name] * ratio**0.5))
        return record, name


class _Builder:
    """Assembles one healthy record from its draws (many tool calls, reasoning, two-call turns)."""

    def __init__(self, corpus: Corpus2, task: int, rollout: int, plan: list[int], chars: int) -> None:
        self.c = corpus
        self.rng = corpus.rng
        self.task = task
        self.rollout = rollout
        self.plan = plan
        self.chars = chars

    def text(self, scale: float = 1.0) -> str:
        return self.c._text(int(self.chars * scale * self.rng.uniform(0.5, 1.5)))

    def reasoning(self) -> list[dict[str, Any]]:
        items = []
        for _ in range(self.rng.choice((1, 1, 2, 3))):
            parts = [{"type": "summary_text", "text": self.text(0.5)} for _ in range(self.rng.randint(1, 4))]
            items.append(
                {
                    "id": f"rs_{self.c._hex(20)}",
                    "type": "reasoning",
                    "summary": parts,
                    "encrypted_content": self.c._hex(self.rng.choice((16, 32, 96))),
                }
            )
        return items

    def tool_output(self) -> Any:
        rng = self.rng
        shape = rng.random()
        if shape < 0.7:
            return self.text(1.5)
        if shape < 0.85:
            return {"stdout": self.text(), "exit_code": rng.choice((0, 0, 1)), "elapsed_s": rng.random() * 30}
        return [
            {"row": i, "value": rng.uniform(-1e9, 1e9), "label": self.text(0.1)}
            for i in range(rng.randint(1, 8))
        ]

    def build(self) -> dict[str, Any]:
        rng = self.rng
        c = self.c
        task, rollout = self.task, self.rollout
        agent, environment = AGENTS[task % len(AGENTS)]
        invocation_id = f"inv_{c._hex(16)}"
        system: dict[str, Any] = {"role": "system", "content": self.text(0.8), "type": "message"}
        user: dict[str, Any] = {
            "role": "user",
            "content": [{"type": "input_text", "text": self.text(1.2)}],
            "type": "message",
        }
        history: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        turns: list[dict[str, Any]] = []
        tool_records: list[dict[str, Any]] = []
        transcript: list[dict[str, Any]] = []
        clock = BASE_TIME + task * 31.0 + rollout * 7.0 + rng.random()
        prompt_total = completion_total = 0
        by_response = rng.random() < 0.3
        final = len(self.plan) - 1
        for turn_no, n_tools in enumerate(self.plan):
            refs: list[dict[str, Any]] = []
            two_calls = rng.random() < 0.1
            for sub in range(2 if two_calls else 1):
                last_of_turn = sub == (1 if two_calls else 0)
                reasoning = self.reasoning()
                if turn_no < final and last_of_turn:
                    items: list[dict[str, Any]] = [
                        {
                            "arguments": orjson.dumps(
                                {"code": rng.choice(_CODE), "note": self.text(0.2)}
                                if rng.random() < 0.5
                                else {"query": self.text(0.3), "limit": rng.randint(1, 50)}
                            ).decode(),
                            "call_id": f"call_{c._hex(24)}",
                            "name": rng.choice(TOOL_NAMES),
                            "type": "function_call",
                            "id": f"fc_{c._hex(20)}",
                            "status": "completed",
                        }
                        for _ in range(n_tools)
                    ]
                    finish = "tool_calls"
                else:
                    items = [
                        {
                            "id": f"msg_{c._hex(20)}",
                            "type": "message",
                            "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": self.text(1.0), "annotations": []}],
                        }
                    ]
                    finish = "stop"
                output = reasoning + items
                body = orjson.dumps(output)
                completion = max(1, len(body) // 5) + rng.randint(0, 40)
                prompt = 50 + len(orjson.dumps([system, user, *history])) // 4 + rng.randint(0, 9)
                cached = rng.choice((0, 0, prompt // 2, prompt - prompt % 64))
                reasoning_tokens = min(completion, sum(len(r["summary"]) for r in reasoning) * 37)
                call_id = f"mc_{c._hex(24)}"
                response_id = f"resp_{c._hex(32)}"
                started = round(clock, 6)
                latency = rng.lognormvariate(0.5, 0.8)
                clock += latency
                completed = round(clock, 6)
                usage = {
                    "input_tokens": prompt,
                    "input_tokens_details": {"cached_tokens": cached},
                    "output_tokens": completion,
                    "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                    "total_tokens": prompt + completion,
                }
                calls.append(
                    {
                        "model_call_id": call_id,
                        "started_at": started,
                        "completed_at": completed,
                        "duration_ms": round(latency * 1000.0, 3),
                        "request": {
                            "model": "policy-model",
                            "input": [system, user, *history[-4:]],
                            "tools": [{"type": "function", "name": name} for name in TOOL_NAMES],
                            "parallel_tool_calls": True,
                            "max_output_tokens": MAX_OUTPUT_TOKENS,
                            "temperature": 0.7,
                            "top_p": 0.95,
                        },
                        "response": {
                            "id": response_id,
                            "object": "response",
                            "created_at": int(started),
                            "model": "policy-model",
                            "status": "completed",
                            "output": output,
                            "usage": usage,
                        },
                        "response_metadata": {
                            "response_id": response_id,
                            "model": "policy-model",
                            "dialect": "responses",
                            "response_status": "completed",
                            "finish_reason": finish,
                            "model_ref": dict(POLICY),
                            "status_code": 200,
                            "upstream_status_code": 200,
                            "response_source": "upstream",
                            "latency_ttft_ms": round(latency * 137.0, 2),
                        },
                        "token_stats": {
                            "prompt_tokens": prompt,
                            "completion_tokens": completion,
                            "reasoning_tokens": reasoning_tokens,
                            "total_tokens": prompt + completion,
                            "cached_tokens": cached,
                        },
                    }
                )
                prompt_total += prompt
                completion_total += completion
                refs.append(
                    {"model_ref": dict(POLICY), "response_id": response_id}
                    if by_response
                    else {"model_call_id": call_id}
                )
                transcript.extend(reasoning)
                transcript.extend(items)
                history.extend(items)
            answer: Any
            if turn_no < final:
                answer = items
                for item in items:
                    out = self.tool_output()
                    began = round(clock, 6)
                    clock += rng.expovariate(2.0)
                    status = "failed" if rng.random() < 0.05 else "completed"
                    tool_record: dict[str, Any] = {
                        "kind": "tool_call",
                        "invocation_id": invocation_id,
                        "tool_call_id": item["call_id"],
                        "sandbox_id": f"sbx-{c._hex(8)}",
                        "tool_name": item["name"],
                        "started_at": began,
                        "completed_at": round(clock, 6),
                        "duration_ms": round((clock - began) * 1000.0, 3),
                        "timing_source": "executor",
                        "status": status,
                        "output": out,
                    }
                    if status == "failed":
                        tool_record["error_type"] = "ToolTimeout"
                    tool_records.append(tool_record)
                    text_out = out if isinstance(out, str) else orjson.dumps(out).decode()
                    result = {"type": "function_call_output", "call_id": item["call_id"], "output": text_out}
                    transcript.append(result)
                    history.append(result)
            else:
                answer = items[0]["content"][0]["text"]
            turns.append(
                {
                    "turn_no": turn_no + 1,
                    "invocation_id": invocation_id,
                    "task_id": f"t{task}",
                    "rollout_id": f"t{task}/r{rollout}",
                    "timestamp": round(clock, 6),
                    "step_count": len(refs),
                    "question": user["content"][0]["text"] if turn_no == 0 else None,
                    "answer": answer,
                    "reasoning_content": reasoning[0]["summary"][0]["text"],
                    "resolved": turn_no == final,
                    "model_calls": refs,
                }
            )
        reward_kind = rng.random()
        reward: float = (
            1.0 if reward_kind < 0.4 else 0.0 if reward_kind < 0.75 else round(rng.randint(1, 6) / 7, 15)
        )
        trajectory = {
            "schema_version": "1.0",
            "task_id": f"t{task}",
            "rollout_id": f"t{task}/r{rollout}",
            "invocations": [
                {
                    "kind": "agent_invocation",
                    "invocation_id": invocation_id,
                    "status": "completed",
                    "duration_ms": round((clock - BASE_TIME - task * 31.0 - rollout * 7.0) * 1000.0, 3),
                    "model_calls": [dict(ref) for turn in turns for ref in turn["model_calls"]],
                }
            ],
            "turns": turns,
            "model_calls": calls,
            "tool_calls": tool_records,
            "gaps": [],
        }
        record: dict[str, Any] = {
            "responses_create_params": {
                "input": [system, user],
                "tools": [
                    {
                        "type": "function",
                        "name": name,
                        "description": f"{name} — τool",
                        "parameters": {"type": "object"},
                    }
                    for name in TOOL_NAMES
                ],
                "parallel_tool_calls": True,
                "max_output_tokens": MAX_OUTPUT_TOKENS,
                "temperature": 0.7,
                "metadata": {"dataset": "bench-corpus2", "split": "test"},
            },
            "agent_ref": {"type": "responses_api_agents", "name": agent},
            "ng_trajectory": trajectory,
            "response": {
                "id": calls[-1]["response"]["id"],
                "object": "response",
                "created_at": int(BASE_TIME),
                "model": "policy-model",
                "status": "completed",
                "output": transcript,
                "usage": {
                    "input_tokens": prompt_total,
                    "output_tokens": completion_total,
                    "total_tokens": prompt_total + completion_total,
                },
            },
            "reward": reward,
            "judge_latency_ms": round(rng.lognormvariate(3.0, 1.0), 9),
            "num_tool_calls": len(tool_records),
            "request_seq": rng.randrange(2**62, 2**63 - 1),
            "token_budget_left": MAX_OUTPUT_TOKENS * len(self.plan) - completion_total,
            "tiny": 5e-324 if rng.random() < 0.5 else -0.0,
            "huge": 1.7976931348623157e308 if rng.random() < 0.5 else 18446744073709551615,
            "ng_perf": {"total_latency_ms": round((clock - BASE_TIME) * 1000.0 % 1e7, 3)},
            "_ng_task_index": task,
            "_ng_rollout_index": rollout,
        }
        if environment is not None:
            record["_ng_environment_server"] = environment
        return record


def _resum(record: dict[str, Any]) -> None:
    calls = record["ng_trajectory"]["model_calls"]
    prompt = sum(call["token_stats"]["prompt_tokens"] for call in calls)
    completion = sum(call["token_stats"]["completion_tokens"] for call in calls)
    record["response"]["usage"] = {
        "input_tokens": prompt,
        "output_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _apply(record: dict[str, Any], variant: str, rng: random.Random) -> None:
    if variant == "healthy":
        return
    trajectory = record["ng_trajectory"]
    turns, calls = trajectory["turns"], trajectory["model_calls"]
    if variant == "retried_500":
        # A failed attempt before the turn's successful call: a non-terminal model_call_failed.
        first = calls[0]
        failed = orjson.loads(orjson.dumps(first))
        failed["model_call_id"] = first["model_call_id"] + "_try0"
        failed["response"] = {"error": {"type": "server_error", "message": "upstream 500 — réessayer"}}
        failed["response_metadata"].update(
            response_id=None, status_code=500, upstream_status_code=500, response_status="failed",
            finish_reason=None, error_category="server_error",
        )  # fmt: skip
        failed["token_stats"] = {
            "prompt_tokens": first["token_stats"]["prompt_tokens"],
            "completion_tokens": 0,
        }
        failed["started_at"] = round(first["started_at"] - 2.0, 6)
        failed["completed_at"] = round(first["started_at"] - 1.0, 6)
        calls.insert(0, failed)
        turns[0]["model_calls"].insert(0, {"model_call_id": failed["model_call_id"]})
        record["ng_trajectory"]["invocations"][0]["model_calls"].insert(
            0, {"model_call_id": failed["model_call_id"]}
        )
        _resum(record)
    elif variant == "hollow_middle":
        turn = turns[len(turns) // 2]
        turn["answer"] = rng.choice(([], "", " \t\n", None))
        turn["reasoning_content"] = rng.choice(("", None))
    elif variant == "usage_off_by_one":
        usage = record["response"]["usage"]
        usage["output_tokens"] += 1
        usage["total_tokens"] += 1
    elif variant == "runaway":
        last = calls[-1]
        last["response_metadata"].update(finish_reason="length", response_status="incomplete")
        last["response"]["status"] = "incomplete"
        last["response"]["output"] = [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "  "}]}
        ]
        stats = last["token_stats"]
        stats["completion_tokens"] = MAX_OUTPUT_TOKENS
        stats["total_tokens"] = stats["prompt_tokens"] + MAX_OUTPUT_TOKENS
        _resum(record)
    elif variant == "unmatched_ref":
        turns[-1]["model_calls"].append({"model_call_id": "mc_never_captured_ø"})
    elif variant == "deep_value":
        value: Any = "bottom"
        for level in range(DEEP_LEVELS):
            value = [value] if level % 2 else {"d": value}
        target = trajectory["tool_calls"][0] if trajectory["tool_calls"] else turns[-1]
        target["output" if trajectory["tool_calls"] else "answer"] = value
    elif variant == "no_trajectory":
        del record["ng_trajectory"]
    elif variant == "capture_incomplete":
        root = trajectory["invocations"][0]["invocation_id"]
        detail = "capture stream closed early"
        trajectory["gaps"] = [
            {"code": "model_call_capture_incomplete", "invocation_id": root, "detail": detail}
        ]
    elif variant == "turns_unavailable":
        trajectory["turns"] = []
        trajectory["gaps"] = [
            {"code": "turns_unavailable", "invocation_id": None, "detail": "агент не сообщает ходы"}
        ]
    else:
        raise ValueError(f"unknown variant: {variant}")


def _kinds(mix: Mapping[str, float] | None) -> tuple[list[str], list[float]]:
    chosen = dict(DEFAULT_MIX if mix is None else mix)
    unknown = sorted(set(chosen) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown row kind(s): {', '.join(unknown)}")
    kinds = [kind for kind in KINDS if chosen.get(kind, 0) > 0]
    if not kinds:
        raise ValueError("mix weights must not all be zero")
    total = sum(chosen[kind] for kind in kinds)
    return kinds, [chosen[kind] / total for kind in kinds]


def iter_rows(
    n: int,
    seed: int = 0,
    avg_bytes: int = 16_000,
    mix: Mapping[str, float] | None = None,
    big_int_share: float = 0.01,
) -> Iterator[Row]:
    """Yield ``n`` rows with their kinds, variants, size classes and serialisation styles."""
    kinds, weights = _kinds(mix)
    corpus = Corpus2(seed=seed, avg_bytes=avg_bytes, big_int_share=big_int_share)
    rng = corpus.rng
    for _ in range(n):
        kind = rng.choices(kinds, weights)[0]
        yield corpus.row(kind, rng.choice(VARIANTS[kind]))


def generate_lines(
    n: int,
    seed: int = 0,
    avg_bytes: int = 16_000,
    mix: Mapping[str, float] | None = None,
    big_int_share: float = 0.01,
    blank_lines: bool = True,
) -> Iterator[bytes]:
    """The lines of ``n`` rows; with ``blank_lines`` about one row in 200 is followed by a blank
    or whitespace-only line (not a row)."""
    rng = random.Random(seed ^ 0x5EED)
    for row in iter_rows(n, seed, avg_bytes, mix, big_int_share):
        yield row.line
        if blank_lines and rng.random() < 0.005:
            yield rng.choice((b"\n", b"   \n", b"\t\r\n"))


def write_corpus(
    path: str,
    n: int,
    seed: int = 0,
    avg_bytes: int = 16_000,
    mix: Mapping[str, float] | None = None,
    shards: int = 1,
    round_robin: bool = True,
    big_int_share: float = 0.01,
) -> list[str]:
    """Stream ``n`` rows to ``path`` (a file, or ``path/rollouts.jsonl`` for a directory) or, with
    ``shards`` > 1, to ``path/rollouts_shard_{i}.jsonl``: row ``i`` to shard ``i % shards``
    (``round_robin``) or contiguous ranges. Blank lines go with the row before them. Each file is
    written under a temporary name and renamed."""
    if shards < 1 or n < 0:
        raise ValueError("shards must be at least 1 and n non-negative")
    target = Path(path)
    if shards == 1:
        paths = [target / "rollouts.jsonl" if target.is_dir() else target]
    else:
        paths = [target / f"rollouts_shard_{i}.jsonl" for i in range(shards)]
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
    temps = [p.with_name(f".{p.name}.{os.getpid()}.tmp") for p in paths]
    handles = [open(t, "wb", buffering=1 << 20) for t in temps]  # noqa: SIM115 - closed below
    try:
        row = -1
        for line in generate_lines(n, seed, avg_bytes, mix, big_int_share):
            if line.strip():
                row += 1
            shard = row % shards if round_robin else min(shards - 1, row * shards // max(n, 1))
            handles[shard].write(line)
        for handle in handles:
            handle.close()
        for temp, p in zip(temps, paths, strict=True):
            os.replace(temp, p)
    finally:
        for handle in handles:
            handle.close()
        for temp in temps:
            temp.unlink(missing_ok=True)
    return [str(p) for p in paths]


PREJOIN_MIX: dict[str, float] = {"healthy": 0.95, "unhealthy": 0.05}
"""Rows of a pre-join run: unhealthy ones included (their captures say what went wrong)."""


def prejoin(record: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """A record as the agent returned it before ``eval join``: the row (``ng_trajectory``
    replaced by ``ng_agent_observations``: the root invocation with its conversation and its
    calls' references, and the tool-call records), its capture lines (one per model call, as the
    model server's capture middleware writes them) and its capture id."""
    row = {key: value for key, value in record.items() if key != "ng_trajectory"}
    trajectory = record["ng_trajectory"]
    invocation = trajectory["invocations"][0]
    conversation = list(record["responses_create_params"]["input"][1:])
    conversation += [item for item in record["response"]["output"] if item.get("type") != "reasoning"]
    refs = [{"model_call_id": call["model_call_id"]} for call in trajectory["model_calls"]]
    root = {
        "kind": "agent_invocation",
        "invocation_id": invocation["invocation_id"],
        "status": invocation["status"],
        "model_calls": refs,
        "conversation": conversation,
    }
    tools = [
        {key: value for key, value in tool.items() if key != "output"} for tool in trajectory["tool_calls"]
    ]
    row["ng_agent_observations"] = {"source": "bench_corpus2", "records": [root, *tools], "gaps": []}
    lines = []
    for call in trajectory["model_calls"]:
        meta = call["response_metadata"]
        lines.append(
            {
                "model_call_id": call["model_call_id"],
                "dialect": "responses",
                "model_ref": meta["model_ref"],
                "started_at": call["started_at"],
                "completed_at": call["completed_at"],
                "latency_ms": call["duration_ms"],
                "latency_ttft_ms": meta.get("latency_ttft_ms"),
                "status_code": meta["status_code"],
                "error_category": meta.get("error_category"),
                "request": call["request"],
                "response": call["response"],
            }
        )
    return row, lines, f"{record['_ng_task_index']}-{record['_ng_rollout_index']}"


def write_prejoin_run(
    out_dir: str | os.PathLike[str], rows: int, seed: int = 0, avg_bytes: int = 16_000
) -> int:
    """Write ``rollouts.jsonl`` and ``model-calls/<task>-<rollout>.capture.jsonl`` of ``rows``
    pre-join rollouts under ``out_dir`` (the ``bench.join_corpus`` layout, this generator's
    shapes); returns the number of capture files."""
    root = Path(out_dir)
    capture = root / "model-calls"
    capture.mkdir(parents=True, exist_ok=True)
    files = 0
    with open(root / "rollouts.jsonl", "wb", buffering=1 << 20) as out:
        for generated in iter_rows(rows, seed, avg_bytes, PREJOIN_MIX, big_int_share=0.0):
            assert generated.record is not None
            row, lines, key = prejoin(generated.record)
            out.write(_serialise(row, generated.style))
            (capture / f"{key}.capture.jsonl").write_bytes(b"".join(_compact(line) + b"\n" for line in lines))
            files += 1
    return files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.corpus2", description=__doc__.splitlines()[0])
    parser.add_argument("out_path", metavar="OUT_PATH")
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--avg-bytes", type=int, default=16_000)
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--contiguous", action="store_true", help="contiguous shards instead of round-robin")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    paths = write_corpus(
        args.out_path,
        args.rows,
        args.seed,
        args.avg_bytes,
        shards=args.shards,
        round_robin=not args.contiguous,
    )
    elapsed = time.perf_counter() - began
    size = sum(os.path.getsize(p) for p in paths)
    print(f"wrote {size / 1e6:.1f} MB to {len(paths)} file(s) in {elapsed:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

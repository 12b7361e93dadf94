"""Seeded generator of *pre-join* NeMo Gym 0.7.0 run directories: rollouts + a CaptureStore.

A run directory holds ``rollouts.jsonl`` (rows as the agent returned them: identity, the final
``response``, ``reward``, ``ng_agent_observations`` with one root invocation whose conversation has
the tool calls and outputs and whose ``model_calls`` reference the captured calls, tool timing
records, and ``ng_perf.total_latency_ms``) and ``model-calls/<task>-<rollout>.capture.jsonl``
with one line per model call, as the Gym model server's capture middleware writes them. After
``gymflow eval join`` the rows carry ``ng_trajectory`` and pass ``gymflow eval health-check``.

Healthy rows are the bulk. ``variants=True`` (the example) adds one row of each evidence problem
the join reports: a damaged capture line, an incomplete marker, a missing capture file, an
unmatched reference, an unowned judge call, a sub-agent call attached by session id, a negative
latency (projection fails), a no-result row and a retried attempt. Same arguments, same bytes.

``python -m bench.join_corpus OUT_DIR --rows N [--seed S] [--calls C] [--call-bytes B] [--example]``
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

POLICY = {"type": "responses_api_models", "name": "policy_model"}
JUDGE = {"type": "responses_api_models", "name": "judge_model"}
VARIANTS: tuple[str, ...] = (
    "damaged_line",
    "incomplete_marker",
    "no_capture_file",
    "unmatched_reference",
    "judge_call",
    "session_attach",
    "negative_latency",
    "no_result",
    "retried_attempt",
)
_WORDS = (
    "lo la ne mu tari vemo kesa dun pilo rask ambe toru fen gali sora nimbu kel varo desh"
    " omi plin tavu reko saf mendo ulu brak tesi hova lurn quen zamo dravi ekto"
).split()


@dataclass(frozen=True)
class RawRun:
    """Paths of a generated run directory."""

    rollouts: Path
    capture_dir: Path
    rows: int
    capture_files: int


class _Text:
    """Cheap seeded text: slices of one long word string."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.corpus = " ".join(rng.choice(_WORDS) for _ in range(60_000))

    def __call__(self, size: int) -> str:
        size = max(8, size)
        start = self.rng.randrange(0, len(self.corpus) - size - 1)
        return self.corpus[start : start + size].strip() or "lo"


def _hex(rng: random.Random, n: int = 32) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _rollout(
    rng: random.Random, text: _Text, task: int, rollout: int, calls: int, call_bytes: int, variant: str | None
) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """One row, its capture lines, and the capture file id."""
    key = f"{task}-{rollout}"
    row: dict[str, Any] = {"_ng_task_index": task, "_ng_rollout_index": rollout}
    if variant == "retried_attempt":
        row["_ng_attempt_index"] = 1
        key += "-a1"
    row["task_id"] = f"task-{task}"
    system = {"role": "system", "content": text(call_bytes // 8)}
    user = {"role": "user", "content": text(call_bytes // 4)}
    history: list[dict[str, Any]] = [user]
    conversation: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    lines: list[dict[str, Any]] = []
    refs: list[dict[str, Any]] = []
    clock = 1_786_000_000.0 + task * 600 + rollout * 60
    totals = [0, 0]
    final_response: dict[str, Any] = {}
    for i in range(calls):
        call_id = _hex(rng)
        response_id = f"resp_{_hex(rng, 12)}"
        last = i == calls - 1
        tokens_in = 200 + 40 * i + rng.randrange(50)
        tokens_out = 20 + rng.randrange(80)
        reasoning = {
            "type": "reasoning",
            "id": f"rs_{_hex(rng, 10)}",
            "summary": [{"type": "summary_text", "text": text(call_bytes // 10)}],
        }
        if last:
            item = {
                "type": "message",
                "role": "assistant",
                "id": f"msg_{_hex(rng, 10)}",
                "status": "completed",
                "content": [{"type": "output_text", "text": text(call_bytes // 4), "annotations": []}],
            }
        else:
            tool_id = f"call_{_hex(rng, 10)}"
            item = {
                "type": "function_call",
                "call_id": tool_id,
                "name": "search",
                "arguments": orjson.dumps({"query": text(40)}).decode(),
            }
        response = {
            "id": response_id,
            "model": "policy-model",
            "status": "completed",
            "output": [reasoning, item],
            "usage": {
                "input_tokens": tokens_in,
                "output_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
                "input_tokens_details": {"cached_tokens": 128 if i else 0},
                "output_tokens_details": {"reasoning_tokens": tokens_out // 3},
            },
        }
        latency = round(300 + rng.random() * 900, 2)
        line = {
            "model_call_id": call_id,
            "dialect": "responses",
            "model_ref": POLICY,
            "started_at": round(clock, 3),
            "completed_at": round(clock + latency / 1000, 3),
            "latency_ms": -1.0 if variant == "negative_latency" and i == 0 else latency,
            "latency_ttft_ms": round(latency / 4, 2),
            "status_code": 200,
            "error_category": None,
            "request": {"model": "policy-model", "input": [system, *history[-4:]], "max_output_tokens": 4096},
            "response": response,
        }
        lines.append(line)
        clock += latency / 1000 + 0.05
        totals[0] += tokens_in
        totals[1] += tokens_out
        history.append(item)
        if variant == "session_attach" and i == calls - 2:
            line["client_session_id"] = "sub"  # the sub-agent's call: joined by session id, not by a ref
        else:
            refs.append({"model_call_id": call_id})
        conversation.append(item)
        if not last:
            output = text(call_bytes // 5)
            conversation.append(
                {"type": "function_call_output", "call_id": item["call_id"], "output": output}
            )
            history.append({"type": "function_call_output", "call_id": item["call_id"], "output": output})
            duration = round(50 + rng.random() * 400, 1)
            tools.append(
                {
                    "kind": "tool_call",
                    "invocation_id": "root",
                    "tool_call_id": item["call_id"],
                    "tool_name": "search",
                    "started_at": round(clock, 3),
                    "completed_at": round(clock + duration / 1000, 3),
                    "duration_ms": duration,
                    "timing_source": "harness",
                    "status": "completed",
                }
            )
            clock += duration / 1000
        final_response = response
    if variant == "judge_call":
        judge = dict(lines[-1], model_call_id=_hex(rng), model_ref=JUDGE)
        judge["response"] = dict(judge["response"], id=None)
        lines.append(judge)
    if variant == "unmatched_reference":
        refs.append({"model_call_id": "call-that-was-never-captured"})
    records: list[dict[str, Any]] = [
        {
            "kind": "agent_invocation",
            "invocation_id": "root",
            "status": "completed",
            "model_calls": refs,
            "conversation": [user, *conversation],
        },
        *tools,
    ]
    if variant == "session_attach":
        records.append(
            {
                "kind": "agent_invocation",
                "invocation_id": "sub",
                "parent_invocation_id": "root",
                "status": "completed",
                "model_calls": [],
            }
        )
    row["responses_create_params"] = {
        "input": [system, user],
        "tools": [{"type": "function", "name": "search"}],
    }
    row["response"] = {
        **final_response,
        "usage": {
            "input_tokens": totals[0],
            "output_tokens": totals[1],
            "total_tokens": totals[0] + totals[1],
        },
    }
    row["reward"] = float(rng.random() < 0.6)
    row["ng_agent_observations"] = {"source": "bench_agent", "records": records, "gaps": []}
    row["ng_perf"] = {
        "total_latency_ms": round((clock - 1_786_000_000.0 - task * 600 - rollout * 60) * 1000, 1)
    }
    if variant == "no_result":
        row = {
            "_ng_task_index": task,
            "_ng_rollout_index": rollout,
            "task_id": f"task-{task}",
            "_ng_failure_class": "agent_run_error",
            "reward": 0.0,
        }
    return row, lines, key


def iter_run(
    rows: int,
    seed: int = 0,
    calls: int = 5,
    call_bytes: int = 2000,
    *,
    variants: bool = False,
    repeats: int = 4,
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]], str, str | None]]:
    """``(row, capture lines, capture id, variant)`` for each rollout, deterministically."""
    rng = random.Random(seed)
    text = _Text(rng)
    for index in range(rows):
        variant = (
            VARIANTS[index - (rows - len(VARIANTS))] if variants and index >= rows - len(VARIANTS) else None
        )
        n_calls = max(1, calls + rng.choice((-1, 0, 0, 1)))
        row, lines, key = _rollout(rng, text, index // repeats, index % repeats, n_calls, call_bytes, variant)
        yield row, lines, key, variant


def write_run(
    out_dir: str | os.PathLike[str],
    rows: int,
    seed: int = 0,
    calls: int = 5,
    call_bytes: int = 2000,
    *,
    variants: bool = False,
) -> RawRun:
    """Write ``rollouts.jsonl`` and ``model-calls/`` under ``out_dir``."""
    root = Path(out_dir)
    capture = root / "model-calls"
    capture.mkdir(parents=True, exist_ok=True)
    files = 0
    with open(root / "rollouts.jsonl", "wb") as out:
        for row, lines, key, variant in iter_run(rows, seed, calls, call_bytes, variants=variants):
            out.write(orjson.dumps(row) + b"\n")
            if variant in ("no_capture_file", "no_result"):
                continue
            body = b"".join(orjson.dumps(line) + b"\n" for line in lines)
            if variant == "damaged_line":
                body = body + b'{"model_call_id": "trunc\n'
            (capture / f"{key}.capture.jsonl").write_bytes(body)
            files += 1
            if variant == "incomplete_marker":
                (capture / f"{key}.capture.incomplete").write_bytes(b"")
    return RawRun(root / "rollouts.jsonl", capture, rows, files)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.join_corpus", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--calls", type=int, default=5, help="model calls per rollout (about)")
    parser.add_argument("--call-bytes", type=int, default=2000, help="payload text per call (about)")
    parser.add_argument("--example", action="store_true", help="the small example: 16 rows, every variant")
    args = parser.parse_args(argv)
    if args.example:
        run = write_run(args.out_dir, 16, args.seed, 3, 300, variants=True)
    else:
        run = write_run(args.out_dir, args.rows, args.seed, args.calls, args.call_bytes)
    print(
        f"wrote {run.rows} rollouts to {run.rollouts} and {run.capture_files} capture files", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

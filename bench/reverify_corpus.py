"""Seeded mcqa-like reverify inputs: ``materialized_inputs.jsonl`` and ``rollouts.jsonl`` (~1-2 KB per row).

Rows are keyed ``(task, rollout)`` with ``repeats`` rollouts per task; the rollout file is in a shuffled
"completion" order. About 70 % of the responses box the expected letter. ``python -m bench.reverify_corpus
DIR --rows N`` writes both files.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

AGENT = "mcqa_simple_agent"
MATERIALIZED = "materialized_inputs.jsonl"
ROLLOUTS = "rollouts.jsonl"
_WORDS = (
    "the of a to in is that for it as with was on be by this are from at or an which have not but were "
    "reaction energy cell protein market court theory model value system force layer signal enzyme "
    "pressure volume equation species policy contract neuron charge orbit gene acid sample measure"
).split()


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def _text(rng: random.Random, chars: int) -> str:
    parts: list[str] = []
    size = 0
    while size < chars:
        sentence = _sentence(rng, rng.randint(6, 16))
        parts.append(sentence)
        size += len(sentence) + 1
    return " ".join(parts)


def pair(rng: random.Random, task: int, rollout: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The materialized row and the rollout row of one key."""
    expected = "ABCD"[rng.randrange(4)]
    options = [{letter: _text(rng, rng.randint(30, 90))} for letter in "ABCD"]
    question = _text(rng, rng.randint(250, 550))
    prompt = question + "\n" + "\n".join(f"{k}: {v}" for o in options for k, v in o.items())
    params = {
        "input": [
            {
                "role": "system",
                "content": "Answer the multiple-choice question. Put the letter in \\boxed{}.",
            },
            {"role": "user", "content": prompt},
        ],
        "temperature": 0.6,
        "max_output_tokens": 4096,
    }
    keys = {"_ng_task_index": task, "_ng_rollout_index": rollout, "agent_ref": {"name": AGENT}}
    materialized = {
        "responses_create_params": params,
        **keys,
        "uuid": f"{rng.getrandbits(64):016x}",
        "options": options,
        "expected_answer": expected,
        "grading_mode": "strict_single_letter_boxed",
    }
    answer = expected if rng.random() < 0.7 else "ABCD"[rng.randrange(4)]
    text = _text(rng, rng.randint(200, 500)) + f" So the answer is \\boxed{{{answer}}}."
    response = {
        "id": f"resp_{rng.getrandbits(48):012x}",
        "object": "response",
        "created_at": 1764547200.0 + task,
        "model": "policy-model",
        "output": [
            {
                "id": f"msg_{rng.getrandbits(48):012x}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {"input_tokens": len(prompt) // 4, "output_tokens": len(text) // 4},
    }
    rollout_row = {
        "responses_create_params": params,
        "response": response,
        "reward": 1.0 if answer == expected else 0.0,
        "mask_sample": False,
        "failure_kind": None,
        "failure_reason": None,
        "expected_answer": expected,
        "extracted_answer": answer,
        **keys,
        "_ng_result_type": "mcqa",
    }
    return materialized, rollout_row


def iter_pairs(rows: int, seed: int = 0, repeats: int = 4) -> Iterator[tuple[bytes, bytes]]:
    """``rows`` (materialized line, rollout line) pairs, task-major order."""
    rng = random.Random(seed)
    for index in range(rows):
        materialized, rollout = pair(rng, index // repeats, index % repeats)
        yield orjson.dumps(materialized), orjson.dumps(rollout)


def write(directory: Path, rows: int, seed: int = 0) -> tuple[Path, Path]:
    """Write both files into ``directory``; the rollout lines in a seeded shuffled order."""
    directory.mkdir(parents=True, exist_ok=True)
    rollout_lines: list[bytes] = []
    with open(directory / MATERIALIZED, "wb") as out:
        for materialized, rollout in iter_pairs(rows, seed):
            out.write(materialized + b"\n")
            rollout_lines.append(rollout)
    random.Random(seed + 1).shuffle(rollout_lines)
    with open(directory / ROLLOUTS, "wb") as out:
        out.writelines(line + b"\n" for line in rollout_lines)
    return directory / MATERIALIZED, directory / ROLLOUTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write(args.directory, args.rows, args.seed)


if __name__ == "__main__":
    main()

"""A second reverify corpus, with other shapes than ``bench.reverify_corpus``: the rollouts of
``bench.corpus2`` and materialized inputs made from them.

Where ``bench.reverify_corpus`` makes one mcqa-like shape (one agent, four rollouts a task, ~2 KB
rollouts with one text message, flat materialized rows, every line compact orjson), this one has:

* the rollouts ``bench.corpus2`` writes (a third of them with the ``ng_trajectory`` of a joined
  run, the others without it, as ``gym eval run`` leaves them): short, medium and long rows (one
  to fourteen turns, parallel tool calls, reasoning items with encrypted content), multi-script text, 64-bit
  integers and extreme floats, lines written by ``json.dumps`` with escapes or spaces, CRLF
  endings, blank lines between rows, tasks of 1 to 16 rollouts finishing out of order within
  windows of 1,000, and three agents (one of them with a non-ASCII name);
* unhealthy rows (their ``response`` an error object or a truncated turn) and duplicates of
  earlier rows (reverify verifies the first of a key and reports the others);
* materialized rows of two forms: flat (as ``bench.reverify_corpus``) and, for every third task, a
  taskset row whose fields sit in ``task_input.task_data`` (the body is built by flattening it);
* a few rollouts without a materialized row (reverify writes them to the sidecar, unverified).

Rows ``bench.corpus2`` makes unreadable, and integers beyond 64 bits, are left out: NeMo Gym 0.7.0
reads these inputs with orjson and stops on them, and so does reverify (an input error, exit 1).
``bench/reverify.py --corpus 2`` generates it under ``bench/_corpus/``: :func:`write` writes
``materialized_inputs.jsonl``, ``rollouts.jsonl`` and ``bodies.jsonl`` (the ``/verify`` body of each
row reverify sends, in rollout-file order, for a bare client to post).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson

from bench import corpus2
from gymflow.reverify._inputs import build_body

MATERIALIZED = "materialized_inputs.jsonl"
ROLLOUTS = "rollouts.jsonl"
BODIES = "bodies.jsonl"
AVG_BYTES = 4_000
"""``bench.corpus2``'s size target: ``/verify`` bodies of 1.7 to 25 KB, 4.2 KB on average (the mcqa
corpus: about 2 KB)."""
MIX = {"healthy": 0.85, "unhealthy": 0.1, "duplicate": 0.05}
UNMATCHED_SHARE = 0.003
AGENTS = tuple(name for name, _ in corpus2.AGENTS)


def _materialized(record: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    task, rollout = record["_ng_task_index"], record["_ng_rollout_index"]
    keys = {"_ng_task_index": task, "_ng_rollout_index": rollout, "agent_ref": record["agent_ref"]}
    task_data = {
        "expected_answer": "ABCD"[task % 4],
        "options": [{letter: f"option {letter} ({task})"} for letter in "ABCD"],
        "grading_mode": "strict_single_letter_boxed",
        "difficulty": rng.choice((0.25, 1.5e-7, 12345678901234567)),
    }
    params = record["responses_create_params"]
    if task % 3 == 2:
        return {
            "task_id": f"task-{task}",
            "task_input": {"task_data": task_data, "responses_create_params": params},
            **keys,
        }
    return {"responses_create_params": params, **keys, **task_data}


def write(directory: Path, rows: int, seed: int = 0) -> int:
    """Write the three files into ``directory``; the number of rows reverify verifies."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed ^ 0xB0D1E5)
    materialized: dict[tuple[int, int], dict[str, Any]] = {}
    unmatched: set[tuple[int, int]] = set()
    seen: set[tuple[int, int]] = set()
    verified = 0
    with open(directory / ROLLOUTS, "wb") as rollouts, open(directory / BODIES, "wb") as bodies:
        for row in corpus2.iter_rows(rows, seed, AVG_BYTES, MIX, big_int_share=0.0):
            record = row.record
            if record is None or not isinstance(record.get("response"), dict):
                continue
            key = (record["_ng_task_index"], record["_ng_rollout_index"])
            line = row.line
            if key[0] % 3 and "ng_trajectory" in record:
                record = {k: v for k, v in record.items() if k != "ng_trajectory"}
                line = corpus2._serialise(record, row.style)
            rollouts.write(line)
            if rng.random() < 0.005:
                rollouts.write(rng.choice((b"\n", b"  \n", b"\t\r\n")))
            if key not in materialized and key not in unmatched:
                if rng.random() < UNMATCHED_SHARE:
                    unmatched.add(key)
                else:
                    materialized[key] = _materialized(record, rng)
            if key in seen or key in unmatched:
                continue
            seen.add(key)
            bodies.write(orjson.dumps(build_body(materialized[key], record)) + b"\n")
            verified += 1
    with open(directory / MATERIALIZED, "wb") as out:
        out.writelines(orjson.dumps(materialized[key]) + b"\n" for key in sorted(materialized))
    return verified

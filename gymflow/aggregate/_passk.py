"""The opt-in pass@k family (aggregate.md §4): pass@k, pass@1[avg-of-k], majority@k and friends.

Computed the way a resources server's ``compute_metrics`` hook does, over the scored rows of one
group: tasks ascending, each task's rows in rollout order. Scores are ``accuracy`` (the configured
score field) and, with an answer key, ``no_answer``. Percentages are 0-100.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gymflow.aggregate._numbers import sample_std
from gymflow.aggregate._rows import Answer, RowFacts

__all__ = ["highest_k_metrics", "pass_at_k"]

_COMPANIONS = ("/std_dev_across_runs", "/std_err_across_runs", "/avg_sample_std_dev")


def _percent(values: Sequence[float]) -> float:
    # 100 × sum / n, in this order: the rounding the reference's numbers show (W9, W10).
    return 100.0 * sum(values) / len(values)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _pass_at(values: Sequence[float], k: int) -> float:
    if all(value in (0.0, 1.0) for value in values):
        zeros = sum(1 for value in values if value == 0.0)
        if zeros < k:
            return 1.0
        return 1.0 - math.comb(zeros, k) / math.comb(len(values), k)
    return max(values[:k])


def _majority(pairs: Sequence[tuple[Answer, float]]) -> float:
    if not pairs:
        return 0.0
    counts = Counter(pairs)
    top = max(counts.values())
    return _mean([score for (_, score), count in counts.items() if count == top])


def pass_at_k(rows: Sequence[RowFacts], with_answers: bool = False) -> dict[str, Any]:
    """§4 over the scored rows of one group (any order; sorted here by task, then rollout)."""
    tasks: dict[int, list[RowFacts]] = {}
    for row in sorted(rows, key=lambda r: (r.task, r.rollout)):
        tasks.setdefault(row.task, []).append(row)
    if not tasks:
        return {}
    names = ["accuracy", "no_answer"] if with_answers else ["accuracy"]
    scores: dict[str, list[list[float]]] = {name: [] for name in names}
    answers: list[list[Answer]] = []
    for task_rows in tasks.values():
        scores["accuracy"].append([row.score for row in task_rows])
        if with_answers:
            scores["no_answer"].append([1.0 if row.answer is None else 0.0 for row in task_rows])
            answers.append([row.answer for row in task_rows])
    max_k = max(len(task_rows) for task_rows in tasks.values())

    per_sample: dict[str, list[float]] = {}
    for name in names:
        per_sample[name] = [
            _percent([values[i] for values in scores[name] if len(values) > i]) for i in range(max_k)
        ]

    out: dict[str, Any] = {}
    for k in range(1, max_k + 1):
        for name in names:
            table = scores[name]
            eligible = [values for values in table if len(values) >= k]
            if eligible:
                out[f"pass@{k}/{name}"] = _percent([_pass_at(values, k) for values in eligible])
            out[f"pass@1[avg-of-{k}]/{name}"] = _percent([_mean(values[:k]) for values in table])
            if with_answers:
                majority = [
                    _majority(
                        [
                            (answer, score)
                            for answer, score in zip(task_answers[:k], values[:k], strict=True)
                            if answer is not None
                        ]
                    )
                    for task_answers, values in zip(answers, table, strict=True)
                ]
                out[f"majority@{k}/{name}"] = _percent(majority)
            runs = per_sample[name][:k]
            if k >= 2 and len(runs) >= 2:
                std = sample_std(runs)
                out[f"pass@1[avg-of-{k}]/{name}/std_dev_across_runs"] = std
                out[f"pass@1[avg-of-{k}]/{name}/std_err_across_runs"] = std / math.sqrt(len(runs))
            spreads = [sample_std(values[:k]) for values in table if min(len(values), k) >= 2]
            if k >= 2 and spreads:
                out[f"pass@1[avg-of-{k}]/{name}/avg_sample_std_dev"] = _mean(spreads)
    out["per_sample_aggregate"] = per_sample
    return out


def highest_k_metrics(metrics: Mapping[str, Any], pattern: str) -> dict[str, Any]:
    """Entries of ``pattern`` (with ``{k}``, e.g. ``pass@1[avg-of-{k}]``) at the largest k present.

    The three companion suffixes (``/std_dev_across_runs``, ...) are excluded, as servers do when
    they pick headline metrics.
    """
    head, _, tail = pattern.partition("{k}")
    matcher = re.compile(re.escape(head) + r"(\d+)" + re.escape(tail) + r"(/|$)")
    best: int | None = None
    found: dict[int, dict[str, Any]] = {}
    for name, value in metrics.items():
        if name.endswith(_COMPANIONS):
            continue
        match = matcher.match(name)
        if match is None:
            continue
        k = int(match.group(1))
        found.setdefault(k, {})[name] = value
        best = k if best is None else max(best, k)
    return {} if best is None else found[best]

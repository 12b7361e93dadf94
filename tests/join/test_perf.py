"""ng_perf and the join's perf_summary: evidence.md §13 C43-C46, and the CPython 3.12 float sum."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from gymflow.join import JoinStats, join_row_outcome
from gymflow.join._capture_merge import neumaier_sum
from tests.join.helpers import L, bundle, inv, join, jsonl, ref, row, store


def test_c43_perf_disabled_or_no_invocations() -> None:
    files = store(**{"1-0": jsonl(L("c1"))})
    out = join(row(1, 0, ng_agent_observations=bundle(inv("root", ref("c1")))), files, perf=False)
    assert "ng_perf" not in out
    kept = join(row(1, 0, ng_perf={"total_latency_ms": 3, "stale": 1}), files, perf=False)
    assert kept["ng_perf"] == {"total_latency_ms": 3, "stale": 1}  # --no-perf leaves it untouched
    stale = join(row(1, 0, ng_perf={"total_latency_ms": 3}), files)
    assert "ng_perf" not in stale  # no invocation: no perf, and the stale one is deleted
    producer = {
        "task_id": "1",
        "rollout_id": "1-0",
        "invocations": [{"invocation_id": "root"}],
        "tool_calls": [
            {"invocation_id": "ghost", "tool_call_id": "t1"},
            {"invocation_id": "root", "tool_call_id": "t2"},
        ],
    }
    out = join(row(1, 0, ng_trajectory=producer), files)
    assert [t["invocation_id"] for t in out["ng_trajectory"]["tool_calls"]] == ["ghost", "root"]
    assert out["ng_perf"]["num_tool_calls"] == 1


def test_c44_coverage_is_capped() -> None:
    lines = [
        L("c1", usage={"input_tokens": 10, "output_tokens": 1}),
        L("c2", response=None, started=2.0),
        L("c3", usage={"input_tokens": 20, "output_tokens": 2}, started=3.0),
    ]
    out = join(
        row(1, 0, ng_agent_observations=bundle(inv("root", ref("c1"), ref("c2"), ref("c3")))),
        store(**{"1-0": jsonl(*lines)}),
    )
    assert len(out["ng_trajectory"]["turns"]) == 2
    assert out["ng_perf"] == {
        "num_turns": 2,
        "num_tool_calls": 0,
        "token_observability_coverage": 1.0,
        "prompt_tokens": 30,
        "completion_tokens": 3,
    }


def test_latency_comes_from_the_existing_perf_and_keeps_its_position() -> None:
    r = row(1, 0, ng_perf={"total_latency_ms": 12.5}, ng_agent_observations=bundle(inv("root", ref("c1"))))
    out = join(r, store(**{"1-0": jsonl(L("c1"))}))
    assert out["ng_perf"]["total_latency_ms"] == 12.5
    assert list(out)[:3] == ["_ng_task_index", "_ng_rollout_index", "ng_perf"]
    out = join({**r, "ng_perf": {"total_latency_ms": True}}, store(**{"1-0": jsonl(L("c1"))}))
    assert "total_latency_ms" not in out["ng_perf"]


def _stats(perfs: list[Any]) -> dict[str, Any]:
    stats = JoinStats()
    for perf in perfs:
        r = {} if perf is None else {"ng_perf": perf}
        stats.add(join_row_outcome(r, None, perf=False), "x")
    summary = stats.summary()["perf_summary"]
    return summary  # type: ignore[no-any-return]


def test_c45_perf_summary() -> None:
    records = [
        {
            "num_turns": t,
            "token_observability_coverage": c,
            "prompt_tokens": p,
            "completion_tokens": k,
            "total_latency_ms": lat,
        }
        for t, c, p, k, lat in zip(
            [1, 2, 3, 4, 0],
            [1, 0.5, 0, 1, 0],
            [100, 200, 300, 400, 500],
            [10, 30, 30, 40, 50],
            [100, 200, 300, 400, 500],
            strict=True,
        )
    ]
    s = _stats([*records, None])
    assert s["overall_observability_coverage"] == pytest.approx(5 / 6)
    assert s["token_observability_coverage"] == 0.5
    assert (s["mean_prompt_tokens"], s["median_prompt_tokens"], s["total_prompt_tokens"]) == (
        300.0,
        300,
        1500,
    )
    assert s["std_num_turns"] == pytest.approx(math.sqrt(2))
    assert s["p90_num_turns"] == pytest.approx(3.6)
    assert (s["mean_tokens_per_turn"], s["median_tokens_per_turn"]) == (11.25, 10.0)
    assert [s[f"total_latency_{k}_ms"] for k in ("p50", "p90", "p99", "mean")] == pytest.approx(
        [300, 460, 496, 300]
    )


def test_c46_single_record_and_empty() -> None:
    s = _stats([{"num_turns": 3, "cached_prompt_tokens": 7}])
    assert (s["std_num_turns"], s["p90_num_turns"]) == (0.0, 3.0)
    assert (
        s["mean_cached_prompt_tokens"],
        s["median_cached_prompt_tokens"],
        s["total_cached_prompt_tokens"],
    ) == (
        7.0,
        7,
        7,
    )
    assert _stats([]) is None
    assert _stats([None, None]) is None


def _reference_sum(values: list[float]) -> float:
    """CPython 3.12's float loop of ``sum`` (Neumaier), written out independently."""
    total = 0.0 + values[0]
    compensation = 0.0
    for x in values[1:]:
        t = total + x
        compensation += (total - t) + x if abs(total) >= abs(x) else (x - t) + total
        total = t
    return total + compensation if compensation and math.isfinite(compensation) else total


def test_metric_sums_are_compensated_like_python_3_12() -> None:
    rng = random.Random(7)
    for _ in range(200):
        values = [round(rng.uniform(0, 2000), 2) for _ in range(rng.randrange(2, 12))]
        assert neumaier_sum(values) == _reference_sum(values)
    assert neumaier_sum([0.1] * 10) == 1.0  # naive addition gives 0.9999999999999999
    assert neumaier_sum([1, 2, 3]) == 6 and isinstance(neumaier_sum([1, 2]), int)
    assert neumaier_sum([]) == 0
    assert neumaier_sum([1e308, 1e308]) == math.inf

"""aggregate.md §5 worked examples (exact values) and the metric items of the §6 checklist."""

from __future__ import annotations

import math
from array import array

import pytest

from gymflow.aggregate import DuplicateRolloutError, ScoreSpec, group_metrics, highest_k_metrics, pass_at_k
from gymflow.aggregate._numbers import median, pairwise_sum, percentiles, sample_std, t975
from gymflow.aggregate._rows import RowFacts
from gymflow.perf_summary import perf_summary

from .rows import W1, facts, row, usage


def metrics(rows, **kwargs):  # type: ignore[no-untyped-def]
    return group_metrics(facts(rows, kwargs.get("pass_majority")), **kwargs)


def test_17_w1_agent_key_group_repeats_cross_repeat() -> None:
    m = metrics(W1)
    a = m.agent_metrics
    assert (a["mean/reward"], a["mean/correct"], a["mean/output_tokens"]) == (0.75, 0.75, 5.5)
    assert (a["max/reward"], a["max/correct"], a["max/output_tokens"]) == (1.0, 1.0, 7.0)
    assert (a["min/reward"], a["min/correct"], a["min/output_tokens"]) == (0.0, 0.0, 4.0)
    assert (a["median/reward"], a["median/correct"], a["median/output_tokens"]) == (1.0, 1.0, 5.5)
    assert (a["std/reward"], a["std/correct"]) == (0.5, 0.5)
    assert a["std/output_tokens"] == 1.2909944487358056
    for field in ("reward", "correct"):
        assert a[f"mean_across_repeats/mean/{field}"] == 0.75
        assert a[f"median_across_repeats/mean/{field}"] == 0.75
        assert a[f"std_across_repeats/mean/{field}"] == 0.3535533905932738
        assert a[f"min_across_repeats/mean/{field}"] == 0.5
        assert a[f"max_across_repeats/mean/{field}"] == 1.0
        assert a[f"se_across_repeats/mean/{field}"] == 0.25
        assert a[f"ci_low_95_across_repeats/mean/{field}"] == -2.4265511840436735
        assert a[f"ci_high_95_across_repeats/mean/{field}"] == 3.9265511840436735
    assert a["mean_across_repeats/mean/output_tokens"] == 5.5
    assert a["std_across_repeats/mean/output_tokens"] == 1.4142135623730951
    assert (a["min_across_repeats/mean/output_tokens"], a["max_across_repeats/mean/output_tokens"]) == (
        4.5,
        6.5,
    )
    assert a["se_across_repeats/mean/output_tokens"] == 1.0
    assert a["ci_low_95_across_repeats/mean/output_tokens"] == -7.206204736174694
    assert a["ci_high_95_across_repeats/mean/output_tokens"] == 18.206204736174694
    assert a["num_repeats"] == 2
    assert m.key_metrics == {"mean/reward": 0.75, "mean/correct": 0.75, "mean/output_tokens": 5.5}
    g0 = m.group_level_metrics[0]
    assert (g0["mean/reward"], g0["std/reward"]) == (0.5, 0.7071067811865476)
    assert (g0["mean/output_tokens"], g0["std/output_tokens"]) == (5.0, 1.4142135623730951)
    assert g0["num_rollouts"] == 2
    assert g0["rollout_infos"] == [
        {
            "rollout_id": "0:0",
            "_ng_task_index": 0,
            "_ng_rollout_index": 0,
            "reward": 1.0,
            "output_tokens": 4,
            "correct": 1,
        },
        {
            "rollout_id": "0:1",
            "_ng_task_index": 0,
            "_ng_rollout_index": 1,
            "reward": 0.0,
            "output_tokens": 6,
            "correct": 0,
        },
    ]
    r0, r1 = m.repeat_level_metrics
    assert (r0["sample_count"], r0["missing_count"]) == (2, 0)
    assert (r0["mean/reward"], r0["std/reward"], r0["sem/reward"], r0["p25/reward"]) == (1.0, 0.0, 0.0, 1.0)
    assert (r0["ci_low_95/reward"], r0["ci_high_95/reward"]) == (1.0, 1.0)
    assert (r0["mean/output_tokens"], r0["std/output_tokens"], r0["sem/output_tokens"]) == (
        4.5,
        0.7071067811865476,
        0.5,
    )
    assert (r0["p25/output_tokens"], r0["p75/output_tokens"]) == (4.25, 4.75)
    assert (r0["ci_low_95/output_tokens"], r0["ci_high_95/output_tokens"]) == (
        -1.853102368087347,
        10.853102368087347,
    )
    assert (r1["mean/reward"], r1["sem/reward"], r1["p25/reward"], r1["p75/reward"]) == (0.5, 0.5, 0.25, 0.75)
    assert (r1["ci_low_95/reward"], r1["ci_high_95/reward"]) == (-5.853102368087347, 6.853102368087347)
    assert any(w.startswith("Standard error is 0 (all 2 values are identical)") for w in m.warnings)


def test_16_empty_input() -> None:
    m = group_metrics([])
    assert m.blocks() == {
        "agent_metrics": {},
        "key_metrics": {},
        "group_level_metrics": [],
        "repeat_level_metrics": [],
    }
    assert m.perf_summary is None


def test_18_w2_masking_and_all_masked() -> None:
    m = metrics([row(0, 0, 1.0), row(0, 1, 0.0, mask_sample=True), row(1, 0, 0.0, mask_sample=True)])
    coverage = {
        "coverage/measured_rollouts": 1,
        "coverage/masked_rollouts": 2,
        "coverage/measured_tasks": 1,
        "coverage/fully_masked_tasks": 1,
    }
    assert m.agent_metrics == {
        "mean/reward": 1.0,
        "max/reward": 1.0,
        "min/reward": 1.0,
        "median/reward": 1.0,
        "std/reward": 0.0,
        **coverage,
        "num_repeats": 2,
    }
    assert m.key_metrics == {"mean/reward": 1.0, **coverage}
    assert [(g["_ng_task_index"], g["num_rollouts"]) for g in m.group_level_metrics] == [(0, 1)]
    assert m.repeat_level_metrics == []
    masked = metrics(
        [row(0, 0, 1.0, mask_sample=True), row(0, 1, 0.0, mask_sample=True), row(1, 0, 0.0, mask_sample=True)]
    )
    only = {
        "coverage/measured_rollouts": 0,
        "coverage/masked_rollouts": 3,
        "coverage/measured_tasks": 0,
        "coverage/fully_masked_tasks": 2,
    }
    assert masked.agent_metrics == only and masked.key_metrics == only
    assert masked.group_level_metrics == [] and masked.repeat_level_metrics == []


def test_19_mask_sample_never_a_metric() -> None:
    m = metrics([row(0, 0, 1.0, mask_sample=False), row(0, 1, 0.0, mask_sample=False)])
    assert not any("mask_sample" in key for key in m.agent_metrics)
    assert not any("mask_sample" in key for info in m.group_level_metrics[0]["rollout_infos"] for key in info)


def test_20_w3_single_row() -> None:
    m = metrics([row(7, 0, 0.5)])
    a = m.agent_metrics
    assert [a[f"{s}/reward"] for s in ("mean", "max", "min", "median")] == [0.5] * 4
    assert a["std/reward"] == 0.0 and a["num_repeats"] == 1
    assert m.group_level_metrics[0]["_ng_task_index"] == 7
    assert m.repeat_level_metrics == []


def test_21_w4_missing_repeat_row() -> None:
    m = metrics([row(0, 0, 1), row(1, 0, 0), row(2, 0, 1), row(0, 1, 1), row(1, 1, 1)])
    a = m.agent_metrics
    assert (a["mean/reward"], a["std/reward"], a["median/reward"]) == (0.8, 0.4472135954999579, 1.0)
    r0, r1 = m.repeat_level_metrics
    assert (r0["sample_count"], r0["missing_count"]) == (3, 0)
    assert (r0["mean/reward"], r0["median/reward"], r0["std/reward"]) == (
        0.6666666666666666,
        1.0,
        0.5773502691896258,
    )
    assert (r0["sem/reward"], r0["p25/reward"], r0["p75/reward"]) == (0.33333333333333337, 0.5, 1.0)
    assert (r0["ci_low_95/reward"], r0["ci_high_95/reward"]) == (-0.7675509099164876, 2.100884243249821)
    assert (r1["sample_count"], r1["missing_count"], r1["mean/reward"]) == (2, 1, 1.0)
    assert (r1["ci_low_95/reward"], r1["ci_high_95/reward"]) == (1.0, 1.0)
    assert a["mean_across_repeats/mean/reward"] == 0.8333333333333333
    assert a["std_across_repeats/mean/reward"] == 0.23570226039551587
    assert a["se_across_repeats/mean/reward"] == 0.16666666666666669
    assert a["ci_low_95_across_repeats/mean/reward"] == -1.284367456029116  # t(1)
    assert a["ci_high_95_across_repeats/mean/reward"] == 2.9510341226957824
    assert m.group_level_metrics[2]["std/reward"] == 0.0
    assert any(w.startswith("Standard error is 0") for w in m.warnings)
    assert any(
        w.startswith(
            "1 repeat(s) are missing rollouts for some tasks (e.g. agent='agent', _ng_rollout_index=1, missing_count=1)."  # noqa: E501
        )
        for w in m.warnings
    )


def test_22_w5_equal_repeat_means() -> None:
    m = metrics([row(0, 0, 1), row(1, 0, 0), row(0, 1, 0), row(1, 1, 1)])
    a = m.agent_metrics
    assert a["std/reward"] == 0.5773502691896257
    for r in m.repeat_level_metrics:
        assert r["mean/reward"] == 0.5
        assert (r["ci_low_95/reward"], r["ci_high_95/reward"]) == (-5.853102368087347, 6.853102368087347)
    assert (a["std_across_repeats/mean/reward"], a["se_across_repeats/mean/reward"]) == (0.0, 0.0)
    assert (a["ci_low_95_across_repeats/mean/reward"], a["ci_high_95_across_repeats/mean/reward"]) == (
        0.5,
        0.5,
    )
    assert any(w.startswith("Standard error is 0 (all 2 values") for w in m.warnings)


def test_23_w6_three_repeats() -> None:
    m = metrics([row(0, 0, 1), row(0, 1, 1), row(0, 2, 0), row(1, 0, 0), row(1, 1, 1), row(1, 2, 0)])
    a = m.agent_metrics
    assert (a["mean/reward"], a["std/reward"]) == (0.5, 0.5477225575051661)
    g0 = m.group_level_metrics[0]
    assert (g0["mean/reward"], g0["median/reward"], g0["std/reward"]) == (
        0.6666666666666666,
        1.0,
        0.5773502691896258,
    )
    assert (a["mean_across_repeats/mean/reward"], a["std_across_repeats/mean/reward"]) == (0.5, 0.5)
    se = a["se_across_repeats/mean/reward"]
    assert se == 0.2886751345948129
    assert a["ci_low_95_across_repeats/mean/reward"] == -0.7420688558751651 == 0.5 - 4.302652729749462 * se
    assert a["ci_high_95_across_repeats/mean/reward"] == 1.7420688558751651


def test_24_w7_sparse_field() -> None:
    m = metrics([row(0, 0, 1, x=3), row(0, 1, 0), row(1, 0, 1)])
    a = m.agent_metrics
    assert [a[f"{s}/x"] for s in ("mean", "max", "min", "median")] == [3.0] * 4
    assert "std/x" not in a and a["std/reward"] == 0.5773502691896258
    g0, g1 = m.group_level_metrics
    assert g0["mean/x"] == 3.0 and "std/x" not in g0
    assert not any(key.endswith("/x") for key in g1)
    r0, r1 = m.repeat_level_metrics
    assert (r0["mean/x"], r0["std/x"], r0["sem/x"]) == (3.0, 0.0, 0.0)
    assert "ci_low_95/x" not in r0 and not any(key.endswith("/x") for key in r1)
    assert a["mean_across_repeats/mean/x"] == 3.0
    assert (a["std_across_repeats/mean/x"], a["se_across_repeats/mean/x"]) == (0.0, 0.0)
    assert "ci_low_95_across_repeats/mean/x" not in a


def test_25_w8_usage_override_and_rollout_infos_precedence() -> None:
    w8 = {
        "reward": 1.0,
        "output_tokens": 99,
        "score": None,
        "label": "ok",
        "_private": 5,
        "response": usage(4),
    }
    w8["response"] = {"usage": {"output_tokens": 4}}
    m = metrics([w8])
    assert m.agent_metrics["mean/output_tokens"] == 4.0
    assert not any(k.endswith(("/score", "/label", "/_private")) for k in m.agent_metrics)
    g = m.group_level_metrics[0]
    assert g["_ng_task_index"] == 0
    assert g["rollout_infos"] == [
        {"rollout_id": "0:0", "_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0, "output_tokens": 99}
    ]


def test_26_only_numbers_and_booleans_count() -> None:
    m = metrics(
        [row(0, 0, 1.0, s="x", n=None, o={"a": 1}, l=[1], _hidden=2, flag=True), row(0, 1, 0.0, flag=False)]
    )
    fields = {key.split("/", 1)[1] for key in m.agent_metrics if key.startswith("mean/")}
    assert fields == {"reward", "flag"}
    assert m.agent_metrics["mean/flag"] == 0.5
    assert m.group_level_metrics[0]["rollout_infos"][0]["flag"] == 1


@pytest.mark.parametrize(
    "rows",
    [[row(0, 0, 1.0), row(0, 0, 0.0)], [row(0, 0, 1.0), row(0, 0, 0.0, mask_sample=True)]],
    ids=["two-scored", "scored-and-masked"],
)
def test_27_duplicate_key(rows) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DuplicateRolloutError, match=r"^Duplicate rollout key \(0, 0\) in group 'agent'$"):
        metrics(rows)


def test_28_key_metrics_are_mean_only_plus_coverage() -> None:
    m = metrics([*W1, row(2, 0, 0.0, mask_sample=True)])
    assert all(k.startswith(("mean/", "coverage/")) for k in m.key_metrics)
    assert not any(k.startswith("mean_across_repeats/") for k in m.key_metrics)
    assert "coverage/masked_rollouts" in m.key_metrics


def test_29_num_repeats_counts_masked_rollout_indices() -> None:
    m = metrics([row(0, 0, 1.0), row(0, 5, 0.0, mask_sample=True)])
    assert m.agent_metrics["num_repeats"] == 2


def test_30_ordering() -> None:
    m = metrics([row(1, 1, 1, b=1), row(0, 1, 0, a=2), row(1, 0, 1, b=2), row(0, 0, 1, a=1)])
    assert [g["_ng_task_index"] for g in m.group_level_metrics] == [0, 1]
    assert [r["_ng_rollout_index"] for r in m.repeat_level_metrics] == [0, 1]
    stats = [k for k in m.repeat_level_metrics[0] if k.startswith("mean/")]
    assert stats == ["mean/a", "mean/b", "mean/reward"]


def test_31_group_sample_and_counts() -> None:
    for g in metrics(W1).group_level_metrics:
        assert g["sample"] == {"agent_ref": {"name": "agent"}}
        assert g["expected_num_rollouts"] == g["num_rollouts"] == 2
        assert (g["missing_num_rollouts"], g["reward_profile_completion_pct"]) == (0, 100.0)


def test_32_only_primary_columns_get_across_repeats() -> None:
    m = metrics([row(0, 0, 1, score_ci_lower=0.1), row(0, 1, 0, score_ci_lower=0.2)])
    across = {k.split("/", 1)[1] for k in m.agent_metrics if "_across_repeats/" in k}
    assert across == {"mean/reward"}
    assert m.agent_metrics["mean/score_ci_lower"] == 0.15000000000000002
    from gymflow.aggregate._stats import is_primary_metric

    assert not is_primary_metric("score_ci_lower") and not is_primary_metric("max/reward")
    assert is_primary_metric("mean/reward")


W11 = [
    {
        "num_turns": 1,
        "token_observability_coverage": 1.0,
        "prompt_tokens": 100,
        "cached_prompt_tokens": 0,
        "completion_tokens": 10,
        "reasoning_tokens": 2,
        "total_latency_ms": 100,
    },
    {
        "num_turns": 2,
        "token_observability_coverage": 1.0,
        "prompt_tokens": 200,
        "cached_prompt_tokens": 50,
        "completion_tokens": 30,
        "total_latency_ms": 200,
    },
    {"num_turns": 3, "token_observability_coverage": 0.0, "total_latency_ms": 300},
    {"num_turns": 0, "token_observability_coverage": 0.5, "completion_tokens": 5, "total_latency_ms": 400},
    None,
]


def test_33_w11_perf_summary() -> None:
    assert perf_summary(W11) == {
        "overall_observability_coverage": 0.8,
        "token_observability_coverage": 0.6,
        "mean_prompt_tokens": 150.0,
        "median_prompt_tokens": 150.0,
        "total_prompt_tokens": 300,
        "mean_cached_prompt_tokens": 25.0,
        "median_cached_prompt_tokens": 25.0,
        "total_cached_prompt_tokens": 50,
        "mean_completion_tokens": 15.0,
        "median_completion_tokens": 10,
        "total_completion_tokens": 45,
        "mean_reasoning_tokens": 2.0,
        "median_reasoning_tokens": 2,
        "total_reasoning_tokens": 2,
        "mean_num_turns": 1.5,
        "median_num_turns": 1.5,
        "std_num_turns": 1.118033988749895,
        "min_num_turns": 0,
        "p90_num_turns": 2.7,
        "max_num_turns": 3,
        "mean_tokens_per_turn": 12.5,
        "median_tokens_per_turn": 12.5,
        "total_latency_p50_ms": 250.0,
        "total_latency_p90_ms": 370.0,
        "total_latency_p99_ms": 397.0,
        "total_latency_mean_ms": 250.0,
    }
    assert perf_summary([None, None]) is None and perf_summary([]) is None
    # The zero-turn record is excluded from tokens per turn only.
    assert perf_summary([{"num_turns": 0, "completion_tokens": 5}])["mean_num_turns"] == 0.0  # type: ignore[index]
    assert "mean_tokens_per_turn" not in perf_summary([{"num_turns": 0, "completion_tokens": 5}])  # type: ignore[operator]


def test_33_perf_summary_from_all_rows_even_masked() -> None:
    from gymflow.perf_summary import PerfAccumulator

    acc = PerfAccumulator()
    for item in W11:
        acc.add(item)
    m = group_metrics(facts([row(0, 0, 0.0, mask_sample=True)]), perf=acc.result())
    assert m.perf_summary == perf_summary(W11)


def test_34_std_num_turns_is_population() -> None:
    summary = perf_summary([{"num_turns": n} for n in (1, 2, 3, 0)])
    assert summary is not None and summary["std_num_turns"] == 1.118033988749895


W9_TASKS: dict[int, tuple[list[int], list[str | None]]] = {
    0: ([1, 1, 1, 1], ["A", "A", "A", "A"]),
    1: ([0, 0, 0, 0], ["B", "C", "B", None]),
    2: ([1, 0, 1, 0], ["A", "B", "A", "B"]),
}


def w9_rows() -> list[dict]:  # type: ignore[type-arg]
    return [
        row(t, i, r, extracted_answer=a)
        for t, (rs, ans) in W9_TASKS.items()
        for i, (r, a) in enumerate(zip(rs, ans, strict=True))
    ]


def test_35_w9_pass_at_k_family() -> None:
    m = pass_at_k(facts(w9_rows(), ScoreSpec(answer_key="extracted_answer")), with_answers=True)
    expected = {
        "pass@1/accuracy": 50.0,
        "pass@1[avg-of-1]/accuracy": 66.66666666666667,
        "majority@1/accuracy": 66.66666666666667,
        "pass@2/accuracy": 61.111111111111114,
        "pass@1[avg-of-2]/accuracy": 50.0,
        "majority@2/accuracy": 50.0,
        "pass@3/accuracy": 66.66666666666667,
        "pass@1[avg-of-3]/accuracy": 55.55555555555555,
        "majority@3/accuracy": 66.66666666666667,
        "pass@4/accuracy": 66.66666666666667,
        "pass@1[avg-of-4]/accuracy": 50.0,
        "majority@4/accuracy": 50.0,
        "pass@1/no_answer": 8.333333333333334,
        "pass@2/no_answer": 16.666666666666668,
        "pass@3/no_answer": 25.0,
        "pass@4/no_answer": 33.333333333333336,
        "pass@1[avg-of-1]/no_answer": 0.0,
        "pass@1[avg-of-2]/no_answer": 0.0,
        "pass@1[avg-of-3]/no_answer": 0.0,
        "pass@1[avg-of-4]/no_answer": 8.333333333333334,
        "pass@1[avg-of-2]/accuracy/std_dev_across_runs": 23.570226039551585,
        "pass@1[avg-of-2]/accuracy/std_err_across_runs": 16.666666666666668,
        "pass@1[avg-of-3]/accuracy/std_dev_across_runs": 19.245008972987527,
        "pass@1[avg-of-3]/accuracy/std_err_across_runs": 11.111111111111112,
        "pass@1[avg-of-4]/accuracy/std_dev_across_runs": 19.245008972987527,
        "pass@1[avg-of-4]/accuracy/std_err_across_runs": 9.622504486493764,
        "pass@1[avg-of-4]/no_answer/std_dev_across_runs": 16.666666666666668,
        "pass@1[avg-of-4]/no_answer/std_err_across_runs": 8.333333333333334,
        "pass@1[avg-of-2]/accuracy/avg_sample_std_dev": 0.23570226039551587,
        "pass@1[avg-of-3]/accuracy/avg_sample_std_dev": 0.1924500897298753,
        "pass@1[avg-of-4]/accuracy/avg_sample_std_dev": 0.19245008972987523,
    }
    for k in range(1, 5):
        expected[f"majority@{k}/no_answer"] = 0.0
    for name, value in expected.items():
        assert m[name] == value, name
    assert m["per_sample_aggregate"] == {
        "accuracy": [66.66666666666667, 33.333333333333336, 66.66666666666667, 33.333333333333336],
        "no_answer": [0.0, 0.0, 0.0, 33.333333333333336],
    }
    plain = pass_at_k(facts(w9_rows(), ScoreSpec()))
    assert not any(k.startswith("majority@") or "no_answer" in k for k in plain)
    assert all(plain[k] == m[k] for k in plain if k != "per_sample_aggregate")


def test_36_w10_continuous_scores() -> None:
    rows = [row(0, i, r) for i, r in enumerate([0.2, 0.9, 0.5])] + [
        row(1, i, r) for i, r in enumerate([0.4, 0.1])
    ]
    m = pass_at_k(facts(rows, ScoreSpec()))
    assert (m["pass@1/accuracy"], m["pass@2/accuracy"], m["pass@3/accuracy"]) == (
        30.000000000000004,
        65.0,
        90.0,
    )
    assert (m["pass@1[avg-of-2]/accuracy"], m["pass@1[avg-of-3]/accuracy"]) == (40.0, 39.166666666666664)
    assert m["per_sample_aggregate"] == {"accuracy": [30.000000000000004, 50.0, 50.0]}
    assert m["pass@1[avg-of-2]/accuracy/std_dev_across_runs"] == 14.14213562373095
    assert m["pass@1[avg-of-2]/accuracy/std_err_across_runs"] == 9.999999999999998
    assert m["pass@1[avg-of-3]/accuracy/std_dev_across_runs"] == 11.547005383792513
    assert m["pass@1[avg-of-3]/accuracy/std_err_across_runs"] == 6.666666666666666


def test_37_majority_tie_and_all_null() -> None:
    spec = ScoreSpec(answer_key="answer")
    tie = pass_at_k(facts([row(0, 0, 1, answer="A"), row(0, 1, 0, answer="B")], spec), with_answers=True)
    assert tie["majority@2/accuracy"] == 50.0
    none = pass_at_k(facts([row(0, 0, 1, answer=None), row(0, 1, 1)], spec), with_answers=True)
    assert none["majority@2/accuracy"] == 0.0


def test_38_highest_k_selection() -> None:
    m = pass_at_k(facts(w9_rows(), ScoreSpec()))
    assert highest_k_metrics(m, "pass@1[avg-of-{k}]/accuracy") == {"pass@1[avg-of-4]/accuracy": 50.0}
    m2 = pass_at_k(facts(w9_rows(), ScoreSpec(answer_key="extracted_answer")), with_answers=True)
    assert set(highest_k_metrics(m2, "pass@{k}")) == {"pass@4/accuracy", "pass@4/no_answer"}


def test_41_pass_majority_merged_into_agent_metrics() -> None:
    spec = ScoreSpec(answer_key="extracted_answer")
    m = group_metrics(facts(w9_rows(), spec), pass_majority=spec)
    assert m.agent_metrics["pass@2/accuracy"] == 61.111111111111114
    assert m.agent_metrics["majority@3/accuracy"] == 66.66666666666667
    keys = list(m.agent_metrics)
    assert keys[-1] == "num_repeats" and keys.index("pass@1/accuracy") > keys.index("mean/reward")
    assert "pass@1/accuracy" not in m.key_metrics


def test_numbers_match_numpy_rounding() -> None:
    import random

    import numpy as np  # a test dependency: missing numpy fails, it does not skip

    rng = random.Random(3)
    for n in (1, 7, 8, 9, 127, 128, 129, 1000, 5000):
        values = [rng.random() * 10 ** rng.randint(-3, 4) for _ in range(n)]
        assert pairwise_sum(values) == float(np.sum(np.array(values)))
        if n > 1:
            assert sample_std(values) == float(np.std(np.array(values), ddof=1))
        quantiles = (0.25, 0.5, 0.75, 0.9, 0.99)
        expected = [float(np.percentile(np.array(values), 100 * q)) for q in quantiles]
        assert percentiles(array("d", values), quantiles) == percentiles(values, quantiles) == expected
        assert median(array("d", values)) == median(values) == float(np.median(np.array(values)))


def test_t_quantiles() -> None:
    assert [t975(df) for df in (1, 2, 3, 4)] == [
        12.706204736174694,
        4.302652729749462,
        3.1824463052837078,
        2.7764451051977934,
    ]
    from scipy import stats  # a test dependency: missing scipy fails, it does not skip

    for df in (5, 30, 999, 1000, 1001, 5000, 100000):
        assert math.isclose(t975(df), float(stats.t.ppf(0.975, df)), rel_tol=4e-15)


def test_row_set_statistics_match_a_zero_filled_numpy_column() -> None:
    """pandas reduces a column holding 0.0 for absent values: same sums, for small and large sets."""
    import random

    import numpy as np  # a test dependency: missing numpy fails, it does not skip

    from gymflow.aggregate._columns import column_statistics, survey
    from gymflow.aggregate._stats import set_statistics

    rng = random.Random(7)
    for n in (1, 2, 5, 7, 8, 9, 40, 300):
        rows = []
        for i in range(n):
            extra = {"x": rng.random() * 100} if rng.random() < 0.6 else {}
            rows.append(row(i % 3, i, rng.random(), tokens=rng.randint(0, 999), **extra))
        rows.sort(key=lambda r: (r["_ng_task_index"], r["_ng_rollout_index"]))
        facts_ = facts(rows)
        gathered = survey(facts_)
        fields, integral = gathered.fields, gathered.integral
        stats = set_statistics(facts_, fields, integral)
        if n >= 8:
            assert column_statistics(gathered) == stats
        for name in fields:
            present = np.array([name in r for r in rows])
            filled = np.array([float(r.get(name, 0.0)) for r in rows])
            count = int(present.sum())
            if not count:
                continue
            average = float(np.sum(filled)) / count
            assert stats[f"mean/{name}"] == average
            if count > 1:
                squares = np.where(present, (average - filled) ** 2, 0.0)
                assert stats[f"std/{name}"] == math.sqrt(float(np.sum(squares)) / (count - 1))


def _repeat_columns(rows: list[RowFacts]) -> dict[str, object]:
    """The §3.5 columns of one repeat, from its rows themselves (fields sorted by name)."""
    from gymflow.aggregate._stats import repeat_statistics

    values: dict[str, list[float]] = {}
    for f in rows:
        for name, value in zip(f.field_names, f.field_values, strict=True):
            values.setdefault(name, []).append(float(value))
    return {k: v for name in sorted(values) for k, v in repeat_statistics(name, values[name], []).items()}


@pytest.mark.parametrize("chunk", [None, 7], ids=["in-memory", "spilled"])
def test_columns_equal_the_row_set_statistics_and_repeats(
    chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group statistics from columns (one pass, no row held) are those of the rows: sparse
    and mixed fields, integers beyond a float's precision, masked rows, uneven repeats; with the
    columns in memory, and written to their scratch files 7 values at a time."""
    import random

    from gymflow.aggregate import _columns
    from gymflow.aggregate._columns import column_statistics, survey

    if chunk is not None:
        monkeypatch.setattr(_columns, "CHUNK", chunk)
    from gymflow.aggregate._stats import set_statistics

    rng = random.Random(11)
    for n in (8, 9, 50, 400):
        rows = []
        for task in range(n):
            for rollout in range(rng.randint(1, 3)):
                extra: dict[str, object] = {}
                if rng.random() < 0.5:
                    extra["x"] = rng.choice([1, 2.5, -0.0, 2**60 + rng.randint(0, 9)])
                if rng.random() < 0.7 or n == 50:  # at 50 rows: in every row, an integer field
                    extra["big"] = 2**62 + rng.randint(0, 99)
                if rng.random() < 0.1:
                    extra["mask_sample"] = True
                rows.append(
                    row(
                        task,
                        rollout,
                        rng.choice([0.0, 1.0, True, 3]),
                        **extra,
                        response=usage(rng.randint(0, 9)),
                    )
                )
        facts_ = facts(rows)
        scored = [f for f in facts_ if not f.masked]
        gathered = survey(scored)
        assert (chunk is not None and len(scored) >= chunk) is any(
            column.spilled is not None for column in gathered.columns.values()
        )
        assert column_statistics(gathered) == set_statistics(scored, gathered.fields, gathered.integral)
        assert {"x", "big"} <= set(gathered.fields)
        assert ("big" in gathered.integral) is (n == 50)
        m = group_metrics(facts_)
        by_rollout: dict[int, list] = {}
        for f in scored:
            by_rollout.setdefault(f.rollout, []).append(f)
        for entry in m.repeat_level_metrics:
            same = by_rollout[entry["_ng_rollout_index"]]
            assert {k: v for k, v in entry.items() if "/" in k} == _repeat_columns(same)
            assert entry["sample_count"] == len(same)
        assert [g["num_rollouts"] for g in m.group_level_metrics] == [
            len(v)
            for _, v in sorted({f.task: [g for g in scored if g.task == f.task] for f in scored}.items())
        ]


@pytest.mark.parametrize("chunk", [None, 5], ids=["in-memory", "spilled"])
def test_runs_of_one_layout_equal_the_row_set_statistics_and_repeats(
    chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Long runs of rows with the same fields go to the columns a run at a time (3 rows a run
    here): a field that first appears in the middle of the group, an integer beyond a float's
    precision in the middle of a run, equal field-name tuples that are not the same object, a
    field absent from the last rows; the statistics and repeats are those of the rows."""
    from gymflow.aggregate import _columns
    from gymflow.aggregate._columns import column_statistics, survey
    from gymflow.aggregate._stats import set_statistics

    monkeypatch.setattr(_columns, "RUN_ROWS", 3)
    if chunk is not None:
        monkeypatch.setattr(_columns, "CHUNK", chunk)
    rows = []
    for task in range(12):
        for rollout in range(3):
            place = task * 3 + rollout
            extra: dict[str, object] = {"tokens": place * 1.5 + 0.25, "count": place}
            if place == 20:
                extra["count"] = 2**60 + 1  # its max prints exactly: an integer in every row
            if place >= 10:
                extra["late"] = place % 4
            if place == 17:
                extra["late"] = 2**60 + 3
            if place >= 33:
                del extra["tokens"]
            rows.append(row(task, rollout, float(place % 2), **extra, response=usage(place)))
    facts_ = facts(rows)
    for index, fact in enumerate(facts_):  # equal name tuples, each its own object
        if index % 2:
            object.__setattr__(fact, "field_names", tuple(list(fact.field_names)))
    gathered = survey(facts_)
    assert gathered.rows == len(facts_) and gathered.tasks == 12
    assert column_statistics(gathered) == set_statistics(facts_, gathered.fields, gathered.integral)
    assert "late" in gathered.fields and "late" not in gathered.integral  # absent from the first rows
    assert "count" in gathered.integral and column_statistics(gathered)["max/count"] == 2**60 + 1
    m = group_metrics(facts_)
    for entry in m.repeat_level_metrics:
        same = [f for f in facts_ if f.rollout == entry["_ng_rollout_index"]]
        assert {k: v for k, v in entry.items() if "/" in k} == _repeat_columns(same)


@pytest.mark.parametrize(
    "rows",
    [
        W1,
        [row(0, 0, 1.0), row(0, 1, 0.0, mask_sample=True), row(1, 0, 0.0, mask_sample=True)],
        [*W1, row(2, 0, 0.0, mask_sample=True), row(3, 0, 1.0), row(3, 1, 0.5), row(3, 2, 0.25)],
        [
            row(task, rollout, (task * rollout) % 3 / 2)
            for task in range(9)
            for rollout in range(task % 4 + 1)
        ],
    ],
)
def test_the_rollouts_task_entries_cover_are_counted_without_making_them(rows) -> None:  # type: ignore[no-untyped-def]
    from gymflow.aggregate._metrics import TaskEntries
    from gymflow.aggregate._metrics_reading import rollouts_covered

    entry = {"group_level_metrics": metrics(rows).group_level_metrics}
    assert isinstance(entry["group_level_metrics"], TaskEntries)
    made = {"group_level_metrics": list(entry["group_level_metrics"])}
    assert rollouts_covered(entry) == rollouts_covered(made) == sum(not r.get("mask_sample") for r in rows)

"""Issue 18: a malformed 200 answer from /verify is a ``verify_invalid_response`` failure row, never a
scored row (reverify.md §3.10 point 5): counted in the coverage lines, retried by ``--resume``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.reverify.cases import Case, case_fixture, key, read_jsonl  # noqa: F401

pytestmark = pytest.mark.timeout(60)

SHAPES: list[tuple[str, dict[str, Any], str]] = [
    ("string", {"kind": "ok", "extra": {"reward": "1.0"}}, '`reward` "1.0" (a string), not a number'),
    ("null", {"kind": "ok", "extra": {"reward": None}}, "`reward` null (null), not a number"),
    ("bool", {"kind": "ok", "extra": {"reward": True}}, "`reward` true (a boolean), not a number"),
    ("missing", {"kind": "ok", "remove": ["reward"]}, "an answer without `reward`"),
    ("nan", {"kind": "raw", "body": '{"reward": NaN}'}, "a body that is not valid JSON"),
    ("inf", {"kind": "raw", "body": '{"reward": 1e999}'}, "a body that is not valid JSON"),
    ("no_response", {"kind": "ok", "remove": ["response"]}, "an answer without `response`"),
    (
        "params_not_object",
        {"kind": "ok", "extra": {"responses_create_params": "x"}},
        '`responses_create_params` "x", not an object',
    ),
    (
        "mask_string",
        {"kind": "ok", "extra": {"mask_sample": "false"}},
        '`mask_sample` "false", not a boolean',
    ),
]


@pytest.mark.parametrize(("name", "behaviour", "reason"), SHAPES, ids=[s[0] for s in SHAPES])
def test_malformed_answer_is_a_failure_row(
    case: Case, name: str, behaviour: dict[str, Any], reason: str
) -> None:
    case.server.set((0, 1), **behaviour)
    outcome = case.run()
    assert outcome.code == 0, outcome
    rows = case.out_rows()
    assert (0, 1) not in {key(r) for r in rows} and len(rows) == 8
    [failure] = read_jsonl(case.path("out_failures.jsonl"))
    assert key(failure) == (0, 1)
    assert failure["_ng_failure_class"] == "verify_invalid_response"
    assert failure["_ng_failure_http_status"] == 200 and failure["_ng_failure_attempts"] == 1
    assert reason in failure["_ng_failure_message"], failure["_ng_failure_message"]
    assert failure["_ng_failure_response_body"]  # the answer as the server sent it
    assert "reward" not in failure and "_ng_reverify_key" in failure
    assert any("class=verify_invalid_response" in line for line in outcome.lines)
    assert (
        "Rollouts missing from the score: 1 of 9 materialized (1 verify_invalid_response routed this run; "
        f"see {case.path('out_failures.jsonl')})"
    ) in outcome.lines
    assert "Metrics cover: 8 of 9 rollouts" in outcome.lines
    # the aggregate is over the 8 scored rows only (6 of them correct)
    assert case.metrics()[0]["agent_metrics"]["mean/reward"] == pytest.approx(6 / 8)


def test_resume_retries_a_malformed_answer(case: Case) -> None:
    case.server.set((2, 0), kind="ok", extra={"reward": "1.0"})
    assert case.run().code == 0
    case.server.reset()  # the server now answers well
    outcome = case.run("--resume", write=False)
    assert outcome.code == 0, outcome
    assert "- 1 rows that still need to be run" in outcome.lines
    assert [tuple(e["key"]) for e in case.server.log("/verify")] == [(2, 0)]
    rows = case.out_rows()
    assert sorted(key(r) for r in rows) == sorted(key(r) for r in case.rollouts)
    assert all(isinstance(r["reward"], float) for r in rows)
    assert case.metrics()[0]["agent_metrics"]["mean/reward"] == 0.7777777777777778


def test_judge_failure_without_reward_stays_a_judge_failure(case: Case) -> None:
    # only rows that would be scored are checked: a failure the server reports keeps its own class
    case.server.set((0, 0), kind="judge_failed")
    assert case.run().code == 0
    [failure] = read_jsonl(case.path("out_failures.jsonl"))
    assert failure["_ng_failure_class"] == "judge_failed"


def test_eval_aggregate_counts_the_malformed_row_as_missing(case: Case) -> None:
    case.server.set((1, 1), kind="ok", extra={"reward": "1.0"})
    assert case.run("--disable-aggregation").code == 0
    case.capsys.readouterr()
    from gymflow.cli import main

    merged = case.path("merged.jsonl")
    assert main(["eval", "aggregate", "-i", str(case.output), "-o", str(merged), "--direct"]) == 0
    captured = case.capsys.readouterr()
    lines = (captured.out + captured.err).splitlines()
    assert any(
        line.startswith("Rollouts missing from the score: 1 of 9 materialized (1 verify_invalid_response")
        for line in lines
    ), lines
    assert "Metrics cover: 8 of 9 rollouts" in lines

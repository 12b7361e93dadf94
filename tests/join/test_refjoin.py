"""Reference join: evidence.md §13 C18-C26."""

from __future__ import annotations

from typing import Any

import pytest

from tests.join.helpers import POLICY, L, bundle, codes, gap_tuples, inv, join, jsonl, ref, row, store

OWN = "model_call_ownership_unavailable"


def _join(
    records: list[dict[str, Any]], lines: list[Any], gaps: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return join(row(1, 0, ng_agent_observations=bundle(*records, gaps=gaps)), store(**{"1-0": jsonl(*lines)}))


def _refs(out: dict[str, Any], invocation_id: str) -> list[dict[str, Any]]:
    [record] = [
        r
        for r in out["ng_agent_observations"]["records"]
        if r.get("invocation_id") == invocation_id and r["kind"] == "agent_invocation"
    ]
    return record["model_calls"]  # type: ignore[no-any-return]


def test_c18_id_and_pair_references_become_canonical() -> None:
    out = _join(
        [inv("root", ref("c1"), ref(response_id="resp_2", model_ref=POLICY))],
        [L("c1", response_id="resp_1"), L("c2", response_id="resp_2", started=2.0)],
    )
    assert _refs(out, "root") == [
        {"model_call_id": "c1", "model_ref": POLICY, "response_id": "resp_1"},
        {"model_call_id": "c2", "model_ref": POLICY, "response_id": "resp_2"},
    ]
    assert [(t["invocation_id"], t["turn_no"]) for t in out["ng_trajectory"]["turns"]] == [
        ("root", 1),
        ("root", 2),
    ]
    assert out["ng_perf"] == {
        "num_turns": 2,
        "num_tool_calls": 0,
        "token_observability_coverage": 1.0,
        "prompt_tokens": 10,
        "completion_tokens": 4,
    }
    assert out["ng_agent_observations"]["gaps"] == []


def test_c19_inconsistent_reference_is_unmatched() -> None:
    out = _join([inv("root", ref("c1", response_id="resp_X"))], [L("c1", response_id="resp_1")])
    assert gap_tuples(out["ng_agent_observations"]["gaps"]) == [
        ("model_call_reference_unmatched", "root", "c1"),
        (OWN, None, "capture:c1:call_index=0"),
    ]
    assert _refs(out, "root") == [{"model_call_id": "c1", "model_ref": None, "response_id": "resp_X"}]
    assert len(out["ng_trajectory"]["turns"]) == 1
    assert (out["ng_perf"]["num_turns"], out["ng_perf"]["token_observability_coverage"]) == (1, 0.0)


def test_c20_pair_reference_matching_two_calls_is_ambiguous() -> None:
    out = _join(
        [inv("root", ref(response_id="dup", model_ref=POLICY))],
        [L("c1", response_id="dup"), L("c2", response_id="dup", started=2.0)],
    )
    assert gap_tuples(out["ng_agent_observations"]["gaps"]) == [
        ("model_call_reference_ambiguous", "root", "dup"),
        (OWN, None, "capture:c1:call_index=0"),
        (OWN, None, "capture:c2:call_index=1"),
    ]
    assert len(out["ng_trajectory"]["turns"]) == 2
    assert out["ng_perf"]["token_observability_coverage"] == 0.0


def test_c21_unmatched_and_conflicting_references() -> None:
    out = _join(
        [inv("root", ref("c1"), ref("missing")), inv("sub", ref(response_id="resp_1", model_ref=POLICY))],
        [L("c1", response_id="resp_1")],
    )
    assert gap_tuples(out["ng_agent_observations"]["gaps"]) == [
        ("model_call_reference_unmatched", "root", "missing"),
        ("model_call_reference_conflict", "sub", "c1"),
    ]
    assert [t["invocation_id"] for t in out["ng_trajectory"]["turns"]] == ["root"]
    assert (out["ng_perf"]["num_turns"], out["ng_perf"]["token_observability_coverage"]) == (2, 0.5)


def test_c22_session_attach() -> None:
    no_id: Any = {"status": "completed", "output": [{"type": "message", "role": "assistant", "content": "x"}]}
    out = _join(
        [inv("root"), inv("child", parent_invocation_id="root")],
        [
            L("c1", response=no_id, client_session_id="root"),
            L("c2", response=no_id, client_session_id="child", started=2.0),
            L("c3", response=no_id, client_session_id="nobody", started=3.0),
        ],
    )
    assert _refs(out, "root") == [{"model_call_id": "c1", "model_ref": POLICY, "response_id": None}]
    assert _refs(out, "child") == [{"model_call_id": "c2", "model_ref": POLICY, "response_id": None}]
    assert gap_tuples(out["ng_agent_observations"]["gaps"]) == [(OWN, None, "capture:c3:call_index=2")]
    assert [(t["invocation_id"], t["turn_no"]) for t in out["ng_trajectory"]["turns"]] == [
        ("root", 1),
        ("child", 1),
    ]


def test_session_attach_skips_an_invocation_already_referencing_the_call() -> None:
    out = _join([inv("root", ref("c1"))], [L("c1", client_session_id="root")])
    assert _refs(out, "root") == [{"model_call_id": "c1", "model_ref": POLICY, "response_id": "resp_c1"}]


def test_c23_stale_join_gaps_are_dropped() -> None:
    stale = [
        {"code": "model_call_reference_unmatched", "invocation_id": "root", "detail": "old"},
        {"code": OWN, "detail": "capture:old:call_index=9"},
        {"code": OWN, "detail": "direct_provider"},
        {"code": "tool_timing_unavailable", "invocation_id": "root"},
    ]
    out = _join([inv("root")], [], gaps=stale)
    assert gap_tuples(out["ng_agent_observations"]["gaps"]) == [
        (OWN, None, "direct_provider"),
        ("tool_timing_unavailable", "root", None),
    ]


def test_c24_compaction_references() -> None:
    compaction = {
        "kind": "context_compaction",
        "invocation_id": "root",
        "before_model_call": {"model_call_id": "c-owned"},
        "model_calls": [{"model_call_id": "c-owned"}, {"model_call_id": "c-unowned"}],
        "after_model_call": {"model_call_id": "nope"},
    }
    out = _join(
        [inv("root"), inv("other", ref("c-owned")), compaction], [L("c-owned"), L("c-unowned", started=2.0)]
    )
    assert gap_tuples(out["ng_agent_observations"]["gaps"]) == [
        ("model_call_reference_conflict", "root", "model_calls:c-owned"),
        (OWN, "root", "model_calls:c-unowned"),
        ("model_call_reference_conflict", "root", "before_model_call:c-owned"),
        ("model_call_reference_unmatched", "root", "after_model_call:nope"),
        (OWN, None, "capture:c-unowned:call_index=1"),
    ]


def test_compaction_references_of_its_own_invocation_become_canonical() -> None:
    compaction = {
        "kind": "context_compaction",
        "invocation_id": "root",
        "model_calls": [{"model_call_id": "c1"}],
        "after_model_call": {"model_call_id": "c2"},
    }
    out = _join([inv("root", ref("c1")), compaction], [L("c1"), L("c2", started=2.0)])
    [record] = [r for r in out["ng_agent_observations"]["records"] if r["kind"] == "context_compaction"]
    assert record["model_calls"] == [{"model_call_id": "c1", "model_ref": POLICY, "response_id": "resp_c1"}]
    assert record["after_model_call"] == {
        "model_call_id": "c2",
        "model_ref": POLICY,
        "response_id": "resp_c2",
    }
    assert gap_tuples(out["ng_agent_observations"]["gaps"]) == [(OWN, None, "capture:c2:call_index=1")]


@pytest.mark.parametrize(
    "records",
    [
        [inv("root"), inv("root")],
        [inv("root"), {"kind": "turn", "invocation_id": "root"}],
        [inv("root", conversation=[{"type": "function_call", "call_id": "t", "name": "f"}])],
        [{"invocation_id": "root", "model_calls": []}],
        [inv("a", parent_invocation_id="b"), inv("b", parent_invocation_id="a")],
    ],
    ids=["duplicate-ids", "turn-kind", "function-call-without-arguments", "missing-kind", "parent-cycle"],
)
def test_c25_invalid_bundle(records: list[dict[str, Any]]) -> None:
    original = bundle(*records)
    out = join(row(1, 0, ng_agent_observations=original), store(**{"1-0": jsonl(L("c1"))}))
    assert out["ng_model_call_capture"]["gaps"] == [{"code": "agent_observation_join_failed"}]
    assert out["ng_agent_observations"] == bundle(*records)  # left raw
    trajectory = out["ng_trajectory"]
    assert gap_tuples(trajectory["gaps"]) == [
        ("agent_observations_invalid", None, "ValidationError"),
        ("agent_observation_join_failed", None, None),
        ("turns_unavailable", None, None),
        ("conversation_unavailable", None, None),
    ]
    assert trajectory["invocations"] == []
    assert "ng_perf" not in out


def test_c26_duplicate_capture_ids_fail_the_projection() -> None:
    out = _join([inv("root", ref("c1"))], [L("c1"), L("c1", started=2.0)])
    assert gap_tuples(out["ng_agent_observations"]["gaps"]) == [
        ("model_call_reference_ambiguous", "root", "c1"),
        (OWN, None, "capture:c1:call_index=0"),
        (OWN, None, "capture:c1:call_index=1"),
    ]
    assert "ng_trajectory" not in out
    capture = out["ng_model_call_capture"]
    assert capture["gaps"] == [{"code": "trajectory_projection_failed", "detail": "ValidationError"}]
    assert all("request" in call and "response" in call for call in capture["calls"])
    assert codes(capture["gaps"]) == ["trajectory_projection_failed"]

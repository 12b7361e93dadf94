"""Appendix A of evidence.md (C27, C41 and A.3), before -> after, and idempotency (C47, C48, §11)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from gymflow.evidence import validate_trajectory
from gymflow.join import CaptureStore, join_row
from tests.join.helpers import L, bundle, gap_tuples, inv, join, jsonl, memory_store, ref, row, store

APPENDIX = Path(__file__).parent / "appendix"


def _case(name: str) -> tuple[dict[str, Any], CaptureStore, dict[str, Any]]:
    case = json.loads((APPENDIX / f"{name}.json").read_text())
    files = memory_store({k: v.encode() for k, v in case["capture_files"].items()})
    return case["input"], files, case["output"]


@pytest.mark.parametrize("name", ["a_1", "a_2", "a_3"])
def test_appendix_before_after(name: str) -> None:
    before, files, after = _case(name)
    snapshot = copy.deepcopy(before)
    out = join_row(before, files)
    # "byte for byte after parsing": the written line parses to the expected row, key order included.
    written = orjson.loads(orjson.dumps(out))
    assert written == after
    assert json.dumps(written) == json.dumps(after)
    assert before == snapshot
    validate_trajectory(out["ng_trajectory"])  # valid input to the health checks (health.md §2.4)


def test_c27_a1_values() -> None:
    before, files, _ = _case("a_1")
    out = join_row(before, files)
    assert len(out["ng_trajectory"]["turns"]) == 1 and out["ng_trajectory"]["gaps"] == []
    assert out["ng_trajectory"]["tool_calls"][0]["output"] == "42"
    assert list(out["ng_perf"].values()) == [1, 1, 1.0, 12, 8, 910]


def test_c41_a2_values() -> None:
    before, files, _ = _case("a_2")
    out = join_row(before, files)
    assert list(out["ng_perf"].values()) == [2, 0, 1.0, 110, 32, 24, 2480.5]
    assert out["ng_trajectory"]["invocations"][0]["model_calls"][0]["model_call_id"] is None


def test_c47_second_pass_over_a1_is_identical() -> None:
    before, files, after = _case("a_1")
    assert join_row(join_row(before, files), files) == after


def test_c47_second_pass_resorts_derived_turns() -> None:
    lines = [L("c1", started=300.0), L("c2", started=200.0), L("c3", started=100.0)]
    records = [inv("root", ref("c1"), ref("c3")), inv("sub", ref("c2"), parent_invocation_id="root")]
    files = store(**{"1-0": jsonl(*lines)})
    first = join(row(1, 0, resolved=True, ng_agent_observations=bundle(*records)), files)
    second = join(first, files)
    key = [(t["invocation_id"], t["turn_no"]) for t in first["ng_trajectory"]["turns"]]
    assert key == [("root", 1), ("sub", 1), ("root", 2)]
    assert [(t["invocation_id"], t["turn_no"]) for t in second["ng_trajectory"]["turns"]] == [
        ("root", 2),
        ("sub", 1),
        ("root", 1),
    ]
    first["ng_trajectory"]["turns"].sort(key=lambda t: t["timestamp"])
    assert second == first  # (a): nothing else changes
    assert join(second, files) == second


def test_c48_no_duplicate_failure_gap_without_capture() -> None:
    files = store(**{"1-0": jsonl(L("c1", latency=-1))})
    first = join(row(1, 0, ng_agent_observations=bundle(inv("root", ref("c1")))), files)
    second = join_row(first, None)
    third = join_row(second, None)
    expected = [{"code": "trajectory_projection_failed", "detail": "ValidationError"}]
    assert first["ng_model_call_capture"]["gaps"] == expected
    assert second["ng_model_call_capture"]["gaps"] == expected  # 0.7.0 would append it again
    assert third == second


def test_quirk_c_compaction_ownership_gap_moves_on_a_second_pass() -> None:
    compaction = {
        "kind": "context_compaction",
        "invocation_id": "root",
        "before_model_call": {"model_call_id": "c-owned"},
        "model_calls": [{"model_call_id": "c-owned"}, {"model_call_id": "c-unowned"}],
        "after_model_call": {"model_call_id": "nope"},
    }
    files = store(**{"1-0": jsonl(L("c-owned"), L("c-unowned", started=2.0))})
    first = join(
        row(1, 0, ng_agent_observations=bundle(inv("root"), inv("other", ref("c-owned")), compaction)), files
    )
    second = join(first, files)
    assert [g[2] for g in gap_tuples(first["ng_agent_observations"]["gaps"])] == [
        "model_calls:c-owned",
        "model_calls:c-unowned",
        "before_model_call:c-owned",
        "after_model_call:nope",
        "capture:c-unowned:call_index=1",
    ]
    assert [g[2] for g in gap_tuples(second["ng_agent_observations"]["gaps"])] == [
        "model_calls:c-unowned",
        "model_calls:c-owned",
        "before_model_call:c-owned",
        "after_model_call:nope",
        "capture:c-unowned:call_index=1",
    ]


def test_quirk_d_id_less_calls_are_appended_again() -> None:
    files = store(**{"1-0": jsonl(L(None, response_id="r1"))})
    first = join(row(1, 0), files)
    second = join(first, files)
    third = join(second, files)
    assert [len(r["ng_trajectory"]["model_calls"]) for r in (first, second, third)] == [1, 2, 3]


def test_c48_failure_gap_in_dumped_form_is_not_repeated() -> None:
    dumped = {"code": "trajectory_projection_failed", "invocation_id": None, "detail": "KeyError"}
    observations = bundle(inv("root"), gaps=[dumped])
    out = join_row({"ng_agent_observations": observations}, None)
    assert out["ng_agent_observations"]["gaps"] == [dumped]
    first = join_row({"ng_agent_observations": bundle(inv("root"))}, None)
    assert join_row(first, None) == first

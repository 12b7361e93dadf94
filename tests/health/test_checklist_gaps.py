"""Health spec §10, H13-H24: coercion, the gating ladder and observation gaps."""

from __future__ import annotations

from pathlib import Path

from tests.health.builders import (
    BINDING_IDS,
    TRAJECTORY_IDS,
    call,
    health,
    record,
    trajectory,
    turn,
)

MODEL_CALL_GAPS = [
    "model_calls_unavailable",
    "model_call_capture_incomplete",
    "model_call_capture_records_unreadable",
    "model_call_capture_unreadable",
]


def test_h13_string_values_are_coerced(tmp_path: Path) -> None:
    traj = trajectory(calls=[call(status="500", completion="0")])
    out = health(tmp_path, [record(usage=(3, 0), traj=traj)])
    assert out.checks() == [
        "rollout_ended_on_failed_model_call",
        "model_call_zero_completion_tokens",
        "model_call_failed",
    ]
    assert out.findings("model_call_failed")[0]["detail"] == {
        "status": 500,
        "error_category": None,
        "terminal": True,
    }


def test_h14_raw_capture_is_never_inspected(tmp_path: Path) -> None:
    traj = trajectory(turns=[turn(refs=[])], calls=[])
    capture = {"calls": [{"status_code": 500}]}
    out = health(tmp_path, [record(traj=traj, ng_model_call_capture=capture)])
    assert out.row()["unobserved"] == BINDING_IDS
    assert out.row()["verdict"] == "unobserved"
    assert out.run["artifacts"]["captures"] == 0


def test_h15_projection_failed_hides_everything(tmp_path: Path) -> None:
    traj = trajectory(
        turns=[turn(answer=None)], calls=[call(status=500)], gaps=[{"code": "trajectory_projection_failed"}]
    )
    out = health(tmp_path, [record(traj=traj)])
    assert out.row()["verdict"] == "unobserved"
    assert out.row()["unobserved"] == TRAJECTORY_IDS
    assert out.row()["findings"] == []
    assert out.run["artifacts"]["captures"] == 0
    assert out.run["stats"]["model_call_errors"]["total"] == 0


def test_h16_turns_unavailable(tmp_path: Path) -> None:
    traj = trajectory(
        turns=[],
        calls=[call(completion=0)],
        gaps=[{"code": "turns_unavailable"}],
        invocations=[{"invocation_id": "inv-0", "model_calls": [{"model_call_id": "c1"}]}],
    )
    out = health(tmp_path, [record(traj=traj)])
    assert out.checks() == ["model_call_zero_completion_tokens"]
    assert out.row()["unobserved"] == [
        "rollout_missing_agent_turns",
        "agent_turn_hollow",
        "rollout_token_count_mismatch",
    ]


def test_h17_model_call_gaps_hide_binding_checks_but_not_stats(tmp_path: Path) -> None:
    for index, code in enumerate(MODEL_CALL_GAPS):
        traj = trajectory(calls=[call(status=500)], gaps=[{"code": code}])
        out = health(tmp_path / str(index), [record(traj=traj)])
        assert out.row()["verdict"] == "unobserved", code
        assert out.row()["unobserved"] == BINDING_IDS
        errors = out.run["stats"]["model_call_errors"]
        assert (errors["total"], errors["by_status"], errors["ended_on_error"]) == (1, {"500": 1}, 1)
        assert out.run["artifacts"]["captures"] == 1


def test_h18_ambiguous_gap_is_a_mismatch(tmp_path: Path) -> None:
    gap = {"code": "model_call_reference_ambiguous", "invocation_id": "inv-0", "detail": "cx"}
    out = health(tmp_path, [record(traj=trajectory(turns=[turn(refs=[])], gaps=[gap]))])
    assert out.row()["findings"] == [
        {
            "check": "trajectory_capture_mismatch",
            "locator": {"call_id": "cx"},
            "detail": {
                "kind": "duplicated_captured_call",
                "observation_gap": "model_call_reference_ambiguous",
                "invocation_id": "inv-0",
            },
        }
    ]
    assert out.row()["unobserved"] == [
        "model_call_zero_completion_tokens",
        "model_call_missing_token_counts",
        "model_call_failed",
        "rollout_token_count_mismatch",
        "model_call_runaway_generation",
    ]


def test_h19_conflict_gap_without_detail(tmp_path: Path) -> None:
    out = health(tmp_path, [record(traj=trajectory(gaps=[{"code": "model_call_reference_conflict"}]))])
    (item,) = out.findings("trajectory_capture_mismatch")
    assert item["locator"] == {"call_id": "unknown"}
    assert item["detail"] == {
        "kind": "conflicting_call_ownership",
        "observation_gap": "model_call_reference_conflict",
        "invocation_id": None,
    }


def test_h20_contradiction_with_unavailable_calls_is_unobserved(tmp_path: Path) -> None:
    gaps = [{"code": "model_call_reference_unmatched", "detail": "x"}, {"code": "model_calls_unavailable"}]
    out = health(tmp_path, [record(traj=trajectory(gaps=gaps))])
    assert "trajectory_capture_mismatch" in out.row()["unobserved"]
    assert out.row()["findings"] == []


def test_h21_neutral_gaps(tmp_path: Path) -> None:
    out = health(
        tmp_path,
        [
            record(0, traj=trajectory(gaps=[{"code": "model_call_ownership_unavailable"}])),
            record(1, traj=trajectory(gaps=[{"code": "tool_timing_unavailable"}])),
        ],
    )
    assert [row["verdict"] for row in out.rows] == ["healthy", "healthy"]


def test_h22_turn_scope_incomplete(tmp_path: Path) -> None:
    traj = trajectory(calls=[call(status=500)], gaps=[{"code": "turn_model_call_scope_incomplete"}])
    out = health(tmp_path, [record(usage=(99, 99), traj=traj)])
    assert out.checks() == ["rollout_ended_on_failed_model_call", "model_call_failed"]
    assert out.row()["unobserved"] == ["rollout_token_count_mismatch"]
    assert out.run["artifacts"]["coverage"]["task_no_successful_model_calls"] == {
        "evaluated": 0,
        "unobserved": 1,
        "ignored": 0,
    }
    assert out.summary["tasks"]["0"]["flags"] == []


def test_h23_explicit_empty_turns(tmp_path: Path) -> None:
    out = health(tmp_path, [record(traj=trajectory(turns=[]))])
    assert out.row()["findings"] == [
        {"check": "rollout_missing_agent_turns", "detail": {"reason": "no agent turn with model activity"}}
    ]
    assert out.row()["unobserved"] == BINDING_IDS[1:]


def test_h24_references_without_calls(tmp_path: Path) -> None:
    out = health(
        tmp_path,
        [
            record(0, traj=trajectory(turns=[turn(refs=[])], calls=[])),
            record(1, traj=trajectory(calls=[])),
        ],
    )
    assert out.row(0)["verdict"] == "unobserved"
    assert "rollout_ended_on_failed_model_call" in out.row(0)["unobserved"]
    assert out.findings("trajectory_capture_mismatch", 1) == [
        {
            "check": "trajectory_capture_mismatch",
            "locator": {"call_id": "c1"},
            "detail": {"kind": "missing_captured_call"},
        }
    ]
    assert out.row(1)["unobserved"] == [c for c in BINDING_IDS if c != "trajectory_capture_mismatch"]

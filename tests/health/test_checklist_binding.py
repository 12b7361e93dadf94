"""Health spec §10, H25-H34: binding references to captured calls."""

from __future__ import annotations

from pathlib import Path

from tests.health.builders import JUDGE, POLICY, call, health, record, trajectory, turn

MISSING = {"kind": "missing_captured_call"}


def test_h25_response_key_reference_binds(tmp_path: Path) -> None:
    traj = trajectory(
        turns=[turn(refs=[{"model_ref": POLICY, "response_id": "r1"}])], calls=[call(call_id="capture-uuid")]
    )
    assert health(tmp_path, [record(traj=traj)]).row()["verdict"] == "healthy"


def test_h26_stale_response_id_does_not_bind(tmp_path: Path) -> None:
    traj = trajectory(
        turns=[turn(refs=[{"model_call_id": "c1", "response_id": "stale"}])], calls=[call(status=500)]
    )
    out = health(tmp_path, [record(traj=traj)])
    assert out.checks() == ["rollout_ended_on_failed_model_call", "trajectory_capture_mismatch"]
    assert out.findings("trajectory_capture_mismatch")[0]["locator"] == {"call_id": "c1"}
    assert "model_call_failed" in out.row()["unobserved"]


def test_h27_reference_to_another_server_does_not_bind(tmp_path: Path) -> None:
    traj = trajectory(turns=[turn(refs=[{"model_call_id": "c1", "model_ref": JUDGE}])])
    out = health(tmp_path, [record(traj=traj)])
    assert out.findings("trajectory_capture_mismatch") == [
        {"check": "trajectory_capture_mismatch", "locator": {"call_id": "c1"}, "detail": MISSING}
    ]


def test_h28_response_key_matching_two_calls(tmp_path: Path) -> None:
    traj = trajectory(
        turns=[turn(refs=[{"model_ref": POLICY, "response_id": "dup"}])],
        calls=[call(call_id="a", response_id="dup"), call(call_id="b", response_id="dup")],
    )
    out = health(tmp_path, [record(traj=traj)])
    assert out.findings("trajectory_capture_mismatch") == [
        {
            "check": "trajectory_capture_mismatch",
            "locator": {"call_id": "dup"},
            "detail": {"kind": "duplicated_captured_call", "count": 2},
        }
    ]
    assert out.run["stats"]["duplicated_calls"] == {"replayed": 0, "rollouts": 0}


def test_h29_locator_is_text_after_last_colon(tmp_path: Path) -> None:
    traj = trajectory(turns=[turn(refs=[{"model_ref": POLICY, "response_id": "resp:9"}])])
    out = health(tmp_path, [record(traj=traj)])
    assert out.findings("trajectory_capture_mismatch")[0]["locator"] == {"call_id": "9"}


def test_h30_one_call_reached_twice_is_evaluated_once(tmp_path: Path) -> None:
    traj = trajectory(
        turns=[turn(refs=[{"model_ref": POLICY, "response_id": "r1"}])],
        calls=[call(status=500, completion=0)],
        invocations=[{"invocation_id": "inv-0", "model_calls": [{"model_call_id": "c1"}]}],
    )
    out = health(tmp_path, [record(usage=(3, 0), traj=traj)])
    assert out.checks() == [
        "rollout_ended_on_failed_model_call",
        "model_call_zero_completion_tokens",
        "model_call_failed",
    ]
    assert out.findings("model_call_failed")[0]["detail"]["terminal"] is True


def test_h31_invocation_only_failure_is_terminal_and_outside_token_totals(tmp_path: Path) -> None:
    traj = trajectory(
        calls=[call(), call(call_id="c2", response_id="r2", status=500)],
        invocations=[
            {"invocation_id": "inv-0", "model_calls": [{"model_call_id": "c1"}, {"model_call_id": "c2"}]}
        ],
    )
    out = health(tmp_path, [record(traj=traj)])
    failed = out.findings("model_call_failed")
    assert [(f["locator"], f["detail"]["terminal"]) for f in failed] == [({"call_id": "c2"}, True)]
    assert out.findings("rollout_token_count_mismatch") == []


def test_h32_missing_counts_and_missing_reference(tmp_path: Path) -> None:
    traj = trajectory(
        turns=[turn(refs=[{"model_call_id": "c1"}, {"model_call_id": "missing"}])],
        calls=[call(completion=None)],
    )
    out = health(tmp_path, [record(traj=traj)])
    assert out.findings("model_call_missing_token_counts")[0]["detail"] == {"missing": ["completion_tokens"]}
    assert out.findings("trajectory_capture_mismatch")[0]["locator"] == {"call_id": "missing"}
    assert out.row()["unobserved"] == ["rollout_token_count_mismatch"]


def test_h33_same_locator_reported_once_per_kind(tmp_path: Path) -> None:
    refs = [{"model_call_id": "c1", "response_id": "s1"}, {"model_call_id": "c1", "response_id": "s2"}]
    first = health(tmp_path / "a", [record(traj=trajectory(turns=[turn(refs=refs)]))])
    assert len(first.findings("trajectory_capture_mismatch")) == 1
    traj = trajectory(
        turns=[turn(refs=[{"model_call_id": "x"}, {"model_ref": POLICY, "response_id": "x"}])],
        calls=[call(call_id="p", response_id="x"), call(call_id="q", response_id="x")],
    )
    second = health(tmp_path / "b", [record(traj=traj)])
    assert [(f["locator"], f["detail"]) for f in second.findings("trajectory_capture_mismatch")] == [
        ({"call_id": "x"}, MISSING),
        ({"call_id": "x"}, {"kind": "duplicated_captured_call", "count": 2}),
    ]


def test_h34_call_bound_twice_is_counted_once(tmp_path: Path) -> None:
    traj = trajectory(
        turns=[turn(), turn(turn_no=2, refs=[{"model_ref": POLICY, "response_id": "r1"}])],
    )
    assert health(tmp_path, [record(traj=traj)]).row()["verdict"] == "healthy"

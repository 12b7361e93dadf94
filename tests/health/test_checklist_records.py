"""Health spec §10, H01-H12: lines, parsing, identity, ordering and trajectory validity."""

from __future__ import annotations

import json
from pathlib import Path

from gymflow.health import ROLLOUT_CHECK_IDS, HealthOptions, run_health
from tests.health.builders import TRAJECTORY_IDS, Outcome, health, line, record, trajectory, turn, write_lines

OTHER_11 = [c for c in ROLLOUT_CHECK_IDS if c != "record_unreadable"]


def test_h01_blank_lines_skipped_and_array_line_unreadable(tmp_path: Path) -> None:
    out = health(tmp_path, ["", record(), " \t\r", "[]"])
    assert len(out.rows) == 2
    bad = out.row(1)
    assert bad["_ng_task_index"] == "__unreadable_record__:input-0:line-4"
    assert bad["_ng_rollout_index"] == 0
    assert bad["rollout_id"] == "__unreadable_record__:input-0:line-4-0"
    assert bad["verdict"] == "unhealthy"
    source = str(tmp_path / "run" / "rollouts.jsonl")
    assert bad["findings"] == [
        {
            "check": "record_unreadable",
            "locator": {"source_file": source, "line": 4},
            "detail": {"reason": "rollout record is unreadable", "error": "ValueError"},
        }
    ]
    assert bad["unobserved"] == OTHER_11
    assert out.row(0)["verdict"] == "healthy"


def test_h02_invalid_json_and_bom_are_decode_errors(tmp_path: Path) -> None:
    bom = "\ufeff" + line(record())
    out = health(tmp_path, ["{bad", bom])
    for row in out.rows:
        assert row["findings"][0]["detail"] == {
            "reason": "rollout record is unreadable",
            "error": "JSONDecodeError",
        }


def test_h03_crlf_and_missing_final_newline(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    data = (line(record(0)) + "\r\n" + line(record(1))).encode()
    (run_dir / "rollouts.jsonl").write_bytes(data)
    run_health(HealthOptions((str(run_dir / "rollouts.jsonl"),), workers=1, use_cache=False))
    out = Outcome(run_dir)
    assert [row["verdict"] for row in out.rows] == ["healthy", "healthy"]


def test_h04_missing_index_keys_use_ordinal_and_collide(tmp_path: Path) -> None:
    keyless = record(traj=None)
    del keyless["_ng_task_index"], keyless["_ng_rollout_index"]
    out = health(tmp_path, [record(1, 0), keyless])
    assert [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in out.rows] == [(1, 0), (1, 0)]
    for i in range(2):
        assert out.findings("rollout_duplicate_identity", i)[0]["detail"] == {"duplicate_count": 2}
    assert out.row(1)["rollout_id"] == "1-0"


def test_h05_identity_normalisation_and_raw_rollout_id(tmp_path: Path) -> None:
    out = health(tmp_path, [record(True, 2.0, traj=None), record(5, 0, traj=None, _ng_rollout_id=0)])
    assert (out.row(0)["_ng_task_index"], out.row(0)["_ng_rollout_index"]) == (1, 2)
    assert out.row(0)["rollout_id"] == "True-2.0"
    assert out.row(1)["rollout_id"] == "5-0"


def test_h06_rollout_id_precedence(tmp_path: Path) -> None:
    invalid = {"rollout_id": "raw-rid", "task_id": 5}
    out = health(
        tmp_path,
        [record(0, _ng_rollout_id="explicit"), record(1), record(2, traj=invalid)],
    )
    assert [r["rollout_id"] for r in out.rows] == ["explicit", "t-0", "raw-rid"]


def test_h07_row_and_task_ordering(tmp_path: Path) -> None:
    out = health(
        tmp_path,
        [record("b", 0), record(10, 0), record(2, 1), record("a", 0), record(2, 0), record(2, "x"), "[]"],
    )
    keys = [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in out.rows]
    assert keys == [
        (2, 0),
        (2, 1),
        (2, "x"),
        (10, 0),
        ("__unreadable_record__:input-0:line-7", 0),
        ("a", 0),
        ("b", 0),
    ]
    assert list(out.summary["tasks"]) == ["10", "2", "__unreadable_record__:input-0:line-7", "a", "b"]


def test_h08_several_files_number_lines_per_file_and_ordinals_globally(tmp_path: Path) -> None:
    keyless = record()
    del keyless["_ng_task_index"], keyless["_ng_rollout_index"]
    one = write_lines(tmp_path / "one.jsonl", [record(100), record(101)])
    two = write_lines(tmp_path / "two.jsonl", ["", record(102), "[]"])
    three = write_lines(tmp_path / "three.jsonl", [keyless, keyless])
    run_health(
        HealthOptions((str(one), str(two), str(three)), report_dir=str(tmp_path), workers=1, use_cache=False)
    )
    out = Outcome(tmp_path)
    tasks = [r["_ng_task_index"] for r in out.rows]
    assert "__unreadable_record__:input-1:line-3" in tasks
    assert tasks[:2] == [4, 5]


def test_h09_no_trajectory_is_unobserved(tmp_path: Path) -> None:
    out = health(tmp_path, [record(traj=None), record(1, **{"ng_trajectory": None})])
    for row in out.rows:
        assert row["verdict"] == "unobserved"
        assert row["unobserved"] == TRAJECTORY_IDS
        assert row["findings"] == []
    assert out.run["artifacts"]["captures"] == 0
    assert out.run["stats"]["tokens"]["prompt"] == 6


def test_h10_non_object_trajectory_is_unreadable(tmp_path: Path) -> None:
    out = health(tmp_path, [record(traj="oops")])
    row = out.row()
    assert row["findings"] == [
        {
            "check": "record_unreadable",
            "detail": {"reason": "canonical trajectory is unreadable", "error": "ValidationError"},
        }
    ]
    assert row["unobserved"] == TRAJECTORY_IDS
    assert row["verdict"] == "unhealthy"


def _variants() -> list[dict[str, object]]:
    extra_key = trajectory(turns=[turn(surprise=1)])
    judge_type = trajectory()
    judge_type["model_calls"][0]["response_metadata"]["model_ref"] = {
        "type": "resources_servers",
        "name": "j",
    }
    foreign_turn = trajectory(turns=[turn(rollout_id="other")])
    twin_calls = trajectory()
    twin_calls["model_calls"].append(json.loads(json.dumps(twin_calls["model_calls"][0])))
    response_only_ref = trajectory(turns=[turn(refs=[{"response_id": "r1"}])])
    negative = trajectory()
    negative["model_calls"][0]["token_stats"]["prompt_tokens"] = -1
    return [extra_key, judge_type, foreign_turn, twin_calls, response_only_ref, negative]


def test_h11_schema_violations_make_the_trajectory_unreadable(tmp_path: Path) -> None:
    out = health(tmp_path, [record(i, traj=t) for i, t in enumerate(_variants())])
    assert len(out.rows) == 6
    for row in out.rows:
        assert row["findings"][0]["detail"] == {
            "reason": "canonical trajectory is unreadable",
            "error": "ValidationError",
        }
        assert row["unobserved"] == TRAJECTORY_IDS


def test_h12_deeply_nested_answer_is_a_value_error(tmp_path: Path) -> None:
    answer: object = "x"
    for _ in range(300):
        answer = [answer]
    out = health(tmp_path, [record(traj=trajectory(turns=[turn(answer=answer)]))])
    assert out.row()["findings"][0]["detail"]["error"] == "ValueError"


def test_depth_limit_boundary(tmp_path: Path) -> None:
    def nest(levels: int) -> object:
        value: object = "x"
        for _ in range(levels - 1):
            value = [value]
        return value

    out = health(
        tmp_path,
        [
            record(0, traj=trajectory(turns=[turn(answer=nest(255))])),
            record(1, traj=trajectory(turns=[turn(answer=nest(256))])),
        ],
    )
    assert out.row(0)["verdict"] == "healthy"
    assert out.row(1)["findings"][0]["detail"]["error"] == "ValueError"


def test_depth_limit_counts_an_empty_innermost_container_once(tmp_path: Path) -> None:
    def lists(count: int) -> object:
        value: object = []
        for _ in range(count - 1):
            value = [value]
        return value

    answers = [lists(255), lists(256)]
    out = health(
        tmp_path, [record(i, traj=trajectory(turns=[turn(answer=a)])) for i, a in enumerate(answers)]
    )
    assert out.findings("record_unreadable", 0) == []
    assert out.findings("record_unreadable", 1)[0]["detail"]["error"] == "ValueError"


def _with_item(item: object) -> dict[str, object]:
    return trajectory(invocations=[{"invocation_id": "inv-0", "conversation": [item]}])


BAD_ITEM_TYPES: list[object] = ["", None, 0, 3, 1.5, True, {}, {"a": 1}, [], ["message"]]
BAD_ITEM_TYPES += [
    "bogus",
    "Message",
    "message ",
    "easy_message",
    "output_message",
    "function_call__training",
]


def test_h11_conversation_item_with_an_unknown_type_tag_is_unreadable(tmp_path: Path) -> None:
    """0.7.0 rejects an item whose ``type`` key is present but not a known item type, null included:
    the trajectory is unreadable, however the rest of the item looks."""
    items = [{"type": kind, "role": "user", "content": "hi"} for kind in BAD_ITEM_TYPES]
    items += [{"type": None}, {"type": None, "name": "f", "arguments": "{}", "call_id": "c"}]
    out = health(tmp_path, [record(i, traj=_with_item(item)) for i, item in enumerate(items)])
    assert len(out.rows) == len(items)
    for row in out.rows:
        assert row["findings"] == [
            {
                "check": "record_unreadable",
                "detail": {"reason": "canonical trajectory is unreadable", "error": "ValidationError"},
            }
        ]
        assert row["unobserved"] == TRAJECTORY_IDS
        assert row["verdict"] == "unhealthy"


def test_h11_items_0_7_0_accepts_keep_the_trajectory_readable(tmp_path: Path) -> None:
    """Known types and untyped items of any shape (the ``mcp_list_tools`` fallback) are readable."""
    items: list[object] = [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "mcp_list_tools"},
        {"type": "compaction_trigger"},
        {"role": "robot", "content": "hi"},
        {"role": "user"},
        {"name": "f", "arguments": "{}"},
        {"foo": 1},
    ]
    out = health(tmp_path, [record(i, traj=_with_item(item)) for i, item in enumerate(items)])
    assert [row["verdict"] for row in out.rows] == ["healthy"] * len(items)
    assert all(row["findings"] == [] for row in out.rows)


def test_h11_unhashable_routing_value_is_a_type_error(tmp_path: Path) -> None:
    """0.7.0 routes a message by testing ``role`` (and ``status``) against sets: an array or object
    there raises ``TypeError``, which escapes validation and wins over any validation error."""
    items: list[object] = [
        {"role": [], "content": "hi"},
        {"type": "message", "role": {}, "content": "hi"},
        {"type": "message", "role": "user", "content": [], "status": []},
        {"type": None, "role": "user", "content": [], "status": {}},  # a null type is routed first
    ]
    trajectories = [_with_item(item) for item in items]
    both = trajectory(invocations=[{"invocation_id": "inv-0", "conversation": [{"type": "x"}, items[0]]}])
    both["task_id"] = 5
    out = health(tmp_path, [record(i, traj=t) for i, t in enumerate([*trajectories, both])])
    for row in out.rows:
        assert row["findings"] == [
            {
                "check": "record_unreadable",
                "detail": {"reason": "canonical trajectory is unreadable", "error": "TypeError"},
            }
        ]

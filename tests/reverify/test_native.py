"""reverify.md §2 native mode against the loopback server: items 5-14, 21-24, 39-41, 49-52, bad input."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import pytest

from gymflow.gym_config import verifier_sha256
from gymflow.reverify import reverify_key
from tests.reverify.cases import AGENT, Case, case_fixture, key, read_jsonl, write_jsonl  # noqa: F401
from tests.reverify.server_process import ServerProcess

pytestmark = pytest.mark.timeout(60)

ROUTING_WARNING = (
    "Warning: reverify: config has no agent blocks; routing EVERY rollout agent name to the only resources "
    "server 'mcqa'. Mismatched or stale agent names cannot be detected in this mode."
)


def test_item_05_mcqa_fixture(case: Case) -> None:
    outcome = case.run()
    assert outcome.code == 0, outcome
    rows = case.out_rows()
    assert len(rows) == 9
    assert [key(r) for r in rows] == sorted(key(r) for r in case.rollouts)
    assert case.path("out_failures.jsonl").read_bytes() == b""
    metrics = case.metrics()
    assert [e["agent_ref"] for e in metrics] == [{"name": AGENT}]
    assert metrics[0]["agent_metrics"]["mean/reward"] == 0.7777777777777778
    assert metrics[0]["key_metrics"]["mean/reward"] == 0.7777777777777778
    assert set(metrics[0]) == {
        "agent_ref",
        "agent_metrics",
        "key_metrics",
        "group_level_metrics",
        "repeat_level_metrics",
    }
    assert outcome.lines[-3:] == [
        "Finished rollout collection! View results at:",
        f"        Re-verified rollouts: {case.output}",
        f"        Aggregate metrics: {case.path('out_aggregate_metrics.json')}",
    ]
    assert f"Key metrics for {AGENT}:" in outcome.lines
    assert outcome.err.count(ROUTING_WARNING) == 1
    record = json.loads(case.path("out.provenance.json").read_text())
    assert record["command"] == "eval reverify" and record["orchestrator"] == {"kind": "direct"}
    [server] = record["verifier"]["resources_servers"]
    assert server["name"] == "mcqa" and server["reverify_mode"] == "stateless"
    assert server["url"] == case.server.url
    assert record["counts"]["succeeded"] == 9


def test_item_06_body_sent(case: Case) -> None:
    for row in case.materialized:
        row["uuid"] = f"u-{key(row)}"
    for row in case.rollouts:
        row["extracted_answer"] = "Z"
        row["stale_extra"] = 1
    assert case.run().code == 0
    bodies = {tuple(e["key"]): e["body"] for e in case.server.log("/verify")}
    assert len(bodies) == 9
    materialized = {key(m): m for m in case.materialized}
    rollouts = {key(r): r for r in case.rollouts}
    for k, body in bodies.items():
        assert body == {**materialized[k], "response": rollouts[k]["response"]}
        assert "reward" not in body and "extracted_answer" not in body and "stale_extra" not in body
        assert body["agent_ref"] == {"name": AGENT} and body["uuid"] == f"u-{k}"


def test_item_07_deliverables_and_reference_ids(case: Case) -> None:
    case.rollouts[0]["deliverables_dir"] = "/d/0"
    case.rollouts[0]["reference_ids"] = ["r1"]
    assert case.run().code == 0
    [first] = [e["body"] for e in case.server.log("/verify") if tuple(e["key"]) == (0, 0)]
    assert first["deliverables_dir"] == "/d/0" and first["reference_ids"] == ["r1"]
    row = case.out_rows()[0]
    assert "deliverables_dir" not in row and "reference_ids" not in row


def test_item_08_task_input_rows(case: Case) -> None:
    row = case.materialized[0]
    row["task_id"] = "t0"
    row["task_input"] = {"task_data": {"answer": 42}, "instance_id": "a"}
    assert case.run().code == 0
    [body] = [e["body"] for e in case.server.log("/verify") if tuple(e["key"]) == (0, 0)]
    assert body["answer"] == 42 and body["instance_id"] == "a"
    assert "task_id" not in body and "task_input" not in body
    row["task_input"] = {"task_data": {"answer": 42}, "answer": 43}
    outcome = case.run("--overwrite")
    assert outcome.code == 1
    assert outcome.error == "Error: reverify: conflicting task field 'answer' inside and outside task_data"


def test_item_09_duplicate_materialized_last_wins(case: Case) -> None:
    later = dict(case.materialized[0], expected_answer="C")
    case.materialized.append(later)
    outcome = case.run()
    assert outcome.code == 0
    scored = {key(r): r for r in case.out_rows()}
    assert scored[(0, 0)]["reward"] == 0.0 and scored[(0, 0)]["expected_answer"] == "C"
    assert (
        f"Warning: 1 materialized input key(s) repeated in {str(case.inputs)!r}; the last row of each is "
        "used: "
        "[(0, 0)]" in outcome.err
    )


def test_item_10_rollout_without_response(case: Case) -> None:
    del case.rollouts[1]["response"]
    case.rollouts[1]["_ng_result_type"] = "my_env"
    outcome = case.run()
    assert outcome.code == 1
    assert outcome.error == (
        "Error: reverify: rollout (task 0, rollout 1) of result type 'my_env' has no `response`, which "
        "reverification needs"
    )
    assert not case.output.exists() and not case.path("out_failures.jsonl").exists()
    assert case.server.log("/verify") == []


def test_item_11_output_key_order(case: Case) -> None:
    for row in case.materialized:
        row.update(_ng_environment_server="env", task_source="mcqa", skills_ref={"s": 1})
    assert case.run().code == 0
    row = case.out_rows()[0]
    names = list(row)
    assert names[-7:] == [
        "_ng_task_index",
        "_ng_rollout_index",
        "agent_ref",
        "_ng_environment_server",
        "task_source",
        "skills_ref",
        "_ng_reverify_key",
    ]
    assert names[:3] == ["responses_create_params", "response", "reward"]


def test_an_echoed_stamp_keeps_its_place(case: Case) -> None:
    """0.7.0 assigns the stamps into the answer: a field the server echoes (hotpotqa_qa echoes
    ``agent_ref``) stays where the server put it (observed side by side)."""
    case.server.set(None, extra={"agent_ref": {"name": "echoed"}, "question": "q"})
    assert case.run().code == 0
    names = list(case.out_rows()[0])
    assert names[-5:] == ["agent_ref", "question", "_ng_task_index", "_ng_rollout_index", "_ng_reverify_key"]
    assert case.out_rows()[0]["agent_ref"] == {"name": "mcqa_simple_agent"}  # the value is the body's


def test_item_12_resources_only_routing(
    case: Case, start_resources_server: Callable[..., ServerProcess]
) -> None:
    outcome = case.run()
    assert outcome.code == 0 and outcome.err.count("routing EVERY rollout agent name") == 1
    assert len(case.server.log("/verify")) == 9
    case.config({"a": case.server, "b": case.server})
    outcome = case.run("--overwrite")
    assert outcome.code == 1
    assert outcome.error == (
        "Error: reverify: multiple resources servers ['a', 'b'] and no agent blocks to route by. "
        "Use a config with agent blocks."
    )


def test_item_13_unknown_agent(case: Case) -> None:
    case.config(agents={"other_agent": "mcqa"})
    outcome = case.run()
    assert outcome.code == 1
    assert outcome.error == (
        f"Error: reverify: cannot find a resources server for row (agent_ref.name={AGENT!r}, "
        "task_source=None). Known agents: ['other_agent']."
    )
    assert not case.output.exists()


def test_item_14_task_source_routes(case: Case, start_resources_server: Callable[..., ServerProcess]) -> None:
    other = start_resources_server()
    case.config({"mcqa": case.server, "other_rs": other}, agents={AGENT: "mcqa"})
    case.materialized[0]["task_source"] = "other_rs"
    # A taskset row routes by its body: here the task_source inside its task_data.
    case.materialized[2].update(task_id="t2", task_input={"task_data": {"task_source": "other_rs"}})
    assert case.run().code == 0
    routed = sorted(tuple(e["key"]) for e in other.log("/verify"))
    assert routed == [key(case.materialized[i]) for i in (0, 2)]
    assert len(case.server.log("/verify")) == 7


def test_item_21_output_protection(case: Case) -> None:
    case.write()
    case.output.write_text("old\n")
    outcome = case.run(write=False)
    assert outcome.code == 1
    assert outcome.error == (
        f"Error: Output file already exists: '{case.output}'. Pass --overwrite to delete it and start fresh, "
        "or --resume to continue from it."
    )
    assert case.output.read_text() == "old\n"
    case.output.unlink()
    sidecar = case.path("out_failures.jsonl")
    sidecar.write_text("")
    outcome = case.run(write=False)
    assert outcome.code == 1 and f"Output file already exists: '{sidecar}'" in outcome.err
    case.output.write_text("old\n")
    outcome = case.run("--overwrite", write=False)
    assert outcome.code == 0
    assert f"Deleted existing output file: '{case.output}'" in outcome.lines
    assert f"Deleted existing output file: '{sidecar}'" in outcome.lines
    assert len(case.out_rows()) == 9


def test_item_22_empty_sidecar_always_created(case: Case) -> None:
    assert case.run().code == 0
    assert case.path("out_failures.jsonl").stat().st_size == 0


def test_item_23_judge_failure(case: Case) -> None:
    case.server.set((0, 0), kind="judge_failed")
    outcome = case.run()
    assert outcome.code == 0
    [failure] = read_jsonl(case.path("out_failures.jsonl"))
    assert failure["_ng_failure_class"] == "judge_failed"
    assert failure["_ng_failure_judge_error"] and failure["mask_sample"] is True and failure["reward"] == 0.0
    assert key(failure) == (0, 0) and failure["_ng_reverify_key"]
    assert len(case.out_rows()) == 8
    assert any(
        line.startswith(
            '🚨 [rollout_reverification] rollout dropped from the score: row={"_ng_rollout_index": 0, '
            f'"_ng_task_index": 0, "agent_name": "{AGENT}"}} class=judge_failed error='
        )
        for line in outcome.lines
    )
    assert outcome.lines[-2:] == [
        "Rollouts missing from the score: 1 of 9 materialized (1 judge_failed routed this run; see "
        f"{case.path('out_failures.jsonl')})",
        "Metrics cover: 8 of 9 rollouts",
    ]


def test_item_24_no_persist_gym(case: Case) -> None:
    case.server.set((0, 0), kind="no_persist")
    case.server.set((0, 1), kind="no_persist")
    outcome = case.run()
    assert outcome.code == 0
    assert [key(r) for r in case.out_rows()] == [
        key(r) for r in case.rollouts if key(r) not in {(0, 0), (0, 1)}
    ]
    assert case.path("out_failures.jsonl").read_bytes() == b""
    assert not any("missing from the score" in line for line in outcome.lines)


def test_item_39_disable_aggregation_limit(case: Case) -> None:
    outcome = case.run("--disable-aggregation", "--limit", "3")
    assert outcome.code == 0
    assert [key(r) for r in case.out_rows()] == [key(r) for r in case.rollouts[:3]]
    assert sorted(tuple(e["key"]) for e in case.server.log("/verify")) == [key(r) for r in case.rollouts[:3]]
    assert not case.path("out_aggregate_metrics.json").exists()
    assert (
        "Skipping aggregate-metrics computation because disable_aggregation=True. Run "
        "`gymflow eval aggregate` "
        "after all shards finish to compute the global metrics." in outcome.lines
    )
    assert "        Aggregate metrics: None" in outcome.lines


def test_item_40_concurrency_bound(case: Case) -> None:
    case.server.set(None, latency_ms=100)
    outcome = case.run("--concurrency", "2")
    assert outcome.code == 0
    assert "Verifying with 2 concurrent requests" in outcome.lines
    assert case.server.stats()["peak_in_flight"] == 2


def test_item_41_empty_rollouts(case: Case) -> None:
    case.rollouts = []
    outcome = case.run()
    assert outcome.code == 0
    assert "WARNING: Nothing to be re-verified." in outcome.lines
    assert case.output.read_bytes() == b"" and case.path("out_failures.jsonl").read_bytes() == b""
    assert "        Aggregate metrics: None" in outcome.lines
    assert not case.path("out_aggregate_metrics.json").exists()


def test_item_49_blank_lines_skipped(case: Case) -> None:
    assert case.run().code == 0
    expected = case.output.read_bytes()
    for path in (case.inputs, case.rollouts_path):
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:2]) + "\n   \n" + "".join(lines[2:]) + "\n")
    assert case.run("--overwrite", write=False).code == 0
    assert case.output.read_bytes() == expected


def test_item_50_duplicate_rollout(case: Case) -> None:
    case.rollouts.append(dict(case.rollouts[0]))
    outcome = case.run()
    assert outcome.code == 0
    assert (
        f"Skipped 1 duplicate rollout row(s) for 1 key(s) in {str(case.rollouts_path)!r}; verified the first "
        "row of each: [(0, 0)]" in outcome.lines
    )
    assert len(case.out_rows()) == 9 and len(case.server.log("/verify")) == 9
    assert case.metrics()[0]["agent_metrics"]["mean/reward"] == 0.7777777777777778


def test_item_51_unmatched_rollout(case: Case) -> None:
    case.rollouts[-1] = dict(case.rollouts[-1], _ng_task_index=99, _ng_rollout_index=1)
    outcome = case.run()
    assert outcome.code == 0
    [row] = read_jsonl(case.path("out_failures.jsonl"))
    assert row["_ng_failure_class"] == "unmatched_rollout"
    assert row["_ng_failure_message"] == "no materialized input row for (task 99, rollout 1)"
    assert key(row) == (99, 1) and row["agent_ref"] == {"name": AGENT}
    assert len(case.out_rows()) == 8
    assert (
        "Rollouts missing from the score: 1 of 9 materialized (1 unmatched_rollout routed this run; see "
        in (outcome.out)
    )
    assert "Metrics cover: 8 of 9 rollouts" in outcome.lines


def test_item_52_reverify_key_recomputed(case: Case) -> None:
    case.server.set((1, 1), kind="judge_failed")
    assert case.run().code == 0
    materialized = {key(json.loads(line)): line.encode() for line in case.inputs.read_text().splitlines()}
    rollouts = {key(json.loads(line)): line.encode() for line in case.rollouts_path.read_text().splitlines()}
    import yaml

    config = yaml.safe_load(case.config_path.read_text()) if case.config_path else {}
    verifier = verifier_sha256(config, "mcqa")
    written = case.out_rows() + read_jsonl(case.path("out_failures.jsonl"))
    assert len(written) == 9
    for row in written:
        source = hashlib.sha256(materialized[key(row)] + b"\n" + rollouts[key(row)]).hexdigest()
        assert row["_ng_reverify_key"] == reverify_key("gym", source, verifier)
        text = f"gymflow-reverify-key/1\ngym\n{source}\n{verifier}".encode()
        assert row["_ng_reverify_key"] == hashlib.sha256(text).hexdigest()
    block = {"resources_server": "mcqa", "config": {"mcqa": {"entrypoint": "app.py"}}}
    canonical = json.dumps(block, sort_keys=True, separators=(",", ":")).encode()
    assert verifier == hashlib.sha256(canonical).hexdigest()


_MALFORMED = "Malformed JSON in '{file}' at line 2: "


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "Malformed JSON in '{file}' at line 2: "),
        ("[1, 2]", "Malformed JSON in '{file}' at line 2: expected a JSON object, got an array"),
        (
            '{"_ng_task_index": "0", "_ng_rollout_index": 0}',
            "'{file}' line 2: _ng_task_index must be an integer",
        ),
        ('{"_ng_task_index": 0}', "'{file}' line 2: _ng_rollout_index must be an integer"),
        (
            '{"_ng_task_index": true, "_ng_rollout_index": 1}',
            "'{file}' line 2: _ng_task_index must be an integer",
        ),
        # what orjson refuses inside a field reverify does not read (selection reads only a few)
        ('{"_ng_task_index": 0, "_ng_rollout_index": 0, "x": 1e400}', _MALFORMED),
        ('{"_ng_task_index": 0, "_ng_rollout_index": 0, "s": "\\ud800"}', _MALFORMED),
    ],
)
def test_malformed_lines(case: Case, line: str, message: str) -> None:
    for target in ("inputs", "rollouts"):
        case.write()
        path = case.inputs if target == "inputs" else case.rollouts_path
        lines = path.read_text().splitlines()
        lines.insert(1, line)
        path.write_text("\n".join(lines) + "\n")
        outcome = case.run("--overwrite", write=False)
        assert outcome.code == 1, outcome
        assert outcome.error.startswith("Error: " + message.format(file=path)), outcome.err
        assert "Traceback" not in outcome.err
        assert not case.output.exists()
    assert case.server.log("/verify") == []


def test_same_file_refused(case: Case) -> None:
    outcome = case.run("--overwrite", output=case.rollouts_path)
    assert outcome.code == 1
    assert outcome.error == (
        f"Error: --output {str(case.rollouts_path)!r} is the same file as --rollouts; refusing to "
        "overwrite an "
        "input. Choose another --output."
    )
    assert len(read_jsonl(case.rollouts_path)) == 9
    _ = write_jsonl


def test_the_alarm_line_names_the_taskset_of_a_materialized_task_row() -> None:
    from gymflow.reverify._results import alarm_line

    row = {
        "_ng_task_index": 3,
        "_ng_rollout_index": 1,
        "agent_ref": {"name": AGENT},
        "task_id": {"taskset": "mcqa", "id": "q-7"},
        "task_input": {},
        "_ng_failure_class": "judge_failed",
        "_ng_failure_message": "judge timed out",
    }
    assert alarm_line(row) == (
        '🚨 [rollout_reverification] rollout dropped from the score: row={"_ng_rollout_index": 1, '
        f'"_ng_task_index": 3, "agent_name": "{AGENT}", "taskset": "mcqa"}} '
        "class=judge_failed error=judge timed out"
    )
    flat = {key: value for key, value in row.items() if key != "task_input"}  # no envelope: no taskset
    assert '"taskset"' not in alarm_line(flat)

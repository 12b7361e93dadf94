"""The metrics file follows 0.7.0 by default (reverify.md §3.10 point 1): the routed server's
``/aggregate_metrics`` answer written as 0.7.0 writes it; ``--local-metrics``; the fallback."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from tests.reverify.cases import AGENT, Case, case_fixture, key  # noqa: F401
from tests.reverify.server import aggregate
from tests.reverify.server_process import ServerProcess

pytestmark = pytest.mark.timeout(60)

METRICS = "out_aggregate_metrics.json"


def _as_07(label: str, answer: dict[str, Any]) -> dict[str, Any]:
    """The entry 0.7.0 writes for a server answer: agent_ref, then the four blocks in this order."""
    blocks = ("agent_metrics", "key_metrics", "group_level_metrics", "repeat_level_metrics")
    return {"agent_ref": {"name": label}, **{name: answer[name] for name in blocks}}


def _posted(server: ServerProcess) -> list[dict[str, Any]]:
    [request] = server.log("/aggregate_metrics")
    rows: list[dict[str, Any]] = request["body"]["verify_responses"]
    return rows


def test_default_writes_the_servers_answer_as_07_does(case: Case) -> None:
    outcome = case.run()
    assert outcome.code == 0, outcome
    rows = _posted(case.server)
    assert len(rows) == 9
    sent = {name for row in rows for name in row}
    assert not sent & {"responses_create_params", "response", "_ng_reverify_key"}  # as 0.7.0 sends them
    assert [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows] == sorted(
        key(r) for r in case.rollouts
    )
    data = case.path(METRICS).read_bytes()
    # byte for byte: what the server answered, in 0.7.0's entry layout, dumped as 0.7.0 dumps it
    assert data == orjson.dumps([_as_07(AGENT, aggregate(rows))], option=orjson.OPT_INDENT_2)
    [entry] = json.loads(data)
    assert list(entry) == [
        "agent_ref",
        "agent_metrics",
        "key_metrics",
        "group_level_metrics",
        "repeat_level_metrics",
    ]
    assert list(entry["key_metrics"]) == ["pass@1/accuracy", "mean/reward"]  # the server's order, not sorted
    assert list(entry["agent_metrics"]) != sorted(entry["agent_metrics"])
    assert b'"max/reward": 1.0,' in data and b'"num_repeats": 2' in data  # floats stay floats, ints ints
    assert entry["agent_metrics"]["mean/reward"] == 0.7777777777777778
    assert b"perf_summary" not in data and b'"server"' not in data  # what 0.7.0 does not keep
    assert "aggregate metrics" not in outcome.err
    # the blank line before "Key metrics for", as 0.7.0 prints it
    lines = outcome.lines
    at = lines.index(f"Key metrics for {AGENT}:")
    assert lines[at - 1] == "" and lines[at - 2] == "Computing aggregate metrics"
    assert json.loads("\n".join(lines[at + 1 : at + 5])) == entry["key_metrics"]


def test_server_metrics_flag_is_the_default(case: Case) -> None:
    assert case.run().code == 0
    default = case.path(METRICS).read_bytes()
    case.server.reset()
    assert case.run("--server-metrics", "--overwrite", write=False).code == 0
    assert case.path(METRICS).read_bytes() == default
    assert len(case.server.log("/aggregate_metrics")) == 1


def test_local_metrics_asks_no_server(case: Case) -> None:
    case.server.set_aggregate(500, {"detail": "must not be asked"})
    outcome = case.run("--local-metrics")
    assert outcome.code == 0, outcome
    assert case.server.log("/aggregate_metrics") == []
    assert "aggregate metrics" not in outcome.err
    [entry] = case.metrics()
    assert entry["agent_metrics"]["mean/reward"] == pytest.approx(7 / 9)
    assert "pass@1/accuracy" not in entry["agent_metrics"]  # the local default set has no pass@k


@pytest.mark.parametrize(
    ("status", "body", "detail"),
    [
        (404, {"detail": "Not Found"}, 'HTTP 404: {"detail":"Not Found"}'),
        (200, {"agent_metrics": [1]}, "its answer's agent_metrics is not a JSON object"),
        (200, [1], "answer is not a JSON object"),
    ],
)
def test_a_server_that_cannot_answer_gives_local_metrics_and_one_line(
    case: Case, status: int, body: Any, detail: str
) -> None:
    assert case.run("--local-metrics", output=case.path("local.jsonl")).code == 0
    case.server.reset()
    case.server.set_aggregate(status, body)
    outcome = case.run(write=False)
    assert outcome.code == 0, outcome
    warnings = [line for line in outcome.err.splitlines() if line.startswith("Warning: aggregate")]
    assert warnings == [
        f"Warning: aggregate metrics: resources server 'mcqa' ({detail}) did not answer /aggregate_metrics; "
        "the metrics file holds gymflow's local metrics for its rows, without that server's own metrics "
        "(pass --local-metrics to compute them locally on purpose)"
    ]
    assert case.path(METRICS).read_bytes() == case.path("local_aggregate_metrics.json").read_bytes()


def test_a_dropped_connection_falls_back(case: Case) -> None:
    assert case.run("--local-metrics", output=case.path("local.jsonl")).code == 0
    case.server.reset()
    case.server.set_aggregate(0)  # the connection closes without an answer
    outcome = case.run("--max-attempts", "1", write=False)
    assert outcome.code == 0, outcome
    [warning] = [line for line in outcome.err.splitlines() if line.startswith("Warning: aggregate")]
    assert "resources server 'mcqa' (RemoteProtocolError: " in warning
    assert case.path(METRICS).read_bytes() == case.path("local_aggregate_metrics.json").read_bytes()


def test_two_servers_one_without_metrics(
    case: Case, start_resources_server: Callable[..., ServerProcess]
) -> None:
    other = start_resources_server()
    for row in case.materialized + case.rollouts:
        row["agent_ref"] = {"name": "b_agent" if row["_ng_task_index"] < 3 else "a_agent"}
    case.config({"rs_b": case.server, "rs_a": other}, agents={"b_agent": "rs_b", "a_agent": "rs_a"})
    other.set_aggregate(404, {"detail": "Not Found"})
    outcome = case.run()
    assert outcome.code == 0, outcome
    [warning] = [line for line in outcome.err.splitlines() if line.startswith("Warning: aggregate")]
    assert "'rs_a' (HTTP 404" in warning and "rs_b" not in warning
    a_entry, b_entry = case.metrics()
    assert a_entry["agent_ref"] == {"name": "a_agent"} and "pass@1/accuracy" not in a_entry["agent_metrics"]
    assert b_entry == _as_07("b_agent", aggregate(_posted(case.server)))


def test_local_and_server_metrics_exclude_each_other(case: Case) -> None:
    outcome = case.run("--local-metrics", "--server-metrics")
    assert outcome.code == 2
    assert "`local_metrics` and `server_metrics` are mutually exclusive" in outcome.err
    assert not case.output.exists()


@pytest.mark.parametrize("metrics", ["--server-metrics", "--local-metrics"])
def test_rows_gathered_while_appended_give_the_files_read_back_gives(
    case: Case, monkeypatch: pytest.MonkeyPatch, metrics: str
) -> None:
    from gymflow.reverify._collect import Collected

    gathered = case.run(metrics, output=case.path("gathered.jsonl"))
    monkeypatch.setattr(Collected, "add", lambda self, row, length: False)  # finish reads the file back
    read_back = case.run(metrics, output=case.path("read_back.jsonl"), write=False)
    assert gathered.code == read_back.code == 0
    assert gathered.out.replace(str(case.path("gathered")), str(case.path("read_back"))) == read_back.out
    for suffix in (".jsonl", "_failures.jsonl", "_aggregate_metrics.json"):
        first, second = case.path(f"gathered{suffix}"), case.path(f"read_back{suffix}")
        assert first.read_bytes() == second.read_bytes(), suffix
    assert case.path("gathered.jsonl").read_bytes().count(b"\n") == 9


def test_the_rows_sent_for_the_metrics_are_kept_on_scratch_and_removed(
    case: Case, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path_factory.mktemp("scratch")
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert case.run().code == 0
    assert len(_posted(case.server)) == 9
    assert [name for name in os.listdir(scratch) if name.startswith("gymflow-sent-")] == []


def test_facts_read_back_from_the_rows_sent_are_the_rows_own() -> None:
    """A fresh run keeps each row only as the server receives it (no facts read while it runs);
    the local metrics of a server that does not answer read the facts from there: the same as
    the rows' own (usage numbers, an integer beyond 64 bits, booleans, masked rows, numbers
    inside what the server does not get)."""
    from gymflow.aggregate._rows import extract
    from gymflow.gym_config import Routing
    from gymflow.reverify._collect import output_row, sent_facts
    from gymflow.reverify._sent import SentRows

    rows = [
        {
            "_ng_task_index": task,
            "_ng_rollout_index": rollout,
            "agent_ref": {"name": AGENT},
            "reward": float(task % 2),
            "tokens": 2**70 + task,
            "ok": task % 3 == 0,
            "mask_sample": task == 2,
            "response": {"output": [{"n": 5}], "usage": {"input_tokens": 10 + task, "_skip": 1}},
            "responses_create_params": {"temperature": 0.5},
            "_ng_reverify_key": "k",
        }
        for task in range(4)
        for rollout in range(2)
    ]
    routing = Routing.of({"mcqa": {"resources_servers": {"mcqa": {"host": "h", "port": 1}}}})
    sent = SentRows()
    try:
        gathered = [output_row(row, routing, sent, "", facts=False) for row in rows]
        assert all(each is not None and each.facts is None and each.sent is not None for each in gathered)
        spans = [each.sent for each in gathered if each is not None and each.sent is not None]
        assert sent_facts(sent, spans) == [extract(row) for row in rows]
    finally:
        sent.close()

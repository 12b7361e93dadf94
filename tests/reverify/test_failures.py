"""reverify.md §2.6 and §4 points 1-2: per-row failures, retries, timeouts, concurrency (items 25, 42-48)."""

from __future__ import annotations

import pytest

from tests.reverify.cases import Case, case_fixture, key, read_jsonl, write_jsonl  # noqa: F401
from tests.reverify.server_process import free_port, mcqa_rows

pytestmark = pytest.mark.timeout(60)


def _sidecar(case: Case) -> dict[tuple[int, int], dict[str, object]]:
    return {key(r): r for r in read_jsonl(case.path("out_failures.jsonl"))}


def test_item_25_invalid_judge_responses(case: Case) -> None:
    case.server.set((0, 0), kind="invalid_judge")
    case.server.set((1, 1), kind="invalid_judge", retryable=False)
    config = case.config()
    config.write_text(config.read_text() + "retry_invalid_judge_responses: true\n")
    outcome = case.run()
    assert outcome.code == 0, outcome
    sidecar = _sidecar(case)
    assert (
        sidecar[(0, 0)]["_ng_failure_class"] == "judge_invalid"
        and "_ng_failure_terminal" not in sidecar[(0, 0)]
    )
    assert (
        sidecar[(1, 1)]["_ng_failure_class"] == "permanent"
        and sidecar[(1, 1)]["_ng_failure_terminal"] is True
    )
    assert len(case.out_rows()) == 7
    # without the setting the answers are ordinary successes
    case.config()
    assert case.run("--overwrite").code == 0
    assert len(case.out_rows()) == 9


def test_item_42_http_500_fails_only_its_row(case: Case) -> None:
    case.server.set((0, 0), kind="status", status=500)
    outcome = case.run()
    assert outcome.code == 0
    failure = _sidecar(case)[(0, 0)]
    assert failure["_ng_failure_class"] == "verify_http_error"
    assert failure["_ng_failure_http_status"] == 500 and failure["_ng_failure_attempts"] == 4
    assert failure["_ng_reverify_key"] and failure["agent_ref"] == {"name": "mcqa_simple_agent"}
    assert len([e for e in case.server.log("/verify") if tuple(e["key"]) == (0, 0)]) == 4
    assert len(case.out_rows()) == 8 and case.metrics()[0]["agent_metrics"]["mean/reward"] == 0.75
    assert "Metrics cover: 8 of 9 rollouts" in outcome.lines


def test_item_43_retry_after(case: Case) -> None:
    case.server.set((0, 0), kind="status", status=429, retry_after=1, times=1)
    assert case.run().code == 0
    attempts = [e for e in case.server.log("/verify") if tuple(e["key"]) == (0, 0)]
    assert len(attempts) == 2 and attempts[1]["t"] - attempts[0]["t"] >= 1.0
    assert len(case.out_rows()) == 9 and case.path("out_failures.jsonl").read_bytes() == b""


def test_item_44_422_not_retried(case: Case) -> None:
    detail = {"detail": [{"loc": ["body", "response"], "msg": "Field required", "type": "missing"}]}
    case.server.set((0, 0), kind="status", status=422, body=detail)
    assert case.run().code == 0
    assert len([e for e in case.server.log("/verify") if tuple(e["key"]) == (0, 0)]) == 1
    failure = _sidecar(case)[(0, 0)]
    assert failure["_ng_failure_class"] == "verify_http_error" and failure["_ng_failure_http_status"] == 422
    assert "Field required" in str(failure["_ng_failure_response_body"])
    assert failure["_ng_failure_attempts"] == 1 and len(case.out_rows()) == 8


def test_item_45_timeout(case: Case) -> None:
    case.server.set((0, 0), kind="hang", hang_s=30)
    outcome = case.run("--verify-timeout", "1", "--max-attempts", "1")
    assert outcome.code == 0
    failure = _sidecar(case)[(0, 0)]
    assert failure["_ng_failure_class"] == "verify_timeout" and failure["_ng_failure_http_status"] is None
    assert len(case.out_rows()) == 8


def test_item_46_connection_refused(case: Case) -> None:
    # recovery mode skips the guard, so the run reaches /verify with nothing listening
    failed = case.rollouts.pop()
    case.write()
    write_jsonl(case.path("rollouts_failures.jsonl"), [dict(failed, _ng_failure_class="judge_failed")])
    case.config({"mcqa": {"host": "127.0.0.1", "port": free_port()}})
    outcome = case.run("--judge-failed-only", "--max-attempts", "2", write=False)
    assert outcome.code == 0, outcome
    [failure] = read_jsonl(case.path("out_failures.jsonl"))
    assert failure["_ng_failure_class"] == "verify_connection_error" and failure["_ng_failure_attempts"] == 2
    assert len(case.out_rows()) == 8  # the seeded successes


def test_item_47_non_object_answer(case: Case) -> None:
    case.server.set((0, 0), kind="non_object")
    assert case.run().code == 0
    failure = _sidecar(case)[(0, 0)]
    assert (
        failure["_ng_failure_class"] == "verify_invalid_response"
        and failure["_ng_failure_response_body"] == "[1]"
    )


def test_item_48_default_concurrency_32(case: Case) -> None:
    case.materialized, case.rollouts = mcqa_rows(50, 2)
    case.server.set(None, latency_ms=50)
    outcome = case.run()
    assert outcome.code == 0
    assert not any(line.startswith("Verifying with") for line in outcome.lines)  # said for --concurrency only
    assert case.server.stats()["peak_in_flight"] == 32
    assert len(case.out_rows()) == 100

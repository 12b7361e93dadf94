"""The progress callback and the provenance record (secrets redacted)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from gymflow.reverify import options_from_config, run_reverify
from tests.reverify.cases import Case, case_fixture  # noqa: F401

pytestmark = pytest.mark.timeout(60)


def test_progress_callback_and_secret_redaction(case: Case) -> None:
    case.write()
    config = yaml.safe_load(case.config().read_text())
    config["mcqa"]["resources_servers"]["mcqa"]["judge_api_key"] = "sk-very-secret-value"
    options = options_from_config(
        {
            "materialized_inputs_jsonl_fpath": str(case.inputs),
            "rollouts_jsonl_fpath": str(case.rollouts_path),
            "output_jsonl_fpath": str(case.output),
            "num_samples_in_parallel": 2,
            "reuse_server": True,  # the judge key is the running server's business
        }
    )
    calls: list[tuple[int, int, int]] = []
    case.server.set((2, 0), kind="judge_failed")
    lines: list[str] = []
    outcome = run_reverify(options, config, lines.append, progress=lambda *a: calls.append(a))
    assert calls[-1] == (9, 1, 9) and [c[0] for c in calls] == list(range(1, 10))
    assert outcome.tally.succeeded == 8 and outcome.tally.failures == {"judge_failed": 1}
    text = case.path("out.provenance.json").read_text()
    assert "sk-very-secret-value" not in text
    record: dict[str, Any] = json.loads(text)
    assert (
        record["parameters"]["gym_config"]["mcqa"]["resources_servers"]["mcqa"]["judge_api_key"]
        == "<redacted>"
    )
    assert {d["uri"].rsplit("/", 1)[-1] for d in record["inputs"]} == {
        case.inputs.name,
        case.rollouts_path.name,
    }
    assert [d["uri"].rsplit("/", 1)[-1] for d in record["outputs"]] == [
        "out.jsonl", "out_failures.jsonl", "out_aggregate_metrics.json"
    ]  # fmt: skip
    assert record["counts"]["failed"] == {"judge_failed": 1}

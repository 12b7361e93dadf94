"""reverify.md §0 G: inputs and outputs on S3 (moto server), the remote output staged, --resume from S3."""

from __future__ import annotations

import json

import pytest

from gymflow import storage
from tests.reverify.cases import Case, case_fixture, key  # noqa: F401

pytestmark = pytest.mark.timeout(60)


def _put(url: str, rows: list[dict[str, object]]) -> None:
    storage.write_atomic(url, "".join(json.dumps(r) + "\n" for r in rows).encode())


def _rows(url: str) -> list[dict[str, object]]:
    with storage.open_read(url) as handle:
        return [json.loads(line) for line in handle.read().splitlines() if line.strip()]


def test_inputs_and_outputs_on_s3_with_resume(case: Case, s3_bucket: str) -> None:
    inputs, rollouts, output = (
        f"{s3_bucket}/run/{n}" for n in ("inputs.jsonl", "rollouts.jsonl", "out.jsonl")
    )
    _put(inputs, case.materialized)
    _put(rollouts, case.rollouts)
    config = str(case.config())
    args = ("--direct", "--config", config, "--inputs", inputs, "--rollouts", rollouts, "--output", output)
    outcome = case.cli(*args)
    assert outcome.code == 0, outcome
    rows = _rows(output)
    assert [key(r) for r in rows] == sorted(key(r) for r in case.rollouts)
    assert storage.isfile(f"{s3_bucket}/run/out_failures.jsonl")
    metrics = json.loads(storage.read_range(f"{s3_bucket}/run/out_aggregate_metrics.json", 0, 10**7))
    assert metrics[0]["agent_metrics"]["mean/reward"] == 0.7777777777777778
    record = json.loads(storage.read_range(f"{s3_bucket}/run/out.provenance.json", 0, 10**7))
    assert record["outputs"][0]["uri"] == output
    assert f"        Re-verified rollouts: {output}" in outcome.lines

    # protection applies to the remote output too
    outcome = case.cli(*args)
    assert outcome.code == 1 and outcome.error.startswith(f"Error: Output file already exists: '{output}'")

    # keep 5 rows, then resume from S3: the other 4 are verified and appended
    _put(output, rows[:5])
    case.server.reset()
    outcome = case.cli(*args, "--resume")
    assert outcome.code == 0, outcome
    assert "- 5 rows already done (in main jsonl)" in outcome.lines
    assert sorted(tuple(e["key"]) for e in case.server.log("/verify")) == sorted(key(r) for r in rows[5:])
    assert _rows(output) == rows

"""The Prefect path writes what the direct path writes (one flow run: ~10 s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymflow.cli import main

from .rows import mcqa_rows, write_jsonl


def test_prefect_flow_matches_direct(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = mcqa_rows()
    write_jsonl(tmp_path / "s" / "a.jsonl", rows[:5])
    write_jsonl(tmp_path / "s" / "b.jsonl", rows[5:])
    common = ["eval", "aggregate", "-i", f"{tmp_path}/s/*.jsonl", "--no-health-check"]
    assert main([*common, "-o", str(tmp_path / "direct" / "m.jsonl"), "--direct", "--workers", "1"]) == 0
    direct_out = capsys.readouterr().out
    assert main([*common, "-o", str(tmp_path / "flow" / "m.jsonl")]) == 0
    flow_out = capsys.readouterr().out
    assert flow_out == direct_out.replace("/direct/", "/flow/")
    for name in ("m.jsonl", "m_aggregate_metrics.json"):
        assert (tmp_path / "flow" / name).read_bytes() == (tmp_path / "direct" / name).read_bytes()
    record = json.loads((tmp_path / "flow" / "m.provenance.json").read_text())
    assert record["orchestrator"]["kind"] == "prefect" and record["orchestrator"]["flow_run_id"]

"""Provenance never claims settings that were not used (reverify.md §3.10 point 4): a server already
answering at its configured port cannot be given the config's settings, so such a config is refused
unless ``--reuse-server``; a server gymflow did not launch is recorded ``"settings": "unverified"``, one
it launched ``"launched"``. Rows are keyed by the block as the config gives it (§4 point 4) either
way: with ``--reuse-server`` the user vouches for it, and a resume under other settings is refused."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
import yaml

from gymflow.gym_config import verifier_sha256
from tests.reverify.cases import AGENT, Case, case_fixture, key  # noqa: F401
from tests.reverify.server_process import REPO_ROOT

pytestmark = pytest.mark.timeout(60)

LENIENT = "++mcqa.resources_servers.mcqa.grading_mode=lenient_boxed"


def servers_of(case: Case) -> list[dict[str, Any]]:
    record = json.loads(case.path("out.provenance.json").read_text())
    servers: list[dict[str, Any]] = record["verifier"]["resources_servers"]
    return servers


def refusal(case: Case, keys: str) -> str:
    return (
        f"Error: A resources server already answers at 127.0.0.1:{case.server.port}; gymflow cannot apply "
        f"{keys} to it. Stop it, or pass --reuse-server to use it as it runs."
    )


def test_settings_for_a_running_server_are_refused(case: Case) -> None:
    outcome = case.run(LENIENT)
    assert outcome.code == 1
    assert outcome.error == refusal(case, "grading_mode")
    assert outcome.err.count("\n") == 1  # one line
    assert not case.output.exists() and not case.path("out_failures.jsonl").exists()
    assert case.server.log("/verify") == []
    # every setting is named, sorted; descriptive metadata and null keys are none
    case.config(
        extra={"mcqa": {"judge_model": "j", "domain": "knowledge", "verified": False, "grading_mode": None}}
    )
    outcome = case.run(LENIENT, "++mcqa.resources_servers.mcqa.max_tokens=5", write=False)
    assert outcome.error == refusal(case, "grading_mode, judge_model, max_tokens")


@pytest.mark.parametrize("how", ["--reuse-server", "++reuse_server=true"])
def test_reuse_server_records_the_settings_unverified(case: Case, how: str) -> None:
    config_path = case.config()
    outcome = case.run(LENIENT, how)
    assert outcome.code == 0, outcome.err
    assert len(case.out_rows()) == 9 and len(case.server.log("/verify")) == 9
    (server,) = servers_of(case)
    assert server["settings"] == "unverified"
    config = yaml.safe_load(config_path.read_text())
    config["mcqa"]["resources_servers"]["mcqa"]["grading_mode"] = "lenient_boxed"
    assert server["config_sha256"] == verifier_sha256(config, "mcqa")
    # the same settings again: every row done; other settings: refused, as for a launched server
    case.server.reset()
    resumed = case.run("--resume", how, LENIENT, write=False)
    assert resumed.code == 0, resumed.err
    assert "- 9 rows already done (in main jsonl)" in resumed.lines
    assert case.server.log("/verify") == []
    changed = case.run("--resume", how, "++mcqa.resources_servers.mcqa.grading_mode=x", write=False)
    assert changed.code == 1, changed.err
    assert changed.error.startswith(f"Error: Cannot resume: '{case.output}' holds 9 result(s)"), changed.err


def test_a_running_server_without_settings_is_used_and_recorded_unverified(case: Case) -> None:
    case.config(extra={"mcqa": {"domain": "knowledge", "description": "d", "grading_mode": None}})
    outcome = case.run()
    assert outcome.code == 0, outcome.err
    assert [s["settings"] for s in servers_of(case)] == ["unverified"]
    keys = {row["_ng_reverify_key"] for row in case.out_rows()}
    assert len(keys) == 9  # one per row, all derived from the unverified identity (test_native item 52)


def test_a_launched_server_is_recorded_launched_and_keyed_by_its_settings(case: Case) -> None:
    command = [sys.executable, "-m", "tests.reverify.server", "--host", "{host}", "--port", "{port}"]
    config_path = case.config({"mcqa": {"command": command, "dir": str(REPO_ROOT)}}, agents={AGENT: "mcqa"})
    outcome = case.run(LENIENT)
    assert outcome.code == 0, outcome.err
    (server,) = servers_of(case)
    assert server["settings"] == "launched"
    config = yaml.safe_load(config_path.read_text())
    config["mcqa"]["resources_servers"]["mcqa"]["grading_mode"] = "lenient_boxed"
    assert server["config_sha256"] == verifier_sha256(config, "mcqa")
    assert case.server.log() == []  # the shared server was never asked
    rows = {key(r): r["_ng_reverify_key"] for r in case.out_rows()}
    assert len(rows) == 9


def test_prefect_batch_key_of_a_running_server_names_its_settings(case: Case) -> None:
    """Default (Prefect) mode: the cached batch of a reused server is named by the settings the
    config gives it, so a rerun under another setting verifies again; the same setting is a hit."""
    assert case.run("--reuse-server", direct=False).code == 0
    assert len(case.server.log("/verify")) == 9
    case.server.reset()
    again = case.run("--reuse-server", output=case.path("again.jsonl"), write=False, direct=False)
    assert again.code == 0, again.err
    assert case.server.log("/verify") == []  # the batch came from the result store
    outcome = case.run("--reuse-server", LENIENT, output=case.path("other.jsonl"), write=False, direct=False)
    assert outcome.code == 0, outcome.err
    assert len(case.server.log("/verify")) == 9
    record = json.loads(case.path("other.provenance.json").read_text())
    assert record["verifier"]["resources_servers"][0]["settings"] == "unverified"

"""reverify.md §2.4-§2.5 and §4 point 5: the ReverifyMode guard (items 15-20)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
import yaml

from gymflow.reverify import options_from_config, prepare
from tests.reverify.cases import AGENT, Case, case_fixture, read_jsonl, write_jsonl  # noqa: F401
from tests.reverify.server_process import ServerProcess

pytestmark = pytest.mark.timeout(60)


def _refusal(servers: str) -> str:
    return (
        f"Error: Resource server(s) {servers} have reverify_mode=UNSUPPORTED or UNKNOWN. Rewards computed "
        "by reverification may be incorrect. Pass ++force=true to override (output will be prefixed with "
        "'unsafe_')."
    )


def _warning(servers: str) -> str:
    return (
        f"WARNING: resource server(s) {servers} have reverify_mode=UNSUPPORTED or UNKNOWN. Rewards computed "
        "by reverification may be incorrect. Output is prefixed with 'unsafe_'."
    )


def test_item_15_reverify_mode_wire(case: Case) -> None:
    response = httpx.get(f"{case.server.url}/reverify_mode", trust_env=False)
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    assert response.content == b'"stateless"' and len(response.content) == 11


def test_item_16_unknown_refused(case: Case) -> None:
    case.server.set_mode("unknown")
    outcome = case.run()
    assert outcome.code == 1
    assert outcome.error == _refusal("['mcqa']")
    assert sorted(p.name for p in case.root.iterdir()) == sorted(
        ["gym_config.yaml", case.inputs.name, case.rollouts_path.name]
    )
    assert case.server.log("/reverify_mode") and case.server.log("/verify") == []


def test_item_17_force_prefixes_unsafe(case: Case) -> None:
    case.server.set_mode("unknown")
    outcome = case.run("--force")
    assert outcome.code == 0, outcome
    assert outcome.lines.count(_warning("['mcqa']")) == 2
    assert outcome.lines[-1] == _warning("['mcqa']")
    assert outcome.lines.index(_warning("['mcqa']")) < outcome.lines.index("Computing aggregate metrics")
    for name in ("unsafe_out.jsonl", "unsafe_out_failures.jsonl", "unsafe_out_aggregate_metrics.json"):
        assert case.path(name).is_file()
    assert not case.output.exists()
    assert len(case.out_rows("unsafe_out.jsonl")) == 9
    # --resume reads the prefixed files
    outcome = case.run("--force", "--resume", write=False)
    assert outcome.code == 0
    assert "- 9 rows already done (in main jsonl)" in outcome.lines


def test_item_18_judge_failed_only_skips_guard(case: Case) -> None:
    case.server.set_mode("unknown")
    failed = case.rollouts.pop()
    case.write()
    write_jsonl(case.path("rollouts_failures.jsonl"), [dict(failed, _ng_failure_class="judge_failed")])
    outcome = case.run("--judge-failed-only", write=False)
    assert outcome.code == 0, outcome
    # at most the launcher's "is it up?" probe; the guard itself never asks (checked below)
    assert len(case.server.log("/reverify_mode")) <= 1
    assert len(case.out_rows()) == 9 and not case.path("unsafe_out.jsonl").exists()

    options = options_from_config(
        {
            "materialized_inputs_jsonl_fpath": str(case.inputs),
            "rollouts_jsonl_fpath": str(case.rollouts_path),
            "output_jsonl_fpath": str(case.path("again.jsonl")),
            "judge_failed_only": True,
        }
    )
    config = yaml.safe_load(case.config_path.read_text()) if case.config_path else {}
    case.server.reset()
    plan = prepare(options, config, lambda _: None)
    # The one request is the launcher's probe (is the configured server up?); a guard would ask again.
    assert len(case.server.log("/reverify_mode")) == 1
    assert (
        plan.modes == {} and plan.unsafe_servers == [] and plan.paths.output == str(case.path("again.jsonl"))
    )
    plan.abort()


def test_item_19_unused_unknown_server_ignored(
    case: Case, start_resources_server: Callable[..., ServerProcess]
) -> None:
    unused = start_resources_server(mode="unknown")
    unused.reset()  # forget the fixture's start-up probe
    case.config({"mcqa": case.server, "unused": unused}, agents={AGENT: "mcqa", "other_agent": "unused"})
    outcome = case.run()
    assert outcome.code == 0, outcome
    assert unused.log() == [] and len(case.out_rows()) == 9


def test_item_20_task_source_to_unknown_refused(
    case: Case, start_resources_server: Callable[..., ServerProcess]
) -> None:
    other = start_resources_server(mode="unknown")
    case.config({"mcqa": case.server, "other_rs": other}, agents={AGENT: "mcqa"})
    case.materialized[3]["task_source"] = "other_rs"
    outcome = case.run()
    assert outcome.code == 1
    assert outcome.error == _refusal("['other_rs']")
    assert not case.output.exists() and other.log("/verify") == []


@pytest.mark.parametrize(
    ("mode", "status", "detail"), [("weird", 200, "unexpected answer"), ("x", 500, "HTTP 500")]
)
def test_bad_reverify_mode_answer(case: Case, mode: str, status: int, detail: str) -> None:
    case.server.set_mode(mode, status=status)
    outcome = case.run("--max-attempts", "1")
    assert outcome.code == 1
    assert outcome.error.startswith(
        f"Error: reverify: could not read reverify_mode from resources server 'mcqa': {detail}"
    )
    assert not case.output.exists()
    _ = read_jsonl

"""reverify.md §1: configuration errors (items 1-4), overrides, and user errors without tracebacks."""

from __future__ import annotations

import pytest

from gymflow.errors import UsageError
from gymflow.reverify import options_from_config
from tests.reverify.cases import Case, case_fixture  # noqa: F401

pytestmark = pytest.mark.timeout(60)

PREFIX = "invalid configuration: <config> (Value error, "


def _error(case: Case, *args: str) -> str:
    outcome = case.cli("--direct", *args)
    assert outcome.code == 2, outcome
    assert outcome.err.splitlines()[-1].startswith("gymflow eval reverify: error: ")
    assert case.server.log() == []  # nothing contacted
    return outcome.err.splitlines()[-1].removeprefix("gymflow eval reverify: error: ")


BASE = ("--inputs", "m.jsonl", "--output", "o.jsonl")


def test_item_01_append_rules(case: Case) -> None:
    assert _error(case, *BASE, "--rollouts", "r.jsonl", "+append=true") == (
        PREFIX + "`append` is only valid together with `judge_failed_only` (pass --judge-failed-only).)."
    )
    assert _error(case, *BASE, "--rollouts", "r.jsonl", "--append", "--judge-failed-only", "--overwrite") == (
        PREFIX + "`append` and `overwrite` are mutually exclusive: one appends, the other clears.)."
    )
    # checked first, also in ATIF mode
    assert _error(case, *BASE, "--input-format", "atif", "--append") == (
        PREFIX + "`append` is only valid together with `judge_failed_only` (pass --judge-failed-only).)."
    )


def test_item_02_gym_mode_rules(case: Case) -> None:
    assert _error(case, *BASE) == (
        PREFIX + "native Gym reverification requires `rollouts_jsonl_fpath` (pass --rollouts).)."
    )
    assert _error(case, *BASE, "--rollouts", "r.jsonl", "--atif-manifest", "man.jsonl") == (
        PREFIX + "`atif_manifest_jsonl_fpath` is only valid with input_format=atif.)."
    )


def test_item_03_atif_mode_rules(case: Case) -> None:
    atif = (*BASE, "--input-format", "atif")
    assert _error(case, *atif) == (
        PREFIX + "ATIF reverification requires `atif_manifest_jsonl_fpath` (pass --atif-manifest).)."
    )
    manifest = (*atif, "--atif-manifest", "man.jsonl")
    assert _error(case, *manifest, "--rollouts", "r.jsonl") == (
        PREFIX + "`rollouts_jsonl_fpath` cannot be combined with input_format=atif.)."
    )
    assert _error(case, *manifest, "--judge-failed-only") == (
        PREFIX + "ATIF reverification does not support judge-failure recovery or append mode.)."
    )
    assert _error(case, *manifest, "--force") == (
        PREFIX + "ATIF reverification requires a stateless verifier; --force is not supported.)."
    )


def test_item_04_field_and_missing_errors(case: Case) -> None:
    gym = (*BASE, "--rollouts", "r.jsonl")
    assert _error(case, *gym, "--concurrency", "0") == (
        "invalid configuration: num_samples_in_parallel (Input should be greater than or equal to 1)."
    )
    assert _error(case, *gym, "--limit", "0") == (
        "invalid configuration: limit (Input should be greater than or equal to 1)."
    )
    assert _error(case, *gym, "--input-format", "relay") == (
        "invalid configuration: input_format (Input should be 'gym' or 'atif')."
    )
    assert _error(case, "--rollouts", "r.jsonl") == (
        "missing required configuration: materialized_inputs_jsonl_fpath, output_jsonl_fpath. Provide each "
        "via its flag (see --help) or as a +materialized_inputs_jsonl_fpath=<value> override."
    )


def test_options_from_config_defaults_and_g_keys() -> None:
    options = options_from_config(
        {"materialized_inputs_jsonl_fpath": "m", "rollouts_jsonl_fpath": "r", "output_jsonl_fpath": "o"}
    )
    assert (options.num_samples_in_parallel, options.verify_timeout_s, options.verify_max_attempts) == (
        32,
        300.0,
        4,
    )
    assert not options.resume_from_cache and not options.server_metrics
    with pytest.raises(UsageError, match=r"verify_timeout_s \(Input should be greater than 0\)"):
        options_from_config({**options.model_dump(), "verify_timeout_s": 0})
    with pytest.raises(
        UsageError, match=r"verify_max_attempts \(Input should be greater than or equal to 1\)"
    ):
        options_from_config({**options.model_dump(), "verify_max_attempts": 0})


def test_command_keys_as_overrides_and_config(case: Case) -> None:
    """``+materialized_inputs_jsonl_fpath=...`` and keys in the YAML itself work like flags."""
    case.write()
    config = case.config()
    config.write_text(config.read_text() + f"output_jsonl_fpath: {case.output}\n")
    outcome = case.cli(
        "--direct",
        "--config",
        str(config),
        f"+materialized_inputs_jsonl_fpath={case.inputs}",
        f"rollouts_jsonl_fpath={case.rollouts_path}",
        "++limit=2",
    )
    assert outcome.code == 0, outcome
    assert len(case.out_rows()) == 2


def test_unreadable_and_bad_configs(case: Case) -> None:
    case.write()
    args = ("--inputs", str(case.inputs), "--rollouts", str(case.rollouts_path), "--output", str(case.output))
    missing = case.path("nope.yaml")
    outcome = case.cli("--direct", "--config", str(missing), *args)
    assert outcome.code == 1 and "Traceback" not in outcome.err
    assert outcome.error.startswith(f"Error: config {missing}: cannot read it:")
    bad = case.path("bad.yaml")
    bad.write_text("mcqa: [unclosed\n")
    outcome = case.cli("--direct", "--config", str(bad), *args)
    assert outcome.code == 2 and f"config {bad}: not valid YAML" in outcome.err
    config = case.config()
    outcome = case.cli("--direct", "--config", str(config), *args, "mcqa.resources_servers.mcqa.nothing=1")
    assert outcome.code == 2
    assert (
        "Could not override 'mcqa.resources_servers.mcqa.nothing'. To append to your config use +"
        in outcome.err
    )
    outcome = case.cli("--direct", "--config", str(config), *args, "--bogus")
    assert outcome.code == 2 and "unrecognized arguments: --bogus" in outcome.err
    assert not case.output.exists()


def test_config_that_routes_nowhere(case: Case) -> None:
    case.write()
    config = case.path("empty.yaml")
    config.write_text("other: {x: 1}\n")
    outcome = case.cli(
        "--direct",
        "--config",
        str(config),
        "--inputs",
        str(case.inputs),
        "--rollouts",
        str(case.rollouts_path),
        "--output",
        str(case.output),
    )
    assert outcome.code == 1
    assert outcome.error == "Error: reverify: no resources server found in the config."
    assert not case.output.exists()

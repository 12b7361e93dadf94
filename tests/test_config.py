"""One Hydra configuration for every command: flags and ``++key=`` overrides land in the same
composed config, ``$GYMFLOW_CONFIG`` merges on top, errors are one line naming file and key, and
provenance records hold the resolved config with secrets redacted."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from gymflow import provenance
from gymflow.cli import aggregate as aggregate_cli
from gymflow.cli import build_parser, main
from gymflow.cli import post as post_cli
from gymflow.cli import reverify as reverify_cli
from gymflow.cli import serve as serve_cli
from gymflow.cli.setup import flags_given
from gymflow.conf import options as options_module
from gymflow.conf.compose import USER_CONFIG_ENV, compose, load_config
from gymflow.config import HealthCheckConfig, JoinConfig, UiConfig
from gymflow.errors import UsageError
from gymflow.frozen import FrozenDict
from tests.aggregate.rows import mcqa_rows, write_jsonl
from tests.health.builders import record, write_lines

REPO = Path(__file__).resolve().parents[1]
SECRET = "s3cr3t-value-never-recorded"


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(USER_CONFIG_ENV, raising=False)


def _parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    args, extras = build_parser().parse_known_args(list(argv))
    return args, extras


def _health(argv: Sequence[str]) -> Any:
    from gymflow.cli.health import _FLAGS

    args, extras = _parse(["eval", "health-check", "run", *argv])
    return compose("health_check", flags=flags_given(args, _FLAGS), overrides=extras).validate(
        HealthCheckConfig
    )


def _join(argv: Sequence[str]) -> Any:
    from gymflow.cli.join import _FLAGS

    args, extras = _parse(["eval", "join", "run", *argv])
    return compose("join", flags=flags_given(args, _FLAGS), overrides=extras).validate(JoinConfig)


def _aggregate(argv: Sequence[str]) -> Any:
    args, extras = _parse(["eval", "aggregate", *argv])
    composed, config = aggregate_cli.compose_aggregate(args, extras)
    return aggregate_cli.build_options(composed, config), config


def _reverify(argv: Sequence[str]) -> Any:
    args, extras = _parse(["eval", "reverify", *argv])
    options, gym, composed = reverify_cli.build_options(args, extras)
    return options, gym, composed.data["direct"], composed.data["verbose"]


def _post(run: Path) -> Callable[[Sequence[str]], Any]:
    def build(argv: Sequence[str]) -> Any:
        args, extras = _parse(["eval", "post", str(run), *argv])
        composed, config = options_module.compose_post(flags_given(args, post_cli._FLAGS), extras)
        return options_module.post_options(str(run), composed, config), config.direct, config.verbose

    return build


def _serve(argv: Sequence[str]) -> Any:
    args, _ = _parse(["serve", *argv])
    return serve_cli.serve_config(args)[1]


def _ui(argv: Sequence[str]) -> Any:
    args, extras = _parse(["ui", *argv])
    overrides = extras
    return compose("ui", flags={"stop": True} if args.stop else {}, overrides=overrides).validate(UiConfig)


def test_every_flag_and_its_override_give_the_same_options(tmp_path: Path) -> None:
    gym = tmp_path / "gym.yaml"
    gym.write_text("mcqa:\n  resources_servers:\n    mcqa:\n      host: 127.0.0.1\n      port: 1\n")
    cases: list[tuple[Callable[[Sequence[str]], Any], list[str], list[str]]] = [
        (
            _health,
            ["--rollouts-file", "r.jsonl", "--workers", "3", "--ignore", "model_call_failed", "--json"]
            + ["-v", "--direct", "--no-cache"],
            ["rollouts_file=r.jsonl", "++workers=3", "+ignore_checks=model_call_failed", "++json=true"]
            + ["++verbose=true", "++direct=true", "++no_cache=true"],
        ),
        (
            _join,
            ["--rollouts", "r.jsonl", "--no-capture", "--output", "o.jsonl", "--no-perf"]
            + ["--summary", "s.json", "--json", "--workers", "2", "-v", "--direct", "--no-cache"],
            ["++rollouts_file=r.jsonl", "++no_capture=true", "++output=o.jsonl", "++no_perf=true"]
            + ["++summary=s.json", "++json=true", "++workers=2", "++verbose=true", "++direct=true"]
            + ["++no_cache=true"],
        ),
        (
            _aggregate,
            ["-i", "s/*.jsonl", "-o", "o/m.jsonl", "--config", str(gym), "--no-health-check"]
            + ["--health-check-workers", "2", "--health-check-ignore", "model_call_failed"]
            + ["--server-metrics", "--workers", "2", "--direct", "--no-cache", "-v"],
            ["+input_glob=s/*.jsonl", "+output_jsonl_fpath=o/m.jsonl", f"++config_paths=[{gym}]"]
            + ["++disable_health_check=true", "++health_check_workers=2"]
            + ["++health_check_ignored_checks=model_call_failed", "++server_metrics=true", "++workers=2"]
            + ["++direct=true", "++no_cache=true", "++verbose=true"],
        ),
        (
            _reverify,
            ["--config", str(gym), "--input-format", "gym", "--inputs", "m.jsonl", "--rollouts", "r.jsonl"]
            + ["--output", "o.jsonl", "--concurrency", "4", "--limit", "2", "--verify-timeout", "9"]
            + ["--max-attempts", "2", "--force", "--overwrite", "--resume", "--disable-aggregation"]
            + ["--judge-failed-only", "--server-metrics", "--direct", "-v"],
            [f"+config_paths=[{gym}]", "++input_format=gym", "+materialized_inputs_jsonl_fpath=m.jsonl"]
            + ["+rollouts_jsonl_fpath=r.jsonl", "+output_jsonl_fpath=o.jsonl"]
            + ["++num_samples_in_parallel=4", "++limit=2", "++verify_timeout_s=9"]
            + ["++verify_max_attempts=2", "++force=true", "++overwrite=true", "++resume_from_cache=true"]
            + ["++disable_aggregation=true", "++judge_failed_only=true", "++server_metrics=true"]
            + ["++direct=true", "++verbose=true"],
        ),
        (
            _post(tmp_path),
            ["--config", str(gym), "--direct", "--no-cache", "-v"],
            [f"++config_paths=[{gym}]", "++direct=true", "++no_cache=true", "++verbose=true"],
        ),
        (
            _serve,
            ["--config", str(gym), "--sweep", "s3://b/r", "--sweep-interval", "60"]
            + ["--evaluation-flow", "evaluate", "--run-parameter", "out", "-v"],
            [],  # serve hands its overrides to eval post: its own keys come from flags and files
        ),
        (_ui, ["--stop"], ["++stop=true"]),
    ]
    for build, flags, overrides in cases:
        from_flags = build(flags)
        try:
            baseline = build([])
        except UsageError:  # aggregate and reverify have required keys
            baseline = None
        assert from_flags != baseline, build
        if overrides:
            assert build(overrides) == from_flags, (build, overrides)


def test_serve_keys_come_from_the_user_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "user.yaml"
    user.write_text("serve:\n  sweep: s3://b/r\n  sweep_interval: 60\n")
    monkeypatch.setenv(USER_CONFIG_ENV, str(user))
    assert (_serve([]).sweep, _serve([]).sweep_interval) == ("s3://b/r", 60.0)
    assert _serve(["--sweep-interval", "5"]).sweep_interval == 5.0  # the flag wins


def test_a_flag_wins_over_an_override_and_the_user_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = tmp_path / "user.yaml"
    user.write_text("health_check:\n  workers: 5\n  rollouts_file: from-file.jsonl\n")
    monkeypatch.setenv(USER_CONFIG_ENV, str(user))
    assert (_health([]).workers, _health([]).rollouts_file) == (5, "from-file.jsonl")
    assert _health(["++workers=6"]).workers == 6
    assert _health(["++workers=6", "--workers", "7"]).workers == 7
    # A block for another command does not leak into this one.
    user.write_text("join:\n  workers: 5\n")
    assert _health([]).workers is None


def test_aggregate_takes_0_7_0_key_names_in_place_of_the_flags(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "s" / "a.jsonl", mcqa_rows(tasks=2, repeats=1))
    out = tmp_path / "o" / "m.jsonl"
    args = [f"+input_glob={tmp_path}/s/*.jsonl", f"+output_jsonl_fpath={out}", "++disable_health_check=true"]
    assert main(["eval", "aggregate", *args, "--direct"]) == 0
    assert len(out.read_text().splitlines()) == 2
    assert (tmp_path / "o" / "m_aggregate_metrics.json").is_file()
    with pytest.raises(UsageError, match=r"^missing required configuration: output_jsonl_fpath\. "):
        _aggregate([f"+input_glob={tmp_path}/s/*.jsonl"])


def test_aggregate_options_hold_frozen_mappings(tmp_path: Path) -> None:
    gym = tmp_path / "gym.yaml"
    gym.write_text(
        "env:\n  environment_servers:\n    impl:\n      agent: {name: my_agent}\n"
        "judge:\n  resources_servers:\n    mcqa: {host: 127.0.0.1, port: 1}\n"
    )
    options, config = _aggregate(["-i", "s/*", "-o", "o.jsonl", "--config", str(gym), "--server-metrics"])
    assert options.agent_environments == {"my_agent": "env"}
    assert config.config_paths == (str(gym),)
    for mapping in (options.agent_environments, options.server_config, options.server_config["judge"]):
        assert isinstance(mapping, FrozenDict)
    with pytest.raises(TypeError):
        options.server_config["judge"]["x"] = 1  # type: ignore[index]
    post, _, _ = _post(tmp_path)(["--config", str(gym)])
    assert isinstance(post.gym_config["env"], FrozenDict)
    assert isinstance(post.aggregate.agent_environments, FrozenDict)


def test_user_config_adds_s3_storage_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "gymflow.yaml"
    user.write_text(
        "storage:\n  options:\n    s3:\n      endpoint_url: http://127.0.0.1:9000\n"
        "      client_kwargs: {region_name: us-east-1}\nrunner:\n  kind: dask\n"
        "prefect:\n  result_store: /tmp/results\n"
    )
    monkeypatch.setenv(USER_CONFIG_ENV, str(user))
    settings = load_config()
    s3 = settings.storage.options["s3"]
    assert s3["endpoint_url"] == "http://127.0.0.1:9000"
    assert s3["client_kwargs"] == {"region_name": "us-east-1"}
    assert (settings.runner.kind, settings.prefect.result_store) == ("dask", "/tmp/results")
    assert isinstance(settings.storage.options, FrozenDict) and isinstance(s3, FrozenDict)
    with pytest.raises(TypeError):
        s3["endpoint_url"] = "elsewhere"  # type: ignore[index]
    # An override wins over the user file, a group choice selects a packaged file.
    assert load_config(["++storage.options.s3.endpoint_url=http://x"]).storage.options["s3"][
        "endpoint_url"
    ] == ("http://x")
    monkeypatch.delenv(USER_CONFIG_ENV)
    assert load_config(["runner=dask"]).runner.kind == "dask"


def _cli(args: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "gymflow.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    write_lines(run / "rollouts.jsonl", [record(0), record(1)])
    return run


def _one_error_line(done: Any) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, done.stderr
    return errors[0]


def test_user_config_with_s3_options_runs_the_cli(run_dir: Path, tmp_path: Path) -> None:
    user = tmp_path / "gymflow.yaml"
    user.write_text("storage:\n  options:\n    s3:\n      endpoint_url: http://127.0.0.1:9\n")
    done = _cli(["eval", "health-check", str(run_dir), "--direct"], env={USER_CONFIG_ENV: str(user)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Rollout health: 2 checked")


@pytest.mark.parametrize("mode", [["--direct"], []], ids=["direct", "prefect"])
def test_bad_config_is_one_line_naming_file_and_key(run_dir: Path, tmp_path: Path, mode: list[str]) -> None:
    user = tmp_path / "user.yaml"
    command = ["eval", "health-check", str(run_dir), *mode]
    env = {USER_CONFIG_ENV: str(user)}
    user.write_text("storage:\n  options: [unclosed\n")
    line = _one_error_line(_cli(command, env))
    assert f"error: GYMFLOW_CONFIG {user}: not valid YAML:" in line and "line 2" in line
    user.write_text("runer:\n  kind: dask\n")
    line = _one_error_line(_cli(command, env))
    assert f"error: GYMFLOW_CONFIG {user}: unknown key 'runer'" in line
    user.write_text("storage:\n  optons: {}\n")
    assert _one_error_line(_cli(command, env)).endswith(
        f"error: unknown configuration key 'storage.optons' in GYMFLOW_CONFIG {user} (did you mean "
        "'storage.options'?)"
    )
    user.write_text("prefect:\n  startup_timeout_seconds: soon\n")
    assert _one_error_line(_cli(command, env)).endswith(
        "error: invalid configuration: prefect.startup_timeout_seconds (Input should be a valid integer, "
        f"unable to parse string as an integer) in GYMFLOW_CONFIG {user}."
    )
    line = _one_error_line(_cli([*command, "++runner.kind=ray"]))
    assert line.endswith(
        "error: invalid configuration: runner.kind (Input should be 'process' or 'dask') in override "
        "'++runner.kind=ray'."
    )
    assert not (run_dir / "quality_summary.json").exists()


def test_bad_override_on_each_command_is_one_line(run_dir: Path, tmp_path: Path) -> None:
    gym = tmp_path / "gym.yaml"
    gym.write_text("limit: 0\n")
    cases = [
        (
            ["eval", "join", str(run_dir), "+bogus=1"],
            "unknown configuration key 'bogus' in override '+bogus=1' (known keys: capture_dir, direct, "
            "json, no_cache, no_capture, no_perf, openlineage, output, prefect, rollouts_file, runner, "
            "storage, summary, verbose, workers)",
        ),
        (
            ["eval", "join", str(run_dir), "++workers=many"],
            "invalid configuration: workers (Input should be a valid integer, unable to parse string as an "
            "integer) in override '++workers=many'.",
        ),
        (
            ["eval", "aggregate", "-i", "x", "-o", "y", "++pass_majority.score=r"],
            "unknown configuration key 'pass_majority.score' in override '++pass_majority.score=r' (did you "
            "mean 'pass_majority.score_field'?)",
        ),
        (
            ["eval", "reverify", "--config", str(gym), "--inputs", "m", "--rollouts", "r", "-o", "o"],
            f"invalid configuration: limit (Input should be greater than or equal to 1) in config {gym}.",
        ),
        (
            ["eval", "post", str(run_dir), "++post.health_check_workers=0"],
            "invalid configuration: post.health_check_workers (Input should be greater than or equal to 1) "
            "in override '++post.health_check_workers=0'.",
        ),
        (
            ["ui", "+colour=blue"],
            "unknown configuration key 'colour' in override '+colour=blue' (known keys: openlineage, "
            "prefect, runner, stop, storage)",
        ),
        (
            ["eval", "health-check", str(run_dir), "+foo=1"],
            "health-check does not accept Hydra overrides: +foo=1",
        ),
        (
            ["eval", "health-check", str(run_dir), "runner=ray"],
            "invalid override 'runner=ray': In 'gymflow': Could not find 'runner/ray' Available options in "
            "'runner': dask process",
        ),
    ]
    for args, _ in cases:
        for mode in ([], ["--direct"]) if args[0] == "eval" else ([],):
            try:
                main([*args, *mode])
            except SystemExit as exc:
                assert exc.code == 2, args
            else:
                raise AssertionError(f"{args} did not fail")
    for args, message in cases[:2]:
        assert _one_error_line(_cli(args)).endswith(f"error: {message}"), args
    # The other messages in-process (cheaper than a subprocess each).
    for args, message in cases[2:]:
        line = _message(args)
        assert line == message, (args, line)


def _message(args: Sequence[str]) -> str:
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
        main([*args, "--direct"] if args[0] == "eval" else list(args))
    lines = [line for line in err.getvalue().splitlines() if ": error: " in line]
    assert len(lines) == 1, err.getvalue()
    return lines[0].split(": error: ", 1)[1]


def test_provenance_records_the_resolved_config_with_secrets_redacted(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    user = tmp_path / "user.yaml"
    user.write_text(
        f"storage:\n  options:\n    s3:\n      secret: {SECRET}\n      endpoint_url: http://h:9\n"
    )
    monkeypatch.setenv(USER_CONFIG_ENV, str(user))
    args = [
        "eval",
        "health-check",
        str(run_dir),
        "--direct",
        "--workers",
        "1",
        "++ignore_checks=[model_call_failed]",
    ]
    assert main(args) == 0
    record_path = run_dir / "quality_summary.provenance.json"
    assert SECRET.encode() not in record_path.read_bytes()
    recorded = json.loads(record_path.read_text())
    config = recorded["config"]
    assert config["command"] == "health_check"
    assert config["storage"]["options"]["s3"] == {"secret": provenance.REDACTED, "endpoint_url": "http://h:9"}
    assert (config["workers"], config["ignore_checks"], config["direct"]) == (1, ["model_call_failed"], True)
    assert config["runner"] == {"kind": "process", "dask_address": None}
    assert list(recorded).index("config") == list(recorded).index("parameters") + 1
    # The config is recorded, not keyed: a run differing only in settings that cannot change a byte
    # (workers, -v, where the secret is) is up to date.
    user.write_text("storage:\n  options: {}\n")
    capsys.readouterr()
    assert main([*args[:-3], "--workers", "2", "-v", "++ignore_checks=model_call_failed"]) == 0
    assert "Reports are up to date" in capsys.readouterr().err
    assert not any("GYMFLOW_RECORD" in name for name in os.environ)  # the config travels in the run context


def test_aggregate_record_redacts_a_gym_config_secret(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "s" / "a.jsonl", mcqa_rows(tasks=1, repeats=1))
    gym = tmp_path / "gym.yaml"
    gym.write_text(f"policy_api_key: {SECRET}\npolicy_base_url: http://user:{SECRET}@judge:1/v1\n")
    out = tmp_path / "o" / "m.jsonl"
    args = ["eval", "aggregate", "-i", f"{tmp_path}/s/*.jsonl", "-o", str(out), "--config", str(gym)]
    assert main([*args, "--direct", "--no-health-check"]) == 0
    record_path = tmp_path / "o" / "m.provenance.json"
    assert SECRET.encode() not in record_path.read_bytes()
    config = json.loads(record_path.read_text())["config"]
    assert config["policy_api_key"] == provenance.REDACTED
    assert config["policy_base_url"] == "http://judge:1/v1"
    assert config["config_paths"] == [str(gym)]


def test_server_group_sets_the_local_server_port_unless_the_environment_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gymflow.cli.setup import prepare_prefect

    monkeypatch.delenv("PREFECT_SERVER_API_PORT", raising=False)
    for name in ("PREFECT_LOGGING_LEVEL", "DO_NOT_TRACK", "PREFECT_SERVER_ANALYTICS_ENABLED"):
        monkeypatch.setenv(name, os.environ.get(name, "x"))  # restored after the test
    prepare_prefect(load_config(["++prefect.port=4301"]), verbose=False)
    assert os.environ["PREFECT_SERVER_API_PORT"] == "4301"
    monkeypatch.setenv("PREFECT_SERVER_API_PORT", "4302")
    prepare_prefect(load_config(["++prefect.port=4301"]), verbose=False)
    assert os.environ["PREFECT_SERVER_API_PORT"] == "4302"


# -- strict keys: a typo is refused wherever it was set; Gym server blocks stay free-form ---------


def test_a_misspelt_key_is_refused_with_where_it_was_set_and_the_closest_key(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = [
        (
            ["eval", "reverify", "--inputs", "m", "--rollouts", "r", "-o", "o", "++limt=3"],
            "unknown configuration key 'limt' in override '++limt=3' (did you mean 'limit'?)",
        ),
        (
            ["eval", "aggregate", "-i", "x", "-o", "y", "++merge_shard=false"],
            "unknown configuration key 'merge_shard' in override '++merge_shard=false' (did you mean "
            "'merge_shards'?)",
        ),
        (
            ["eval", "post", str(run_dir), "++reverify.enabeld=true"],
            "unknown configuration key 'reverify.enabeld' in override '++reverify.enabeld=true' (did you "
            "mean 'reverify.enabled'?)",
        ),
        (  # a new block named like one of the command's is a typo too, not a Gym server block
            ["eval", "post", str(run_dir), "++reverfy.enabled=true"],
            "unknown configuration key 'reverfy' in override '++reverfy.enabled=true' (did you mean "
            "'reverify'?)",
        ),
        (  # serve's overrides are eval post's: refused when serve starts, not in each run
            ["serve", "++reverify.enabeld=true"],
            "unknown configuration key 'reverify.enabeld' in override '++reverify.enabeld=true' (did you "
            "mean 'reverify.enabled'?)",
        ),
        (
            ["eval", "join", str(run_dir), "++workrs=2"],
            "unknown configuration key 'workrs' in override '++workrs=2' (did you mean 'workers'?)",
        ),
        (
            ["eval", "aggregate", "-i", "x", "-o", "y", "++storage.optons={}"],
            "unknown configuration key 'storage.optons' in override '++storage.optons={}' (did you mean "
            "'storage.options'?)",
        ),
        (
            ["eval", "health-check", str(run_dir), "++workrs=2"],
            "health-check does not accept Hydra overrides: ++workrs=2 (did you mean 'workers'?)",
        ),
        # `KEY=VALUE` of a key nothing holds: refused as such, not "use +KEY=VALUE" (then refused).
        (
            ["eval", "health-check", str(run_dir), "foo=1"],
            "health-check does not accept Hydra overrides: foo=1",
        ),
        (
            ["eval", "reverify", "--inputs", "m", "--rollouts", "r", "-o", "o", "limt=3"],
            "unknown configuration key 'limt' in override 'limt=3' (did you mean 'limit'?)",
        ),
    ]
    for args, message in cases:
        assert _message(args) == message, args
    user = tmp_path / "user.yaml"
    monkeypatch.setenv(USER_CONFIG_ENV, str(user))
    reverify = ["eval", "reverify", "--inputs", "m", "--rollouts", "r", "-o", "o"]
    blocks = [
        ("aggregate:\n  merge_shard: false\n", ["eval", "aggregate", "-i", "x", "-o", "y"], "merge_shard"),
        ("post:\n  reverify: {enabeld: true}\n", ["eval", "post", str(run_dir)], "reverify.enabeld"),
        ("reverify:\n  limt: 3\n", reverify, "limt"),
        ("serve:\n  sweep_intervall: 5\n", ["serve"], "sweep_intervall"),
    ]
    closest = {
        "merge_shard": "merge_shards",
        "reverify.enabeld": "reverify.enabled",
        "limt": "limit",
        "sweep_intervall": "sweep_interval",
    }
    for text, args, key in blocks:
        user.write_text(text)
        assert _message(args) == (
            f"unknown configuration key {key!r} in {USER_CONFIG_ENV} {user} (did you mean {closest[key]!r}?)"
        ), text
    # A flag mapped to a key the command lacks is refused as well (a programming error, one line).
    with pytest.raises(UsageError, match=r"^unknown configuration key 'workerz' from a flag \(did you mean"):
        compose("join", flags={"workerz": 2})


def test_gym_server_blocks_and_the_settings_they_refer_to_stay_free_form(tmp_path: Path) -> None:
    gym = tmp_path / "gym.yaml"
    gym.write_text(
        "policy_model_name: m\n"  # a top-level Gym setting in a Gym file
        "judge_model:\n  responses_api_models:\n    openai_model:\n      base_url: ${policy_base_url}\n"
        "mcqa:\n  resources_servers:\n    mcqa: {host: 127.0.0.1, port: 1}\n"
    )
    required = ["--config", str(gym), "--inputs", "m", "--rollouts", "r", "-o", "o"]
    _, config, _, _ = _reverify(
        [
            *required,
            "+policy_base_url=http://judge:1",  # a scalar the config refers to
            "++policy_model_name=n",
            "++mcqa.resources_servers.mcqa.grading_mode=lenient_boxed",
            "++newjudge.resources_servers.x.host=127.0.0.1",  # a block added by overrides alone
        ]
    )
    assert config["judge_model"]["responses_api_models"]["openai_model"]["base_url"] == "http://judge:1"
    assert config["policy_model_name"] == "n"
    assert config["mcqa"]["resources_servers"]["mcqa"]["grading_mode"] == "lenient_boxed"
    assert config["newjudge"] == {"resources_servers": {"x": {"host": "127.0.0.1"}}}
    # A top-level scalar that nothing refers to cannot configure a server: a typo, or a Gym file's.
    with pytest.raises(UsageError) as refused:
        _reverify([*required, "+policy_base_url=http://judge:1", "++dry_run=true"])
    assert str(refused.value).startswith("unknown configuration key 'dry_run' in override '++dry_run=true'")
    assert str(refused.value).endswith("; a NeMo Gym setting that no block refers to goes in a --config file")


def test_tilde_resets_a_packaged_key_and_deletes_a_key_only_the_user_set(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _health(["~rollouts_file"]).rollouts_file == "rollouts.jsonl"  # packaged, never set
    user = tmp_path / "user.yaml"
    user.write_text("health_check:\n  rollouts_file: from-file.jsonl\n")
    monkeypatch.setenv(USER_CONFIG_ENV, str(user))
    assert _health([]).rollouts_file == "from-file.jsonl"
    assert _health(["~rollouts_file"]).rollouts_file == "rollouts.jsonl"
    assert _health(["~rollouts_file", "--rollouts-file", "flag.jsonl"]).rollouts_file == "flag.jsonl"
    monkeypatch.delenv(USER_CONFIG_ENV)
    build = _post(run_dir)
    assert build(["++post.shards=parts/*.jsonl", "~post.shards"])[0].shards == "shards/*.jsonl"
    assert build(["~reverify"])[0].reverify is None
    gym = tmp_path / "gym.yaml"
    gym.write_text("mcqa:\n  resources_servers:\n    mcqa: {host: 127.0.0.1, port: 1}\n")
    required = ["--config", str(gym), "--inputs", "m", "--rollouts", "r", "-o", "o"]
    _, config, _, _ = _reverify([*required, "~mcqa.resources_servers.mcqa.port", "~limit"])
    assert config["mcqa"]["resources_servers"]["mcqa"] == {"host": "127.0.0.1"}
    with pytest.raises(UsageError, match=r"^Could not delete from config\. 'nothing' is not in the config"):
        _health(["~nothing"])

"""NeMo Gym 0.7.0's other ``gym eval reverify`` flags and keys (issue 19 item 3): the component
selectors ``--environment`` / ``--resources-server`` load the config they name from the search
roots (``--search-dir``, ``$NEMO_GYM_EXTRA_ROOTS``, the working directory), as 0.7.0 does;
``--benchmark``, ``--model-type`` and ``upload_rollouts=true`` are refused with one line (exit 2)
saying why gymflow has no such thing, before any server is contacted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.reverify.cases import Case, case_fixture  # noqa: F401
from tests.reverify.server_process import gym_config

pytestmark = pytest.mark.timeout(60)

ERROR = "gymflow eval reverify: error: "


def _error(case: Case, *args: str) -> str:
    outcome = case.cli("--direct", *args)
    assert outcome.code == 2, outcome
    last = outcome.err.splitlines()[-1]
    assert last.startswith(ERROR)
    assert case.server.log() == []  # nothing contacted
    return last.removeprefix(ERROR)


def _io(case: Case, output: str = "out.jsonl") -> tuple[str, ...]:
    case.write()
    return (
        "--inputs",
        str(case.inputs),
        "--rollouts",
        str(case.rollouts_path),
        "--output",
        str(case.path(output)),
    )


def _put(root: Path, relative: str, config: dict[str, Any]) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_benchmark_is_refused_with_its_reason(case: Case) -> None:
    assert _error(case, "--benchmark", "aime24", *_io(case)) == (
        "--benchmark is not supported: gymflow re-verifies stored rollouts of any benchmark without "
        "composing its config (benchmark configs chain others through NeMo Gym's config_paths and "
        "_inherit_from); give the benchmark's resources server with --resources-server or --config"
    )
    assert not case.output.exists()


def test_model_type_is_refused_with_its_reason(case: Case) -> None:
    assert _error(case, "--model-type", "openai_model", *_io(case)) == (
        "--model-type is not supported: gymflow serves no policy model (reverify re-scores stored "
        "responses) and starts resources servers only; a judge model they call must already run, its "
        "block given with --config"
    )


def test_resources_server_loads_its_config_from_the_search_dir_first(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gym = tmp_path / "gym"
    _put(gym, "resources_servers/mcqa/configs/mcqa.yaml", gym_config({"mcqa": case.server}))
    # The working directory holds a config of the same name for a server nobody runs: the search
    # dir comes first, as in 0.7.0.
    cwd = tmp_path / "work"
    dead = {"mcqa": {"entrypoint": "app.py", "host": "127.0.0.1", "port": 9}}
    _put(cwd, "resources_servers/mcqa/configs/mcqa.yaml", gym_config(dead))
    monkeypatch.chdir(cwd)
    outcome = case.cli("--direct", "--resources-server", "mcqa", "--search-dir", str(gym), *_io(case))
    assert outcome.code == 0, outcome
    assert len(case.server.log("/verify")) == 9
    assert len(case.out_rows()) == 9
    record = json.loads(case.path("out.provenance.json").read_text())
    assert str(gym) in json.dumps(record)  # search_dirs and the config file it found are recorded


def test_resources_server_flavor_and_nemo_gym_extra_roots(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gym = tmp_path / "gym"
    _put(gym, "resources_servers/mcqa/configs/lenient.yaml", gym_config({"mcqa": case.server}))
    monkeypatch.setenv("NEMO_GYM_EXTRA_ROOTS", str(gym))
    monkeypatch.chdir(tmp_path)
    outcome = case.cli("--direct", "--resources-server", "mcqa/lenient", *_io(case))
    assert outcome.code == 0, outcome
    assert len(case.server.log("/verify")) == 9


def test_environment_loads_its_config_and_routes_by_its_agents(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = gym_config({"mcqa": case.server}, agents={"mcqa_simple_agent": "mcqa"})
    _put(tmp_path, "environments/quiz/config.yaml", config)
    monkeypatch.chdir(tmp_path)
    outcome = case.cli("--direct", "--environment", "quiz", *_io(case))
    assert outcome.code == 0, outcome
    assert "routing EVERY rollout agent name" not in outcome.out + outcome.err  # the agent block routed
    assert len(case.server.log("/verify")) == 9


def test_a_selector_that_names_no_config_or_a_chained_one_is_refused(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NEMO_GYM_EXTRA_ROOTS", raising=False)
    message = _error(case, "--resources-server", "nosuch", *_io(case))
    assert message.startswith(
        f"--resources-server nosuch: no config resources_servers/nosuch/configs/nosuch.yaml under {tmp_path}"
    )
    assert message.endswith(" (add a root with --search-dir)")
    chained = {
        "config_paths": ["resources_servers/mcqa/configs/mcqa.yaml"],
        "quiz": {"_inherit_from": "mcqa"},
    }
    path = _put(tmp_path, "environments/chain/config.yaml", chained)
    assert _error(case, "--environment", "chain", *_io(case)) == (
        f"--environment chain: {path} composes other configs (NeMo Gym's config_paths or _inherit_from), "
        "which gymflow does not follow; give the composed resources-server blocks with --config"
    )


def test_upload_rollouts_false_is_accepted_and_true_refused(case: Case) -> None:
    config = case.config()
    outcome = case.cli("--direct", "--config", str(config), *_io(case), "+upload_rollouts=false")
    assert outcome.code == 0, outcome
    assert len(case.out_rows()) == 9
    case.server.reset()
    uploading = case.path("uploading.yaml")
    uploading.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "upload_rollouts": True}))
    assert _error(case, "--config", str(uploading), *_io(case, "other.jsonl")) == (
        "invalid configuration: upload_rollouts (Value error, upload_rollouts=true is not supported: "
        "gymflow has no rollout exporters (W&B and the others NeMo Gym uploads to); the re-verified "
        f"rollouts are the --output file) in config {uploading}."
    )

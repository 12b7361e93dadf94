"""Stock Gym configs launch their servers (reverify.md §3.10 point 2): a block with only ``entrypoint``
runs in ``resources_servers/<impl>`` found under the search roots (``--search-dir``,
``$NEMO_GYM_EXTRA_ROOTS``, the working directory, the installed ``nemo_gym``), with the interpreter of
the venv NeMo Gym 0.7.0 would use; ``python``/``dir`` keys override. No NeMo Gym is needed: the layouts
are built here, and each ``app.py`` serves the real test server (tests/reverify/server.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.reverify.cases import AGENT, Case, case_fixture, read_jsonl  # noqa: F401
from tests.reverify.server_process import REPO_ROOT, port_is_free

pytestmark = pytest.mark.timeout(60)

APP = """\
import json, os, sys
sys.path.insert(0, {repo!r})
import uvicorn, yaml
from tests.reverify.server import create_app
config = yaml.safe_load(os.environ["NEMO_GYM_CONFIG_DICT"])
block = config[os.environ["NEMO_GYM_CONFIG_PATH"]]["resources_servers"]["mcqa"]
with open(os.environ["GF_TEST_MARKER"], "w") as marker:
    json.dump({{"cwd": os.getcwd(), "interpreter": os.environ.get("GF_TEST_INTERPRETER"),
               "roots": os.environ.get("NEMO_GYM_EXTRA_ROOTS"), "tag": {tag!r}, "block": block}}, marker)
uvicorn.run(create_app("stateless"), host=block["host"], port=block["port"], log_level="warning")
"""

STOCK_CONFIG = {
    "mcqa": {
        "resources_servers": {
            "mcqa": {"entrypoint": "app.py", "grading_mode": None, "domain": "knowledge", "verified": False}
        }
    },
    AGENT: {
        "responses_api_agents": {
            "simple_agent": {
                "entrypoint": "app.py",
                "resources_server": {"type": "resources_servers", "name": "mcqa"},
            }
        }
    },
}


def fake_python(path: Path) -> Path:
    """An executable standing in for a venv's ``bin/python``: runs this interpreter, telling the app
    which stand-in started it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\nGF_TEST_INTERPRETER="$0" exec {sys.executable} "$@"\n')
    path.chmod(0o755)
    return path


def server_dir(root: Path, tag: str, *, marker: str | None = "requirements.txt") -> Path:
    """``root/resources_servers/mcqa`` with an ``app.py`` that reports ``tag``, and its stock config."""
    directory = root / "resources_servers" / "mcqa"
    (directory / "configs").mkdir(parents=True, exist_ok=True)
    (directory / "app.py").write_text(APP.format(repo=str(REPO_ROOT), tag=tag))
    if marker:
        (directory / marker).write_text("tiktoken\n" if marker == "requirements.txt" else "[project]\n")
    (directory / "configs" / "mcqa.yaml").write_text(yaml.safe_dump(STOCK_CONFIG, sort_keys=False))
    return directory


def installed_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A wheel install of nemo_gym in a venv of its own: ``env/lib/python3.X/site-packages`` holding
    ``nemo_gym/`` and the built-in ``resources_servers/``, importable here; (site-packages, env python)."""
    site = tmp_path / "env" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "nemo_gym").mkdir(parents=True)
    (site / "nemo_gym" / "__init__.py").write_text("")
    server_dir(site, "installed")
    python = fake_python(tmp_path / "env" / "bin" / "python")
    monkeypatch.syspath_prepend(str(site))
    return site, python


def gym_checkout(root: Path) -> Path:
    """A Gym checkout (editable layout): ``pyproject.toml``, ``nemo_gym/``, the server with its own
    ``.venv`` (0.7.0's venv for a checkout whose uv_venv_dir is the checkout)."""
    (root / "nemo_gym").mkdir(parents=True)
    (root / "nemo_gym" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text("[project]\nname = 'nemo-gym'\n")
    directory = server_dir(root, "checkout", marker="pyproject.toml")
    fake_python(directory / ".venv" / "bin" / "python")
    return directory


@pytest.fixture
def stock(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Case, Path, Path, Path]:
    """The case, the installed package's site-packages and python, and the marker file the app writes.
    The working directory is an empty one (not a component root)."""
    site, python = installed_package(tmp_path, monkeypatch)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("NEMO_GYM_EXTRA_ROOTS", raising=False)
    marker = tmp_path / "started.json"
    monkeypatch.setenv("GF_TEST_MARKER", str(marker))
    case.write()
    return case, site, python, marker


def run(case: Case, *extra: str) -> Any:
    args = ["--inputs", str(case.inputs), "--rollouts", str(case.rollouts_path), "--output", str(case.output)]
    return case.cli("--direct", *args, *extra)


def assert_scored(case: Case, outcome: Any) -> None:
    assert outcome.code == 0, outcome.out + outcome.err
    rewards = {(r["_ng_task_index"], r["_ng_rollout_index"]): r["reward"] for r in case.out_rows()}
    assert len(rewards) == 9 and sum(rewards.values()) == 7.0  # the fixture: 7 of 9 correct
    assert case.server.log("/verify") == []  # scored by the launched server, not the shared one


def started(outcome: Any) -> tuple[str, int]:
    line = next(x for x in outcome.lines if x.startswith("Starting resources server 'mcqa' on "))
    port = int(line.split(" on http://127.0.0.1:", 1)[1].split(":", 1)[0])
    return line, port


def test_stock_config_of_the_installed_package_launches_its_server(
    stock: tuple[Case, Path, Path, Path],
) -> None:
    """`--resources-server mcqa` with no --config: the installed package's config (entrypoint only)
    and its server directory, run by the interpreter of the environment nemo_gym is installed in."""
    case, site, python, marker = stock
    outcome = run(case, "--resources-server", "mcqa")
    assert_scored(case, outcome)
    line, port = started(outcome)
    assert line.endswith(f": {python.absolute()} app.py")
    assert port_is_free(port)  # stopped at the end
    assert "Stopped resources server 'mcqa'" in outcome.lines
    seen = json.loads(marker.read_text())
    assert Path(seen["cwd"]).resolve() == (site / "resources_servers" / "mcqa").resolve()
    assert seen["tag"] == "installed" and seen["interpreter"] == str(python.absolute())
    assert seen["block"]["host"] == "127.0.0.1" and seen["block"]["port"] == port
    record = json.loads(case.path("out.provenance.json").read_text())
    assert [s["settings"] for s in record["verifier"]["resources_servers"]] == ["launched"]


def test_venv_of_a_wheel_install_is_used_when_it_exists(stock: tuple[Case, Path, Path, Path]) -> None:
    """0.7.0 with a wheel install runs ``<cwd>/resources_servers/<impl>/.venv/bin/python`` (its
    uv_venv_dir defaults to the working directory); gymflow uses it when it is there."""
    case, site, _, marker = stock
    venv_python = fake_python(Path.cwd() / "resources_servers" / "mcqa" / ".venv" / "bin" / "python")
    outcome = run(case, "--resources-server", "mcqa")
    assert_scored(case, outcome)
    assert started(outcome)[0].endswith(f": {venv_python} app.py")
    seen = json.loads(marker.read_text())
    assert seen["tag"] == "installed"  # the venv alone does not make the cwd a server directory
    assert seen["interpreter"] == str(venv_python)


@pytest.mark.parametrize("how", ["--search-dir", "search_dirs", "NEMO_GYM_EXTRA_ROOTS"])
def test_a_gym_checkout_in_the_search_roots_wins_over_the_installed_package(
    stock: tuple[Case, Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    case, _, _, marker = stock
    checkout = tmp_path / "Gym"
    directory = gym_checkout(checkout)
    config = case.path("stock.yaml")
    config.write_text(yaml.safe_dump(STOCK_CONFIG))
    roots = {
        "--search-dir": ["--search-dir", str(checkout)],
        "search_dirs": [f"++search_dirs=[{checkout}]"],
        "NEMO_GYM_EXTRA_ROOTS": [],
    }[how]
    if how == "NEMO_GYM_EXTRA_ROOTS":
        monkeypatch.setenv("NEMO_GYM_EXTRA_ROOTS", str(checkout))
    outcome = run(case, "--config", str(config), *roots)
    assert_scored(case, outcome)
    venv_python = directory / ".venv" / "bin" / "python"
    assert started(outcome)[0].endswith(f": {venv_python} app.py")
    seen = json.loads(marker.read_text())
    assert seen["tag"] == "checkout" and Path(seen["cwd"]).resolve() == directory.resolve()
    assert seen["interpreter"] == str(venv_python)
    assert seen["roots"] == str(checkout)  # the server searches the same roots first, as under 0.7.0


def test_python_and_dir_keys_override(stock: tuple[Case, Path, Path, Path], tmp_path: Path) -> None:
    case, _, _, marker = stock
    own = server_dir(tmp_path / "own", "own", marker=None)
    python = fake_python(tmp_path / "other" / "python")
    config = case.path("own.yaml")
    block = {"entrypoint": "app.py", "dir": str(own), "python": str(python)}
    config.write_text(yaml.safe_dump({**STOCK_CONFIG, "mcqa": {"resources_servers": {"mcqa": block}}}))
    outcome = run(case, "--config", str(config))
    assert_scored(case, outcome)
    assert started(outcome)[0].endswith(f": {python} app.py")
    seen = json.loads(marker.read_text())
    assert (seen["tag"], seen["interpreter"]) == ("own", str(python))
    assert Path(seen["cwd"]).resolve() == own.resolve()


def test_a_server_directory_found_nowhere_is_one_error(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("NEMO_GYM_EXTRA_ROOTS", raising=False)
    monkeypatch.setattr("gymflow.reverify.launch.installed_gym_root", lambda: None)
    config = case.path("stock.yaml")
    config.write_text(yaml.safe_dump(STOCK_CONFIG))
    case.write()
    outcome = run(case, "--config", str(config), "--search-dir", str(tmp_path / "nowhere"))
    assert outcome.code == 1
    assert outcome.error == (
        "Error: resources server 'mcqa': no server directory resources_servers/mcqa under "
        f"{tmp_path / 'nowhere'}, {work} (add a root with --search-dir, or give the block a dir key)"
    )
    assert not case.output.exists() and case.server.log() == []

"""Issue 18: SIGTERM in the middle of a reverify run says what was kept (it said ``nothing was
written`` while rows were kept in the output), and ``--resume`` continues from exactly that."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gymflow import lifeline
from gymflow.cli import interrupt
from tests.reverify.cases import read_jsonl, write_jsonl
from tests.reverify.server_process import REPO_ROOT, ServerProcess, mcqa_rows, server_env, write_gym_config

pytestmark = pytest.mark.timeout(90)


def test_message_names_what_appended_files_keep() -> None:
    kept = [("32 verified rows in 'out.jsonl' and 3 failure rows in 'out_failures.jsonl'", "Use --resume.")]
    assert interrupt.message(signal.SIGTERM, [], kept) == (
        "Terminated; kept 32 verified rows in 'out.jsonl' and 3 failure rows in 'out_failures.jsonl' "
        "(the run did not finish). Use --resume."
    )
    assert interrupt.message(signal.SIGINT, ["a.json"], kept).startswith(
        "Interrupted; kept 32 verified rows in 'out.jsonl' and 3 failure rows in 'out_failures.jsonl'; "
        "also a.json (complete)"
    )
    # without appended files the message is unchanged
    assert interrupt.message(signal.SIGTERM, []) == (
        "Terminated; nothing was written. Run the same command again to start over."
    )


def test_kept_registry() -> None:
    lifeline.clear_kept()
    remove = lifeline.add_kept(lambda: ("1 row in 'x'", "again"))
    lifeline.add_kept(lambda: None)  # nothing kept yet

    def broken() -> lifeline.Kept:
        raise RuntimeError("never reaches the user")

    lifeline.add_kept(broken)
    assert lifeline.kept() == [("1 row in 'x'", "again")]
    remove()
    assert lifeline.kept() == []
    lifeline.clear_kept()


def _command(config: Path, root: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "gymflow.cli", "eval", "reverify", "--direct",
        "--config", str(config),
        "--inputs", str(root / "inputs.jsonl"),
        "--rollouts", str(root / "rollouts.jsonl"),
        "--output", str(root / "out.jsonl"),
        "--concurrency", "4",
        *extra,
    ]  # fmt: skip


def test_sigterm_says_what_was_kept(
    tmp_path: Path, start_resources_server: Callable[..., ServerProcess]
) -> None:
    server = start_resources_server(latency_ms=20)
    materialized, rollouts = mcqa_rows(200, 2)
    write_jsonl(tmp_path / "inputs.jsonl", materialized)
    write_jsonl(tmp_path / "rollouts.jsonl", rollouts)
    for task in range(0, 200, 10):  # some failures in the sidecar too
        server.set((task, 1), kind="status", status=422)
    config = write_gym_config(tmp_path / "cfg.yaml", {"mcqa": server})
    env = {**server_env(), "CI": "1"}
    output, sidecar = tmp_path / "out.jsonl", tmp_path / "out_failures.jsonl"
    child = subprocess.Popen(
        _command(config, tmp_path),
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if output.exists() and output.read_bytes().count(b"\n") >= 30 and sidecar.stat().st_size:
                break
            assert child.poll() is None
            time.sleep(0.01)
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 143
    rows, failures = len(read_jsonl(output)), len(read_jsonl(sidecar))
    assert 30 <= rows < 380 and failures >= 1
    lines = err.decode().strip().splitlines()
    assert lines[-1] == (
        f"Terminated; kept {rows} verified rows in '{output}' and {failures} failure rows in '{sidecar}' "
        "(the run did not finish). Run the same command with --resume to continue."
    ), err.decode()
    assert "nothing was written" not in err.decode() and "Traceback" not in err.decode()

    resumed = subprocess.run(
        _command(config, tmp_path, "--resume"), cwd=REPO_ROOT, env=env, capture_output=True
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert f"- {rows} rows already done (in main jsonl)".encode() in resumed.stdout


class _CtrlCAfter:
    """A progress bar that presses Ctrl-C once ``rows`` rows are recorded."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def __call__(self, done: int, failures: int, total: int) -> None:
        if done >= self.rows:
            raise KeyboardInterrupt

    def close(self) -> None:
        pass


def test_ctrl_c_leaves_what_was_kept_for_the_line(
    tmp_path: Path,
    resources_server: ServerProcess,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After Ctrl-C the run has flushed and closed its files; the registry still says what they
    hold, so the CLI's Ctrl-C line can name it (``interrupt.message(SIGINT, [], lifeline.kept())``)."""
    from tests.reverify.cases import Case

    case = Case(tmp_path, resources_server, capsys)
    case.materialized, case.rollouts = mcqa_rows(20, 2)
    resources_server.set((0, 0), kind="status", status=422)
    monkeypatch.setattr("gymflow.cli.reverify.row_progress", lambda label: _CtrlCAfter(12))
    monkeypatch.setattr(lifeline, "clear_kept", lambda: None)  # the CLI would forget it on exit
    lifeline._kept.clear()
    try:
        outcome = case.run("--concurrency", "1")
        assert outcome.code == 130, outcome
        rows, failures = len(case.out_rows()), len(read_jsonl(case.path("out_failures.jsonl")))
        assert rows + failures >= 11 and failures == 1
        assert lifeline.kept() == [
            (
                f"{rows} verified rows in '{case.output}' and {failures} failure rows in "
                f"'{case.path('out_failures.jsonl')}'",
                "Run the same command with --resume to continue.",
            )
        ]
    finally:
        lifeline._kept.clear()


def test_a_finished_run_keeps_nothing_registered(
    tmp_path: Path,
    resources_server: ServerProcess,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.reverify.cases import Case

    monkeypatch.setattr(lifeline, "clear_kept", lambda: None)
    lifeline._kept.clear()
    assert Case(tmp_path, resources_server, capsys).run().code == 0
    assert lifeline.kept() == []

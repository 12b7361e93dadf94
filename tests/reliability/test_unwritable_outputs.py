"""An output location that cannot be written is one line naming it and the OS's reason, never a
traceback, in all five commands with ``--direct`` (issue 17 §2, "Every user error is one line").

The locations are real: a read-only bind mount, an immutable directory (``chattr +i``), a path
under ``/proc``, a symlink loop, a path that is a directory, and a full tmpfs (ENOSPC). The
mounts and ``chattr`` need root; a case that cannot be set up here is skipped, saying why.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymflow.cli import main
from tests.reliability.helpers import health_rows, write_rows
from tests.reverify.server_process import ServerProcess, mcqa_rows, start_server, write_gym_config

COMMANDS = ["aggregate", "health-check", "join", "reverify", "post"]
KINDS = ["read-only", "immutable", "proc", "symlink-loop", "directory", "full"]
REASONS = {
    "read-only": "Read-only file system",
    "immutable": "Operation not permitted",
    "proc": "No such file or directory",
    "symlink-loop": "Too many levels of symbolic links",
    "directory": "Is a directory",
    "full": "No space left on device",
}


def _root_command(*args: str) -> str | None:
    """Run a command that needs root; the reason it failed, or None."""
    if os.geteuid() != 0:
        return "needs root"
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    return None if done.returncode == 0 else f"{' '.join(args)}: {done.stderr.strip()}"


class Place:
    """A directory whose outputs cannot be written, holding a copy of the run's rollouts when the
    kind allows it (health-check and post write beside them)."""

    def __init__(self, base: Path, kind: str, rollouts: Path) -> None:
        self.kind = kind
        self.undo: list[list[str]] = []
        self.run_dir = base / kind
        if kind == "proc":
            self.run_dir = Path("/proc/self")
            self.output = Path("/proc/gymflow-out.jsonl")
            return
        self.run_dir.mkdir(parents=True)
        if kind == "symlink-loop":
            os.symlink("loop", self.run_dir / "loop")
            self.run_dir = self.run_dir / "loop"
            self.output = self.run_dir / "out.jsonl"
            return
        self.output = self.run_dir / "out.jsonl"
        if kind == "full":
            self._mount("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(self.run_dir))
        shutil.copy(rollouts, self.run_dir / "rollouts.jsonl")
        if kind == "read-only":
            self._mount("mount", "--bind", str(self.run_dir), str(self.run_dir))
            self._need(_root_command("mount", "-o", "remount,bind,ro", str(self.run_dir)))
        elif kind == "immutable":
            self._need(_root_command("chattr", "+i", str(self.run_dir)))
            self.undo.append(["chattr", "-i", str(self.run_dir)])
        elif kind == "directory":
            self.output.mkdir()
            (self.run_dir / "quality_summary.json").mkdir()
        elif kind == "full":
            _fill(self.run_dir / "filler", leave=4096)  # room for the run lock, nothing more

    def _mount(self, *args: str) -> None:
        self._need(_root_command(*args))
        self.undo.append(["umount", "-l", args[-1]])

    def _need(self, failure: str | None) -> None:
        if failure is not None:
            self.close()
            pytest.skip(f"cannot set up a {self.kind} output location here: {failure}")

    def close(self) -> None:
        for args in reversed(self.undo):
            subprocess.run(args, capture_output=True, check=False)
        self.undo = []


def _fill(path: Path, leave: int) -> None:
    """Fill the file system of ``path`` up, then free ``leave`` bytes."""
    block = b"\0" * 4096
    with open(path, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(block)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        handle.truncate(max(0, handle.tell() - leave))


@pytest.fixture(scope="module")
def resources_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server("stateless", log_dir=tmp_path_factory.mktemp("rs-unwritable"))
    try:
        yield server
    finally:
        server.stop()


def _inputs(tmp_path: Path, server: ServerProcess, rows: int, tasks: int) -> tuple[Path, Path]:
    """Every command's inputs under ``tmp_path/src`` and a Gym config for ``server``."""
    src = tmp_path / "src"
    write_rows(src / "rollouts.jsonl", health_rows(rows, padding=200))
    materialized, rollouts = mcqa_rows(tasks, 2)
    write_rows(src / "inputs.jsonl", materialized)
    write_rows(src / "mcqa.jsonl", rollouts)
    return src, write_gym_config(tmp_path / "gym.yaml", {"mcqa": server})


def _args(command: str, place: Place, src: Path, gym: Path) -> list[str]:
    rollouts = src / "rollouts.jsonl"
    if command == "aggregate":
        return ["eval", "aggregate", "-i", str(rollouts), "-o", str(place.output)]
    if command == "health-check":
        return ["eval", "health-check", str(place.run_dir), "--rollouts-file", str(rollouts)]
    if command == "join":
        return ["eval", "join", str(src), "--no-capture", "--output", str(place.output)]
    if command == "reverify":
        return [
            "eval", "reverify", "--config", str(gym), "--inputs", str(src / "inputs.jsonl"),
            "--rollouts", str(src / "mcqa.jsonl"), "--output", str(place.output),
        ]  # fmt: skip
    return ["eval", "post", str(place.run_dir)]


def _one_line(err: str) -> str:
    """The error line; a usage error (exit 2) prints argparse's usage before it, as 0.7.0 does."""
    assert "Traceback" not in err, err
    lines = [line for line in err.strip().splitlines() if line.strip() and not line.startswith("Warning")]
    if lines and lines[0].startswith("usage: "):
        lines = [line for line in lines if line.startswith("gymflow ")]
    assert len(lines) == 1, lines
    return lines[0]


def _expected(command: str, place: Place) -> str | None:
    """What the line must name; None where the run directory itself is unusable as an input (a
    symlink loop, or /proc/self holding no rollouts for post): a one-line input error then."""
    if command in ("health-check", "post") and place.kind == "symlink-loop":
        return None
    if command == "post" and place.kind == "proc":
        return None
    if command == "reverify" and place.kind == "directory":
        return f"--output '{place.output}' names a directory"  # in every mode, never deleted
    if command == "reverify" and place.kind == "full":
        return f"{place.output}: cannot append a row: {REASONS[place.kind]}"  # with the rows it keeps
    if command in ("health-check", "post"):
        if place.kind == "full":
            return f"{place.run_dir}/"  # the first report that does not fit
        return f"{place.run_dir / 'quality_summary.json'}: cannot write it: {REASONS[place.kind]}"
    return f"{place.output}: cannot write it: {REASONS[place.kind]}"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_location_that_cannot_be_written_is_one_line(
    command: str,
    kind: str,
    tmp_path: Path,
    resources_server: ServerProcess,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src, gym = _inputs(tmp_path, resources_server, rows=60, tasks=20)
    place = Place(tmp_path / "places", kind, src / "rollouts.jsonl")
    try:
        capsys.readouterr()
        try:
            fresh = [] if command == "reverify" else ["--no-cache"]
            code = main([*_args(command, place, src, gym), "--direct", *fresh])
        except SystemExit as exc:  # argparse's usage errors
            code = int(exc.code or 0)
        line = _one_line(capsys.readouterr().err)
    finally:
        place.close()
    assert code != 0, line
    expected = _expected(command, place)
    if expected is not None:
        assert expected in line, line
        if kind == "full":
            assert REASONS["full"] in line, line


@pytest.fixture(scope="module")
def local_prefect_server() -> None:
    """The session's local Prefect server, started in a process of its own before the default-mode
    runs (a first start prints its own line on stderr)."""
    ui = [sys.executable, "-m", "gymflow.cli", "ui"]
    assert subprocess.run(ui, capture_output=True, text=True, timeout=180, check=False).returncode == 0


@pytest.mark.parametrize("kind", ["read-only"])
@pytest.mark.parametrize("command", COMMANDS)
def test_the_same_one_line_in_the_default_mode(
    command: str,
    kind: str,
    tmp_path: Path,
    resources_server: ServerProcess,
    local_prefect_server: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Orchestrated (Prefect) runs fail with the same one line as ``--direct``, at once (a path
    that cannot be written is not retried)."""
    src, gym = _inputs(tmp_path, resources_server, rows=20, tasks=5)
    place = Place(tmp_path / "places", kind, src / "rollouts.jsonl")
    try:
        capsys.readouterr()
        began = time.monotonic()
        try:
            fresh = [] if command == "reverify" else ["--no-cache"]
            code = main([*_args(command, place, src, gym), *fresh])
        except SystemExit as exc:
            code = int(exc.code or 0)
        seconds = time.monotonic() - began
        line = _one_line(capsys.readouterr().err)
    finally:
        place.close()
    assert code != 0, line
    expected = _expected(command, place)
    assert expected is not None and expected in line, line
    assert seconds < 30, seconds  # no retry delays (1 + 4 + 10 s) for a deterministic failure


@pytest.mark.parametrize("flag", ["--overwrite", "--resume"])
def test_reverify_output_that_is_a_directory_is_one_line(
    flag: str, tmp_path: Path, resources_server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src"
    materialized, rollouts = mcqa_rows(3, 2)
    write_rows(src / "inputs.jsonl", materialized)
    write_rows(src / "mcqa.jsonl", rollouts)
    gym = write_gym_config(tmp_path / "gym.yaml", {"mcqa": resources_server})
    output = tmp_path / "out.jsonl"
    output.mkdir()
    capsys.readouterr()
    args = [
        "eval", "reverify", "--config", str(gym), "--inputs", str(src / "inputs.jsonl"),
        "--rollouts", str(src / "mcqa.jsonl"), "--output", str(output), "--direct", flag,
    ]  # fmt: skip
    code = main(args)
    line = _one_line(capsys.readouterr().err)
    assert code != 0 and str(output) in line, line

"""Issue 18: output paths that cannot be used are one line (exit 1), never a traceback, and nothing
is deleted or written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.reverify.cases import Case, case_fixture  # noqa: F401

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("flags", [(), ("--resume",), ("--overwrite",)], ids=["fresh", "resume", "overwrite"])
def test_symlink_loop(case: Case, flags: tuple[str, ...]) -> None:
    loop = case.path("loop.jsonl")
    os.symlink(loop, loop)
    outcome = case.run(*flags, output=loop)
    assert outcome.code == 1 and "Traceback" not in outcome.err, outcome
    assert len([line for line in outcome.err.splitlines() if line.startswith("Error: ")]) == 1
    assert str(loop) in outcome.error and "Too many levels of symbolic links" in outcome.error
    assert os.path.islink(loop) and case.server.log("/verify") == []


@pytest.mark.parametrize("flags", [(), ("--resume",), ("--overwrite",)], ids=["fresh", "resume", "overwrite"])
def test_proc(case: Case, flags: tuple[str, ...]) -> None:
    outcome = case.run(*flags, output=Path("/proc/out.jsonl"))
    assert outcome.code == 1 and "Traceback" not in outcome.err, outcome
    assert outcome.error.startswith("Error: /proc/out.jsonl: cannot write it: ")
    assert outcome.error.endswith(": No such file or directory")


@pytest.mark.parametrize("flags", [(), ("--resume",), ("--overwrite",)], ids=["fresh", "resume", "overwrite"])
def test_directory(case: Case, flags: tuple[str, ...]) -> None:
    directory = case.path("out.jsonl")
    directory.mkdir()
    (directory / "keep.txt").write_text("mine")
    outcome = case.run(*flags, output=directory)
    assert outcome.code == 1 and "Traceback" not in outcome.err, outcome
    assert outcome.error == (
        f"Error: --output '{directory}' names a directory (or a sidecar path that is one); give the path "
        "of a JSONL file."
    )
    assert (directory / "keep.txt").read_text() == "mine" and case.server.log("/verify") == []


def test_sidecar_path_is_a_directory(case: Case) -> None:
    case.path("out_failures.jsonl").mkdir()
    outcome = case.run("--overwrite")
    assert outcome.code == 1 and "Traceback" not in outcome.err, outcome
    assert "names a directory" in outcome.error and str(case.path("out_failures.jsonl")) in outcome.error


def test_unwritable_directory(case: Case) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    locked = case.path("locked")
    locked.mkdir(mode=0o500)
    outcome = case.run(output=locked / "out.jsonl")
    assert outcome.code == 1 and "Traceback" not in outcome.err, outcome

"""Issue 18: a torn last line (ENOSPC, a kill during a write, a file cut by hand) does not brick
``--resume``; a full disk is one line and keeps every complete row."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymflow.errors import StorageError
from gymflow.reverify._outputs import Appender, set_aside_torn_tail
from tests.reverify.cases import Case, case_fixture, key, read_jsonl  # noqa: F401

pytestmark = pytest.mark.timeout(60)


def _torn_files(directory: Path, name: str) -> list[Path]:
    return sorted(directory.glob(f"{name}.torn-*"))


@pytest.mark.parametrize("which", ["out.jsonl", "out_failures.jsonl"])
def test_resume_sets_a_torn_tail_aside(case: Case, which: str) -> None:
    case.server.set((3, 0), kind="status", status=422)  # one failure row in the sidecar
    assert case.run().code == 0
    full = case.out_rows()
    path = case.path(which)
    lines = path.read_bytes().splitlines(keepends=True)
    # keep all rows but the last, then half of the last one: what ENOSPC during its write leaves
    torn = lines[-1][: len(lines[-1]) // 2]
    path.write_bytes(b"".join(lines[:-1]) + torn)
    case.server.reset()
    outcome = case.run("--resume", write=False)
    assert outcome.code == 0, outcome
    [aside] = _torn_files(case.root, which)
    assert aside.read_bytes() == torn
    warning = [line for line in outcome.err.splitlines() if "partial row" in line]
    assert warning == [
        f"Warning: {path} ended with a partial row of {len(torn)} bytes (a write cut short); moved it to "
        f"{aside} and continued from the {len(lines) - 1} complete rows."
    ]
    assert "Traceback" not in outcome.err
    # the torn row (and the failed one) were verified again; nothing lost, nothing twice
    assert sorted(key(r) for r in case.out_rows()) == sorted(key(r) for r in case.rollouts)
    assert len(full) == 8 and all(r in case.out_rows() for r in full[:-1])
    failures = read_jsonl(case.path("out_failures.jsonl"))
    assert [key(r) for r in failures] == ([] if which == "out_failures.jsonl" else [(3, 0)])
    for text in (case.path("out.jsonl").read_text(), case.path("out_failures.jsonl").read_text()):
        assert text == "" or text.endswith("\n")
    # and again: nothing left to set aside, nothing to verify
    outcome = case.run("--resume", write=False)
    assert outcome.code == 0 and len(_torn_files(case.root, which)) == 1
    assert "- 0 rows that still need to be run" in outcome.lines


def test_a_complete_row_without_its_newline_is_kept(case: Case) -> None:
    assert case.run().code == 0
    data = case.output.read_bytes()
    case.output.write_bytes(data[:-1])  # cut by hand just after the last closing brace
    case.server.reset()
    outcome = case.run("--resume", write=False)
    assert outcome.code == 0, outcome
    assert "- 9 rows already done (in main jsonl)" in outcome.lines
    assert case.output.read_bytes() == data and not _torn_files(case.root, "out.jsonl")
    assert case.server.log("/verify") == []


def test_a_file_that_is_only_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"res')
    seen: list[str] = []
    set_aside_torn_tail(str(path), str(path), seen.append)
    assert path.read_bytes() == b"" and len(seen) == 1 and "from the 0 complete rows" in seen[0]
    [aside] = _torn_files(tmp_path, "out.jsonl")
    assert aside.read_bytes() == b'{"res'


def test_finish_reports_a_bad_line_inside_the_output(case: Case) -> None:
    assert case.run().code == 0
    lines = case.output.read_bytes().splitlines(keepends=True)
    case.output.write_bytes(lines[0] + b'{"res\n' + b"".join(lines[1:]))
    outcome = case.run("--resume", write=False)
    assert outcome.code == 1 and "Traceback" not in outcome.err
    assert outcome.error.startswith(f"Error: '{case.output}' holds a line that is not a JSON row (")
    assert outcome.error.endswith("Remove that line, or pass --overwrite to start over.")


# -- ENOSPC ---------------------------------------------------------------------------------------


def test_appender_cuts_back_to_complete_rows_on_enospc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process injection at the appender's write call (the tmpfs test below is the real disk)."""
    path = tmp_path / "out.jsonl"
    appender = Appender(str(path), str(path))
    appender.write(b'{"a":1}\n')
    appender.flush()
    real_write = os.write

    def half_then_full(fd: int, data: memoryview) -> int:
        if len(data) > 4:
            return real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    appender.write(b'{"b":2}\n{"c":3}\n')
    appender.flush()  # an event-loop callback: it records the failure, never raises
    monkeypatch.setattr(os, "write", real_write)
    assert path.read_bytes() == b'{"a":1}\n'
    with pytest.raises(StorageError) as raised:
        appender.write(b'{"d":4}\n')
    assert str(raised.value) == (
        f"{path}: cannot append a row: No space left on device (ENOSPC); it keeps its 1 complete rows. "
        "Run the same command with --resume to continue."
    )
    appender.close()  # reported once: closing does not raise it again
    assert path.read_bytes() == b'{"a":1}\n'


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24k", "tmpfs", str(mount)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_is_one_line_and_keeps_complete_rows(case: Case, tiny_disk: Path) -> None:
    from tests.reverify.server_process import mcqa_rows

    case.materialized, case.rollouts = mcqa_rows(40, 2)  # ~80 rows of ~700 bytes: more than 24 KiB
    case.server.set(None, latency_ms=5)
    output = tiny_disk / "out.jsonl"
    outcome = case.run("--concurrency", "2", output=output)
    assert outcome.code == 1, outcome
    assert "Traceback" not in outcome.err and "Exception in callback" not in outcome.err
    error = outcome.error
    assert error.startswith(f"Error: {output}: cannot append a row: No space left on device (ENOSPC); ")
    assert error.endswith("complete rows. Run the same command with --resume to continue.")
    data = output.read_bytes()
    assert data.endswith(b"\n")
    kept = read_jsonl(output)  # every line a whole row
    assert f"it keeps its {len(kept)} complete rows." in error
    assert 0 < len(kept) < 80
    # once there is room again, --resume completes the run: every row once
    big = case.root / "big"
    big.mkdir()
    for name in ("out.jsonl", "out_failures.jsonl"):
        if (tiny_disk / name).exists():
            (big / name).write_bytes((tiny_disk / name).read_bytes())
    case.server.reset()
    outcome = case.run("--resume", output=big / "out.jsonl", write=False)
    assert outcome.code == 0, outcome
    assert f"- {len(kept)} rows already done (in main jsonl)" in outcome.lines
    assert sorted(key(r) for r in read_jsonl(big / "out.jsonl")) == sorted(key(r) for r in case.rollouts)

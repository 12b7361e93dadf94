"""Run locks, stale temp files, refused inputs and storage settings (issue 11, attacks 1, 4, 5)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from gymflow import locking, provenance, storage, storage_faults
from gymflow.cli import main
from gymflow.cli.interrupt import message
from tests.reliability.helpers import env, health_rows, run, write_rows

HOLD = """
import sys, time
from gymflow import locking
with locking.run_lock(sys.argv[1], "eval health-check"):
    print("held", flush=True)
    time.sleep(60)
"""


def _holder(output: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(output)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def _end(process: subprocess.Popen[str], sig: int = signal.SIGKILL) -> None:
    if process.poll() is None:
        os.kill(process.pid, sig)
    process.communicate(timeout=10)


@pytest.mark.parametrize("mode", [["--direct"], []])
def test_a_second_run_is_refused_with_one_line_naming_the_holder(tmp_path: Path, mode: list[str]) -> None:
    run_dir = tmp_path / "run"
    write_rows(run_dir / "rollouts.jsonl", health_rows(20))
    holder = _holder(run_dir / "quality_summary.json")
    if not mode:  # the flow takes the lock: time the refusal, not the local server's first start
        from gymflow.flows import _server

        _server.ensure(120)
    try:
        started = time.monotonic()
        args = ["eval", "health-check", str(run_dir), *mode]
        code, _, err = run(args, env=env(**{locking.WAIT_ENV: "0.3"}), timeout=60)
        assert code == 1
        assert time.monotonic() - started < 20  # process start-up included
        assert len(err.strip().splitlines()) == 1, err
        line = err.strip()
        assert f"pid {holder.pid}" in line and "eval health-check" in line and "waited 0.3 s" in line, line
        assert not (run_dir / "quality_summary.json").exists()
    finally:
        _end(holder)


def test_a_killed_holders_lock_is_taken_over_with_a_warning(tmp_path: Path) -> None:
    output = tmp_path / "quality_summary.json"
    holder = _holder(output)
    _end(holder)  # kill -9: the lock file stays, its flock is gone
    assert (tmp_path / ".quality_summary.json.lock").exists()
    warnings: list[str] = []
    with locking.run_lock(str(output), "eval health-check", wait=0, warn=warnings.append):
        pass
    assert len(warnings) == 1 and f"pid {holder.pid}" in warnings[0] and "without releasing" in warnings[0]
    assert not (tmp_path / ".quality_summary.json.lock").exists()


def test_lease_on_an_object_store(s3_bucket: str) -> None:
    output = f"{s3_bucket}/run/quality_summary.json"
    first = locking.Holder("run-a", "eval health-check", 1, "elsewhere", "t0")
    release = locking._acquire_remote(output, locking.lock_path(output), first, 0, 30, lambda _: None)
    try:
        second = locking.Holder("run-b", "eval aggregate", 2, "elsewhere", "t1")
        with pytest.raises(
            locking.RunLockedError, match=r"run run-a \(eval health-check, pid 1 on elsewhere"
        ):
            locking._acquire_remote(output, locking.lock_path(output), second, 0.3, 30, lambda _: None)
    finally:
        release()
    assert not storage.exists(locking.lock_path(output))
    # An expired lease of a run elsewhere is taken over, with a warning.
    expired = locking.Holder("run-c", "eval join", 3, "elsewhere", "t2", expires=time.time() - 1)
    storage.write_atomic(locking.lock_path(output), expired.to_bytes())
    warnings: list[str] = []
    with locking.run_lock(output, "eval health-check", wait=0, warn=warnings.append) as holder:
        lease = orjson.loads(storage.read_range(locking.lock_path(output), 0, 4096))
        assert lease["run_id"] == holder.run_id and lease["expires"] > time.time()
    assert warnings and "run run-c" in warnings[0]


def test_stale_temp_files_go_and_a_live_writers_stays(tmp_path: Path) -> None:
    dead = tmp_path / ".report.json.0123456789ab.tmp"
    dead.write_bytes(b"half")
    live = tmp_path / ".other.jsonl.ba9876543210.tmp"
    live.write_bytes(b"being written")
    other = tmp_path / ".notours.tmp"
    other.write_bytes(b"x")
    import fcntl

    with open(live, "rb") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        assert storage.remove_stale_temps(str(tmp_path)) == [str(dead)]
    assert live.exists() and other.exists() and not dead.exists()


def test_writes_are_hashed_while_writing(tmp_path: Path) -> None:
    data = [b"a" * 1000, b"b\n" * 10]
    sha, size = storage.write_atomic_lines(str(tmp_path / "f"), iter(data))
    assert (sha, size) == storage.sha256(str(tmp_path / "f"))


def test_outputs_of_two_runs_never_verify_together(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for directory in (first, second):
        write_rows(directory / "rollouts.jsonl", health_rows(30))
    assert main(["eval", "health-check", str(first), "--direct"]) == 0
    assert main(["eval", "health-check", str(second), "--direct", "--ignore", "model_call_failed"]) == 0
    shutil.copy(first / "quality_summary.json", second / "quality_summary.json")
    checks = provenance.verify(str(second / "quality_summary.provenance.json"))
    assert [check.status for check in checks] == ["ok", "changed", "ok"]


def test_s3_timeouts_and_retries_are_storage_options(s3_bucket: str) -> None:
    previous = storage.current_options()
    options = {name: dict(values) for name, values in previous.items()}
    options["s3"].update(connect_timeout=2, read_timeout=3, retries=4)
    with storage.using(options):
        fs, _ = storage.filesystem(f"{s3_bucket}/x")
        assert fs.config_kwargs["connect_timeout"] == 2.0 and fs.config_kwargs["read_timeout"] == 3.0
        assert fs.config_kwargs["retries"] == {"total_max_attempts": 4, "mode": "standard"}
    fs, _ = storage.filesystem(f"{s3_bucket}/x")
    connect, read, attempts = storage_faults.request_limits(storage.timeout_s())
    assert fs.config_kwargs["connect_timeout"] == connect and fs.config_kwargs["read_timeout"] == read
    assert fs.config_kwargs["retries"] == {"total_max_attempts": attempts, "mode": "standard"}


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "in" / "shard.jsonl"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    result: list[int] = []
    worker = threading.Thread(
        target=lambda: result.append(
            main(["eval", "aggregate", "-i", str(fifo), "-o", str(tmp_path / "o.jsonl"), "--direct"])
        ),
        daemon=True,
    )
    worker.start()
    worker.join(20)
    if worker.is_alive():  # unblock the reader before failing
        with open(fifo, "wb"):
            pass
        pytest.fail("aggregate waited on a FIFO")
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert result == [1] and f"{fifo}: is a FIFO (named pipe)" in line and "regular files only" in line


def test_a_stray_directory_in_the_capture_store_is_not_fatal(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_rows(run_dir / "rollouts.jsonl", health_rows(6))
    (run_dir / "model-calls" / "1041-0.capture.jsonl").mkdir(parents=True)
    assert main(["eval", "join", str(run_dir), "--direct"]) == 0
    lines = (run_dir / "rollouts_joined.jsonl").read_text().splitlines()
    assert len(lines) == 6 and all(json.loads(line) for line in lines)
    # The rerun is up to date although the entry cannot be hashed.
    assert main(["eval", "join", str(run_dir), "--direct"]) == 0


def test_interrupt_messages() -> None:
    assert message(signal.SIGINT, []) == (
        "Interrupted; nothing was written. Run the same command again to start over."
    )
    kept = message(signal.SIGINT, ["out/merged.jsonl", "out/merged.jsonl"])
    assert kept.startswith("Interrupted; kept out/merged.jsonl (complete") and "Run the same command" in kept
    assert message(signal.SIGTERM, []).startswith("Terminated; nothing was written")


def test_a_lock_released_as_it_was_refused_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that finds the lock held, then its holder gone (it ended and removed the file between
    the two looks), takes the lock: it is not refused with no holder to name."""
    import fcntl

    output = tmp_path / "quality_summary.json"
    path = tmp_path / ".quality_summary.json.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another open file: held against run_lock, as by another run
    looks: list[str] = []
    read_holder = locking._holder_soon

    def holder_ends_first(local: str, within_s: float = 1.0) -> locking.Holder | None:
        looks.append(local)
        os.unlink(path)  # the holder releases, as it does when its run ends
        os.close(fd)
        return read_holder(local, within_s=0.05)

    monkeypatch.setattr(locking, "_holder_soon", holder_ends_first)
    warnings: list[str] = []
    with locking.run_lock(str(output), "eval health-check", wait=0, warn=warnings.append):
        assert path.exists()
    assert len(looks) == 1 and warnings == []
    assert not path.exists()


def test_locks_are_reentrant_within_a_process(tmp_path: Path) -> None:
    output = str(tmp_path / "m.jsonl")
    with locking.run_lock(output, "eval aggregate", wait=0) as outer:
        with locking.run_lock(output, "eval aggregate", wait=0) as inner:
            assert inner is outer
        assert (tmp_path / ".m.jsonl.lock").exists()
    assert not (tmp_path / ".m.jsonl.lock").exists()

"""``storage.timeout_s``: how the budget reaches storage, what it becomes for botocore, and the
one-line errors of local writes (read by the reliability tests against real faults)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymflow import scratch, storage, storage_faults
from gymflow.conf.compose import load_config, storage_options
from gymflow.errors import StorageError, UsageError
from gymflow.run_context import RunContext


@pytest.fixture(autouse=True)
def _restore_storage() -> Iterator[None]:
    previous = storage.current_options()
    yield
    assert storage.current_options() == previous  # every scope a test entered is left


def test_the_config_key_reaches_storage_and_travels_with_the_options() -> None:
    assert load_config().storage.timeout_s == storage_faults.DEFAULT_TIMEOUT_S
    options = storage_options(load_config(["++storage.timeout_s=7.5"]))
    with storage.using(options):
        assert storage.timeout_s() == 7.5
    # What a pool worker, a flow or a task receives in its run context.
    ctx = RunContext(storage_options=options)
    assert storage.timeout_s() == storage_faults.DEFAULT_TIMEOUT_S
    with ctx.active():
        assert storage.timeout_s() == 7.5


def test_a_budget_that_is_not_positive_is_refused() -> None:
    with pytest.raises(UsageError, match=r"storage\.timeout_s \(Input should be greater than 0\)"):
        load_config(["++storage.timeout_s=0"])


@pytest.mark.parametrize("budget", [0.5, 2, 3, 10, 15, 30, 60, 300])
def test_request_timeouts_and_attempts_fit_in_the_budget(budget: float) -> None:
    connect, read, attempts = storage_faults.request_limits(budget)
    backoff = sum(2 ** (n - 1) for n in range(1, attempts))
    assert 0 < connect <= storage_faults.DEFAULT_CONNECT_TIMEOUT and read > connect / 2
    assert attempts * (connect + read) + backoff <= budget * 0.9 + 1e-9
    assert attempts == 1 or connect + read >= storage_faults.MIN_ATTEMPT_S


def test_s3_options_get_the_budget_and_the_users_timeouts_win() -> None:
    options, attempts = storage_faults.with_timeouts("s3", {"endpoint_url": "http://x"}, 60)
    connect, read, expected = storage_faults.request_limits(60)
    assert attempts == expected and options["endpoint_url"] == "http://x"
    assert options["config_kwargs"] == {
        "connect_timeout": connect,
        "read_timeout": read,
        "retries": {"total_max_attempts": expected, "mode": "standard"},
    }
    options, attempts = storage_faults.with_timeouts("s3", {"read_timeout": 2, "retries": 5}, 60)
    assert attempts == 5 and options["config_kwargs"]["read_timeout"] == 2.0
    assert storage_faults.with_timeouts("memory", {}, 60) == ({}, None)


def test_a_symlink_loop_is_named_as_one(tmp_path: Path) -> None:
    os.symlink("loop", tmp_path / "loop")
    with pytest.raises(StorageError) as caught:
        storage.write_atomic(str(tmp_path / "loop" / "x.json"), b"{}")
    assert str(caught.value) == f"{tmp_path}/loop/x.json: cannot write it: Too many levels of symbolic links"


def test_appending_to_or_removing_a_directory_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "out.jsonl").mkdir()
    with pytest.raises(StorageError, match=r"out\.jsonl: cannot write it: Is a directory$"):
        storage.open_append(str(tmp_path / "out.jsonl"))
    with pytest.raises(StorageError, match=r"out\.jsonl: cannot delete it: Is a directory$"):
        storage.remove(str(tmp_path / "out.jsonl"))
    with storage.open_append(str(tmp_path / "new" / "rows.jsonl")) as handle:
        handle.write(b"{}\n")
    assert (tmp_path / "new" / "rows.jsonl").read_bytes() == b"{}\n"


def test_scratch_space_that_cannot_be_made_names_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "file" / "tmp"))
    with pytest.raises(StorageError) as caught:
        scratch.scratch_dir("upload")
    assert str(caught.value) == (
        f"{tmp_path}/file/tmp: cannot create scratch space in it: Not a directory "
        "(set TMPDIR to a writable directory)"
    )


def test_a_connection_dropped_mid_transfer_is_said_as_such() -> None:
    """aiohttp's words for a body cut short (the server stopped mid-answer) become one line that
    says what happened, with them in it."""
    import aiohttp

    cut = aiohttp.ClientPayloadError("Response payload is not completed")
    cut.__cause__ = aiohttp.http_exceptions.ContentLengthError(
        "Not enough data to satisfy content length header"
    )
    line = storage_faults.describe_error(cut)
    assert line.startswith("the storage endpoint dropped the connection mid-transfer (")
    assert "Response payload is not completed" in line
    gone = aiohttp.ServerDisconnectedError()
    assert "dropped the connection mid-transfer" in storage_faults.describe_error(gone)

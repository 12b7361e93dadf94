"""gymflow.kept: a stored result's files appear under their key whole, or not at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gymflow.kept import kept_files, present


def test_files_appear_under_the_key_once_complete(tmp_path: Path) -> None:
    with kept_files(str(tmp_path), "key") as (staging, final):
        Path(staging, "rows").write_bytes(b"1")
        assert not os.path.exists(final)  # not before the block ends
    assert Path(final, "rows").read_bytes() == b"1"
    assert os.listdir(tmp_path) == ["key"]  # the staging directory became it
    assert present([os.path.join(final, "rows")]) and not present([os.path.join(final, "gone")])


def test_a_failed_step_leaves_nothing_and_a_refresh_replaces_the_old_files(tmp_path: Path) -> None:
    with kept_files(str(tmp_path), "key") as (staging, _):
        Path(staging, "old").write_bytes(b"old")
    with pytest.raises(RuntimeError), kept_files(str(tmp_path), "key") as (staging, _):
        Path(staging, "half").write_bytes(b"")
        raise RuntimeError("killed mid-way")
    assert os.listdir(tmp_path) == ["key"] and os.listdir(tmp_path / "key") == ["old"]
    with kept_files(str(tmp_path), "key") as (staging, _):
        Path(staging, "new").write_bytes(b"new")
    assert os.listdir(tmp_path / "key") == ["new"]


def test_a_dead_process_staging_directory_is_swept(tmp_path: Path) -> None:
    orphan = tmp_path / "gymflow-kept-999999999-abc"  # no such process
    orphan.mkdir()
    with kept_files(str(tmp_path), "key"):
        pass
    assert not orphan.exists()

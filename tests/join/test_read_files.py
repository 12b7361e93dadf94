"""The capture files a join read, spilled as ranges report them and sorted by URI."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymflow.join._read_files import ReadFiles
from gymflow.provenance import FileDigest


def test_sorted_by_uri_each_once_as_last_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gymflow.spill.RUN_ITEMS", 3)  # several spilled runs, merged
    first = [FileDigest(f"file:///c/{name}", "a" * 64, 1) for name in ("b", "a", "d")]
    second = [FileDigest("file:///c/a", "b" * 64, 2), FileDigest("file:///c/c", "c" * 64, 3)]
    with ReadFiles(str(tmp_path)) as read:
        read.add(first)
        read.add(second)
        read.add([FileDigest("file:///c/e", "e" * 64, 5)])
        read.sort()
        expected = [
            FileDigest("file:///c/a", "b" * 64, 2),  # read again later: the later digest
            FileDigest("file:///c/b", "a" * 64, 1),
            FileDigest("file:///c/c", "c" * 64, 3),
            FileDigest("file:///c/d", "a" * 64, 1),
            FileDigest("file:///c/e", "e" * 64, 5),
        ]
        assert list(read) == expected
        assert list(read) == expected  # read back as often as needed
        assert list(read.uris()) == [d.uri for d in expected]
    assert read.count == 6
    (tmp_path / "empty").mkdir()
    with ReadFiles(str(tmp_path / "empty")) as empty:
        empty.sort()
        assert list(empty) == []

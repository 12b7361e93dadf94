"""Behaviour of gymflow.storage on local paths, file:// URLs, memory:// and a real S3 API (moto)."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import s3fs  # type: ignore[import-untyped]

from gymflow import storage, threads
from gymflow.errors import InputError, StorageError


@pytest.fixture(params=["local", "file-url", "memory", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A writable directory in each storage backend, in the form a user would name it."""
    if request.param == "local":
        return str(tmp_path)
    if request.param == "file-url":
        return "file://" + str(tmp_path)
    if request.param == "memory":
        request.getfixturevalue("memfs")
        return f"memory://gymflow-{uuid.uuid4().hex[:8]}"
    bucket: str = request.getfixturevalue("s3_bucket")
    return bucket + "/run"


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Shrink the streaming chunk so a few bytes exercise every chunk boundary."""
    monkeypatch.setattr(storage, "CHUNK_SIZE", 7)
    yield


def reference_lines(data: bytes) -> list[tuple[int, bytes]]:
    lines, offset = [], 0
    for line in data.splitlines(keepends=True) if b"\r" not in data else _split_lf(data):
        lines.append((offset, line))
        offset += len(line)
    return lines


def _split_lf(data: bytes) -> list[bytes]:
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    return lines + ([parts[-1]] if parts[-1] else [])


def names_in(directory: str) -> list[str]:
    """Every entry of ``directory``, hidden ones included (temp files are dot-files locally)."""
    fs, path = storage.filesystem(directory)
    fs.invalidate_cache()
    return sorted(storage.name(str(entry)) for entry in fs.ls(path, detail=False))


SAMPLE = b'{"a": 1}\n\n{"b": "two"}\r\nthree\n' + b"x" * 30 + b"\nlast line without newline"


# -- metadata and writing ------------------------------------------------------------------------


def test_write_then_inspect_in_every_backend(root: str) -> None:
    url = storage.join(root, "sub", "data.jsonl")
    assert not storage.exists(url)
    storage.write_atomic(url, SAMPLE)
    assert storage.exists(url)
    assert storage.isfile(url)
    assert not storage.isdir(url)
    assert storage.isdir(storage.parent(url))
    assert storage.isdir(root)
    assert not storage.isfile(root)
    assert storage.size(url) == len(SAMPLE)
    with storage.open_read(url) as f:
        assert f.read() == SAMPLE
    assert storage.read_range(url, 2, 5) == SAMPLE[2:5]
    assert storage.read_range(url, len(SAMPLE) - 3, len(SAMPLE) + 100) == SAMPLE[-3:]
    assert storage.read_range(url, 4, 4) == b""


def test_missing_file_is_an_input_error_naming_the_url(root: str) -> None:
    url = storage.join(root, "absent.jsonl")
    assert not storage.exists(url) and not storage.isfile(url) and not storage.isdir(url)
    with pytest.raises(InputError, match="absent.jsonl"):
        storage.size(url)
    with pytest.raises(InputError, match="absent.jsonl"):
        storage.sha256(url)
    with pytest.raises(InputError, match="absent.jsonl"):
        list(storage.iter_lines(url))


def test_write_atomic_replaces_and_leaves_no_temp_file(root: str) -> None:
    url = storage.join(root, "report.json")
    storage.write_atomic(url, b"old")
    storage.write_atomic(url, b"new")
    assert storage.read_range(url, 0, 100) == b"new"
    assert names_in(root) == ["report.json"]


def test_failed_streaming_write_keeps_the_old_target(root: str) -> None:
    url = storage.join(root, "out.jsonl")
    storage.write_atomic(url, b"old content\n")

    def chunks() -> Iterator[bytes]:
        yield b"partial line 1\n"
        yield b"partial line 2\n"
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        storage.write_atomic_lines(url, chunks())
    assert storage.read_range(url, 0, 100) == b"old content\n"
    assert names_in(root) == ["out.jsonl"]


def test_failed_first_streaming_write_leaves_no_target(tmp_path: Path) -> None:
    def chunks() -> Iterator[bytes]:
        yield b"a\n"
        raise ValueError("bad row")

    with pytest.raises(ValueError):
        storage.write_atomic_lines(str(tmp_path / "new" / "out.jsonl"), chunks())
    assert os.listdir(tmp_path / "new") == []


def test_streaming_write_in_every_backend(root: str) -> None:
    url = storage.join(root, "deep", "er", "lines.jsonl")
    storage.write_atomic_lines(url, (b"%d\n" % i for i in range(1000)))
    assert storage.sha256(url) == (
        hashlib.sha256(b"".join(b"%d\n" % i for i in range(1000))).hexdigest(),
        sum(len(b"%d\n" % i) for i in range(1000)),
    )


def test_local_write_creates_parent_dirs_and_honours_umask(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c.json"
    storage.write_atomic(str(target), b"{}")
    assert target.read_bytes() == b"{}"
    old = os.umask(0o022)
    os.umask(old)
    assert target.stat().st_mode & 0o777 == 0o666 & ~old


def test_write_to_a_directory_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(StorageError, match="dir"):
        storage.write_atomic(str(tmp_path / "dir"), b"x")


# -- hashing -----------------------------------------------------------------------------------


def test_sha256_matches_hashlib(root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage, "CHUNK_SIZE", 97)
    data = random.Random(1).randbytes(1000)
    url = storage.join(root, "blob.bin")
    storage.write_atomic(url, data)
    assert storage.sha256(url) == (hashlib.sha256(data).hexdigest(), 1000)


def test_sha256_of_an_empty_file(root: str) -> None:
    url = storage.join(root, "empty")
    storage.write_atomic(url, b"")
    assert storage.sha256(url) == (hashlib.sha256(b"").hexdigest(), 0)


def test_sha256_of_a_large_local_file(tmp_path: Path) -> None:
    data = random.Random(2).randbytes(3 * storage.CHUNK_SIZE + 5)
    (tmp_path / "big").write_bytes(data)
    assert storage.sha256(str(tmp_path / "big")) == (hashlib.sha256(data).hexdigest(), len(data))


# -- lines and ranges --------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 3, 64])
@pytest.mark.parametrize(
    "data",
    [SAMPLE, b"", b"\n", b"no newline", b"a\nb\n", b"\n\n\nx", b"ab\r\ncd\r\n"],
    ids=["sample", "empty", "lf", "no-lf", "two", "blank", "crlf"],
)
def test_iter_lines_any_window_any_chunking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, data: bytes
) -> None:
    monkeypatch.setattr(storage, "CHUNK_SIZE", chunk)
    path = tmp_path / "f"
    path.write_bytes(data)
    expected = reference_lines(data)
    assert list(storage.iter_lines(str(path))) == expected
    for start in range(len(data) + 2):
        for end in [*range(start, len(data) + 2, 3), start + 1, None]:
            got = list(storage.iter_lines(str(path), start, end))
            want = [(o, line) for o, line in expected if o >= start and (end is None or o < end)]
            assert got == want, (start, end)


@pytest.mark.usefixtures("small_chunks")
def test_iter_lines_in_every_backend(root: str) -> None:
    url = storage.join(root, "rollouts.jsonl")
    storage.write_atomic(url, SAMPLE)
    assert list(storage.iter_lines(url)) == reference_lines(SAMPLE)
    assert b"".join(line for _, line in storage.iter_lines(url)) == SAMPLE
    assert list(storage.iter_lines(url, 10, 11)) == [(10, b'{"b": "two"}\r\n')]


def test_iter_lines_last_line_without_newline_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"one\r\ntwo")
    assert list(storage.iter_lines(str(path))) == [(0, b"one\r\n"), (5, b"two")]


def test_iter_lines_a_50_mb_single_line(tmp_path: Path) -> None:
    line = b"{" + b"y" * (50 * 2**20) + b"}\n"
    path = tmp_path / "huge.jsonl"
    path.write_bytes(b"small\n" + line + b"tail")
    got = list(storage.iter_lines(str(path)))
    assert [offset for offset, _ in got] == [0, 6, 6 + len(line)]
    assert got[1][1] == line
    assert got[2][1] == b"tail"
    assert [o for o, _ in storage.iter_lines(str(path), 7)] == [6 + len(line)]


def test_iter_lines_a_line_longer_than_several_chunks_on_s3(
    s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storage, "CHUNK_SIZE", 64 * 2**10)
    line = b"z" * (2**20 + 17) + b"\n"
    url = f"{s3_bucket}/long.jsonl"
    storage.write_atomic(url, b"a\n" + line + b"b\n")
    assert list(storage.iter_lines(url)) == [(0, b"a\n"), (2, line), (2 + len(line), b"b\n")]


def lines_file(n: int, seed: int) -> bytes:
    rng = random.Random(seed)
    return b"".join(b"%d:" % i + b"x" * rng.choice([0, 1, 5, 40, 300]) + b"\n" for i in range(n)) + b"end"


@pytest.mark.parametrize("parts", [1, 2, 3, 7, 16, 1000])
def test_split_ranges_partition_the_lines_exactly(tmp_path: Path, parts: int) -> None:
    data = lines_file(500, seed=parts)
    path = str(tmp_path / "f")
    Path(path).write_bytes(data)
    ranges = storage.split_ranges(path, parts)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    assert all(start < end for start, end in ranges)
    assert len(ranges) <= parts
    assert all(data[start - 1 : start] == b"\n" for start, _ in ranges[1:])
    seen = [item for start, end in ranges for item in storage.iter_lines(path, start, end)]
    assert seen == list(storage.iter_lines(path))
    if parts <= 16:
        assert len(ranges) == parts


def test_split_ranges_in_every_backend(root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage, "CHUNK_SIZE", 512)
    data = lines_file(60, seed=3)
    url = storage.join(root, "shard.jsonl")
    storage.write_atomic(url, data)
    ranges = storage.split_ranges(url, 4)
    assert len(ranges) == 4
    seen = [item for start, end in ranges for item in storage.iter_lines(url, start, end)]
    assert seen == reference_lines(data)


def test_split_ranges_of_an_empty_file_and_one_long_line(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    assert storage.split_ranges(str(tmp_path / "empty"), 4) == [(0, 0)]
    (tmp_path / "one").write_bytes(b"q" * 1000 + b"\nshort\n")
    assert storage.split_ranges(str(tmp_path / "one"), 4) == [(0, 1001), (1001, 1007)]
    with pytest.raises(ValueError):
        storage.split_ranges(str(tmp_path / "one"), 0)


# -- listing -----------------------------------------------------------------------------------


def test_glob_keeps_the_pattern_form(root: str) -> None:
    for relative in ["a/x.jsonl", "a/y.jsonl", "a/z.json", "b/c/w.jsonl"]:
        storage.write_atomic(storage.join(root, relative), b"{}\n")
    assert storage.glob(storage.join(root, "a", "*.jsonl")) == [
        storage.join(root, "a", "x.jsonl"),
        storage.join(root, "a", "y.jsonl"),
    ]
    assert storage.glob(storage.join(root, "**", "*.jsonl")) == [
        storage.join(root, "a", "x.jsonl"),
        storage.join(root, "a", "y.jsonl"),
        storage.join(root, "b", "c", "w.jsonl"),
    ]
    assert storage.glob(storage.join(root, "nothing-*")) == []


def test_glob_of_a_relative_local_pattern_stays_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    storage.write_atomic("run/r1.jsonl", b"")
    assert storage.glob("run/*.jsonl") == ["run/r1.jsonl"]


def test_glob_sees_objects_written_by_another_client(s3_bucket: str) -> None:
    assert storage.glob(f"{s3_bucket}/*.jsonl") == []
    other = s3fs.S3FileSystem(skip_instance_cache=True)
    other.pipe(f"{s3_bucket.removeprefix('s3://')}/late.jsonl", b"{}\n")
    assert storage.glob(f"{s3_bucket}/*.jsonl") == [f"{s3_bucket}/late.jsonl"]
    assert storage.exists(f"{s3_bucket}/late.jsonl")


# -- URLs --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "parts", "joined"),
    [
        ("s3://bucket", ("run", "x.jsonl"), "s3://bucket/run/x.jsonl"),
        ("s3://bucket/run/", ("/x.jsonl",), "s3://bucket/run/x.jsonl"),
        ("memory://m", ("a",), "memory://m/a"),
        ("file:///tmp/d", ("a", "b"), "file:///tmp/d/a/b"),
        ("results", ("a.json",), os.path.join("results", "a.json")),
        ("/abs/results", ("a", "b.json"), "/abs/results/a/b.json"),
    ],
)
def test_join(base: str, parts: tuple[str, ...], joined: str) -> None:
    assert storage.join(base, *parts) == joined


@pytest.mark.parametrize(
    ("url", "parent", "name"),
    [
        ("s3://bucket/run/x.jsonl", "s3://bucket/run", "x.jsonl"),
        ("s3://bucket/x.jsonl", "s3://bucket", "x.jsonl"),
        ("s3://bucket", "s3://bucket", "bucket"),
        ("s3://bucket/run/", "s3://bucket", "run"),
        ("memory://m/a", "memory://m", "a"),
        ("file:///tmp/a.json", "file:///tmp", "a.json"),
        ("results/a.json", "results", "a.json"),
        ("a.json", ".", "a.json"),
        ("/a.json", "/", "a.json"),
    ],
)
def test_parent_and_name(url: str, parent: str, name: str) -> None:
    assert storage.parent(url) == parent
    assert storage.name(url) == name


def test_is_local() -> None:
    assert storage.is_local("results/x.json")
    assert storage.is_local("/abs/x.json")
    assert storage.is_local("file:///abs/x.json")
    assert not storage.is_local("s3://bucket/x.json")
    assert not storage.is_local("memory://x.json")


def test_to_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert storage.to_uri("run/x.jsonl") == f"file://{tmp_path}/run/x.jsonl"
    assert storage.to_uri(f"file://{tmp_path}/y") == f"file://{tmp_path}/y"
    assert storage.to_uri("s3://bucket/run/x.jsonl") == "s3://bucket/run/x.jsonl"
    assert storage.to_uri("s3://AKIDEXAMPLE:hunter2@bucket/x") == "s3://bucket/x"
    assert (
        storage.to_uri("https://user:pw@host:8080/v?a=1&api_key=zzz&X-Amz-Signature=s&sig=q&b=2#f")
        == "https://host:8080/v?a=1&b=2#f"
    )


# -- filesystems and configuration -------------------------------------------------------------


def test_options_are_copied_and_scoped() -> None:
    previous = storage.current_options()
    options = {"s3": {"endpoint_url": "http://127.0.0.1:1", "key": "k"}}
    with storage.using(options):
        options["s3"]["key"] = "changed"
        assert storage.current_options() == {"s3": {"endpoint_url": "http://127.0.0.1:1", "key": "k"}}
        storage.current_options()["s3"]["key"] = "mutated"
        assert storage.current_options()["s3"]["key"] == "k"
        with storage.using({}):
            assert storage.current_options() == {}
        seen: list[dict[str, dict[str, object]]] = []
        threads.start(lambda: seen.append(storage.current_options()), name="gymflow-test").join()
        assert seen == [{"s3": {"endpoint_url": "http://127.0.0.1:1", "key": "k"}}]  # threads inherit
    assert storage.current_options() == previous


def test_filesystem_uses_the_configured_options(s3_bucket: str, s3_server: str) -> None:
    fs, path = storage.filesystem(f"{s3_bucket}/a/b.json")
    assert isinstance(fs, s3fs.S3FileSystem)
    assert fs.endpoint_url == s3_server
    assert path == f"{s3_bucket.removeprefix('s3://')}/a/b.json"
    local_fs, local_path = storage.filesystem("relative/x")
    assert local_fs.protocol[0] == "file"
    assert local_path == os.path.abspath("relative/x")


def test_aws_endpoint_url_from_the_environment_is_enough(s3_bucket: str) -> None:
    no_options = storage.using({})
    no_options.__enter__()
    s3fs.S3FileSystem.clear_instance_cache()
    storage.write_atomic(f"{s3_bucket}/env.json", b"{}")
    assert storage.read_range(f"{s3_bucket}/env.json", 0, 10) == b"{}"


def test_a_missing_bucket_is_not_a_directory(s3_bucket: str) -> None:
    assert not storage.isdir("s3://gymflow-no-such-bucket-x/run")
    assert not storage.exists("s3://gymflow-no-such-bucket-x")
    with pytest.raises(StorageError, match="s3://gymflow-no-such-bucket-x/out.json"):
        storage.write_atomic("s3://gymflow-no-such-bucket-x/out.json", b"{}")


@pytest.mark.usefixtures("memfs")
def test_errors_never_show_credentials() -> None:
    with pytest.raises(InputError) as raised:
        storage.size("memory://user:hunter2@host/x.jsonl?token=hunter3&part=1")
    message = str(raised.value)
    assert "memory://host/x.jsonl?part=1" in message
    assert "hunter2" not in message and "hunter3" not in message


def test_core_modules_do_not_import_prefect() -> None:
    code = "import sys, gymflow.storage, gymflow.provenance; assert 'prefect' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

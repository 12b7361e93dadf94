"""Provenance records, the cache key and `gymflow provenance show|verify` (spec/provenance.md)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import types
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

import gymflow.cli
from gymflow import __version__, provenance, storage
from gymflow.errors import InputError, UsageError

SECRET = "s3cr3t-Value-9f8e7d"
STARTED = datetime(2026, 11, 30, 1, 2, 3, 456789, tzinfo=UTC)
FINISHED = STARTED + timedelta(seconds=2, milliseconds=333)


def make_run(directory: Path) -> dict[str, Path]:
    """A results directory: one input, the two health reports."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "rollouts": directory / "rollouts.jsonl",
        "summary": directory / "quality_summary.json",
        "verdicts": directory / "rollout_verdicts.jsonl",
    }
    files["rollouts"].write_bytes(b'{"reward": 1.0}\n{"reward": 0.0}\n')
    files["summary"].write_bytes(b'{"ok": true}\n')
    files["verdicts"].write_bytes(b'{"verdict": "pass"}\n')
    return files


def write_health_record(files: dict[str, Path], parameters: dict[str, object] | None = None) -> str:
    inputs = [provenance.digest(str(files["rollouts"]))]
    outputs = [provenance.digest(str(files["summary"])), provenance.digest(str(files["verdicts"]))]
    params = parameters if parameters is not None else {"ignored_checks": [], "workers": 2}
    key = provenance.cache_key("eval health-check", {"ignored_checks": []}, [("rollouts", inputs[0].sha256)])
    record = provenance.build_record(
        "eval health-check",
        key,
        inputs,
        outputs,
        params,
        {"kind": "direct"},
        STARTED,
        FINISHED,
    )
    url = provenance.record_path(str(files["summary"]))
    provenance.write_record(url, record)
    return url


# -- digests and canonical JSON ----------------------------------------------------------------


def test_digest_is_the_sha256_of_the_bytes_and_an_absolute_file_uri(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("x.jsonl").write_bytes(b"abc\n")
    d = provenance.digest("x.jsonl")
    assert d == provenance.FileDigest(f"file://{tmp_path}/x.jsonl", hashlib.sha256(b"abc\n").hexdigest(), 4)
    with pytest.raises(AttributeError):
        d.bytes = 5  # type: ignore[misc]


def test_a_prefetched_digest_is_used_only_while_the_file_is_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"abc\n")
    provenance.prefetch([str(path)])
    assert provenance.digest(str(path)).sha256 == hashlib.sha256(b"abc\n").hexdigest()
    path.write_bytes(b"abd\n")  # same size: the modification time tells
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert provenance.digest(str(path)).sha256 == hashlib.sha256(b"abd\n").hexdigest()
    provenance.prefetch([str(path)])
    path.write_bytes(b"longer\n")
    assert provenance.digest(str(path)) == provenance.FileDigest(
        path.as_uri(), hashlib.sha256(b"longer\n").hexdigest(), 7
    )


def test_a_remembered_digest_holds_until_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "written.jsonl"
    path.write_bytes(b"abc\n")
    provenance.remember(str(path), provenance.FileDigest(path.as_uri(), "0" * 64, 4))
    assert provenance.digest(str(path)).sha256 == "0" * 64  # not read again
    path.write_bytes(b"abcd\n")
    assert provenance.digest(str(path)).sha256 == hashlib.sha256(b"abcd\n").hexdigest()


def test_a_prefetched_file_that_went_missing_fails_as_without_prefetch(tmp_path: Path) -> None:
    path = tmp_path / "gone.jsonl"
    path.write_bytes(b"abc\n")
    provenance.prefetch([str(path), str(tmp_path / "never.jsonl"), "s3://bucket/remote.jsonl"])
    path.unlink()
    with pytest.raises(InputError):
        provenance.digest(str(path))


def test_canonical_json_sorts_keys_compactly_in_utf8() -> None:
    assert provenance.canonical_json({"b": [1, {"d": 2, "c": "é"}], "a": None}) == (
        '{"a":null,"b":[1,{"c":"é","d":2}]}'.encode()
    )


# -- the cache key -----------------------------------------------------------------------------


def key(
    parameters: dict[str, object] | None = None,
    inputs: list[tuple[str, str]] | None = None,
    command: str = "eval aggregate",
    verifier: dict[str, object] | None = None,
) -> str:
    return provenance.cache_key(
        command,
        {"num_repeats": 4, "metrics": ["pass@k"]} if parameters is None else parameters,
        [("shard", "a" * 64), ("shard", "b" * 64)] if inputs is None else inputs,
        verifier,
    )


def test_cache_key_is_stable_and_shaped() -> None:
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", key())
    assert key() == key()
    assert key(parameters={"metrics": ["pass@k"], "num_repeats": 4}) == key()
    assert key(inputs=[("shard", "b" * 64), ("shard", "a" * 64)]) == key()


def test_cache_key_covers_exactly_the_documented_fields() -> None:
    payload = {
        "schema": "gymflow.provenance/1",
        "command": "eval aggregate",
        "gymflow": __version__,
        "parameters": {"num_repeats": 4, "metrics": ["pass@k"]},
        "inputs": [["shard", "a" * 64], ["shard", "b" * 64]],
        "verifier": None,
    }
    expected = "sha256:" + hashlib.sha256(provenance.canonical_json(payload)).hexdigest()
    assert key() == expected


def test_cache_key_uses_only_what_it_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = key()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GYMFLOW_WORKERS", "17")
    assert key() == before
    # Leaving non-output-affecting settings out is the caller's job: anything passed counts.
    assert key(parameters={"num_repeats": 4, "metrics": ["pass@k"], "workers": 2}) != before


@pytest.mark.parametrize(
    "change",
    [
        {"parameters": {"num_repeats": 5, "metrics": ["pass@k"]}},
        {"inputs": [("shard", "a" * 64), ("shard", "c" * 64)]},
        {"inputs": [("shard", "a" * 64), ("other", "b" * 64)]},
        {"command": "eval health-check"},
        {"verifier": {"name": "math", "url": "http://judge:8000", "reverify_mode": "full"}},
    ],
)
def test_cache_key_changes_with_each_field(change: dict[str, object]) -> None:
    assert key(**change) != key()  # type: ignore[arg-type]


def test_cache_key_changes_with_one_input_byte_but_not_with_paths(tmp_path: Path) -> None:
    first, moved = tmp_path / "a" / "rollouts.jsonl", tmp_path / "b" / "renamed.jsonl"
    for path in (first, moved):
        path.parent.mkdir()
        path.write_bytes(b'{"reward": 1.0}\n' * 100)
    same = [key(inputs=[("rollouts", provenance.digest(str(p)).sha256)]) for p in (first, moved)]
    assert same[0] == same[1]
    data = bytearray(first.read_bytes())
    data[57] ^= 1
    first.write_bytes(bytes(data))
    assert key(inputs=[("rollouts", provenance.digest(str(first)).sha256)]) != same[0]


def test_cache_key_never_depends_on_secrets() -> None:
    with_secret = key(parameters={"num_repeats": 4, "metrics": ["pass@k"], "api_key": SECRET})
    other_secret = key(parameters={"num_repeats": 4, "metrics": ["pass@k"], "api_key": "different"})
    assert with_secret == other_secret


# -- redaction ---------------------------------------------------------------------------------


def test_redact_removes_secrets_at_any_depth() -> None:
    params = {
        "API_KEY": SECRET,
        "server": {
            "url": f"https://admin:{SECRET}@judge.example:8443/verify?x=1&token={SECRET}",
            "headers": {"Authorization": f"Bearer {SECRET}"},
            "retries": [{"client_secret": SECRET}, {"attempts": 3}],
        },
        "aws": {"aws_secret_access_key": SECRET, "session-token": SECRET, "db_password": SECRET},
        "credentials_file": "/home/u/.aws/credentials",
        "num_repeats": 4,
        "optional_token": None,
        "local": "results/run",
    }
    redacted = provenance.redact(params)
    assert SECRET not in json.dumps(redacted)
    assert redacted["API_KEY"] == "<redacted>"
    assert redacted["server"]["url"] == "https://judge.example:8443/verify?x=1"
    assert redacted["server"]["headers"] == {"Authorization": "<redacted>"}
    assert redacted["server"]["retries"] == [{"client_secret": "<redacted>"}, {"attempts": 3}]
    assert set(redacted["aws"].values()) == {"<redacted>"}
    assert redacted["credentials_file"] == "<redacted>"
    assert redacted["num_repeats"] == 4 and redacted["local"] == "results/run"
    assert redacted["optional_token"] is None
    assert params["API_KEY"] == SECRET  # the input is not modified


def test_secrets_never_reach_the_record_file(tmp_path: Path) -> None:
    files = make_run(tmp_path / "run")
    inputs = [provenance.digest(str(files["rollouts"]))]
    outputs = [provenance.digest(str(files["summary"]))]
    record = provenance.build_record(
        "eval reverify",
        "sha256:" + "0" * 64,
        inputs,
        outputs,
        {"judge": {"api_key": SECRET, "model": "m"}, "endpoint": f"http://u:{SECRET}@h/x"},
        {"kind": "prefect", "flow_run_url": f"http://prefect/runs/1?access_token={SECRET}"},
        STARTED,
        FINISHED,
        verifier={"name": "math", "url": f"http://judge?token={SECRET}", "Authorization": SECRET},
    )
    url = str(tmp_path / "run" / "out.provenance.json")
    provenance.write_record(url, record)
    assert SECRET.encode() not in Path(url).read_bytes()


# -- the record --------------------------------------------------------------------------------


def test_record_has_the_spec_shape_and_key_order(tmp_path: Path) -> None:
    files = make_run(tmp_path)
    url = write_health_record(files)
    assert url == str(tmp_path / "quality_summary.provenance.json")
    text = Path(url).read_text()
    assert text.startswith('{\n  "schema": "gymflow.provenance/1",\n  "command": "eval health-check",')
    record = json.loads(text)
    assert list(record) == [
        "schema",
        "command",
        "cache_key",
        "inputs",
        "outputs",
        "parameters",
        "code",
        "verifier",
        "orchestrator",
        "started_at",
        "finished_at",
    ]
    assert record["inputs"] == [
        {
            "uri": f"file://{files['rollouts']}",
            "sha256": hashlib.sha256(files["rollouts"].read_bytes()).hexdigest(),
            "bytes": files["rollouts"].stat().st_size,
        }
    ]
    assert [o["uri"] for o in record["outputs"]] == [
        f"file://{files['summary']}",
        f"file://{files['verdicts']}",
    ]
    assert record["parameters"] == {"ignored_checks": [], "workers": 2}
    assert record["code"]["gymflow"] == __version__
    assert record["code"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert set(record["code"]["packages"]) == {"prefect", "pydantic", "fsspec", "s3fs", "orjson", "httpx"}
    assert record["verifier"] is None
    assert record["orchestrator"] == {"kind": "direct"}
    assert record["started_at"] == "2026-11-30T01:02:03.456Z"
    assert record["finished_at"] == "2026-11-30T01:02:05.789Z"
    assert provenance.read_record(url) == record


def test_timestamps_are_utc_with_milliseconds() -> None:
    eastern = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=timezone(timedelta(hours=-5)))
    assert provenance.timestamp(eastern) == "2026-01-02T08:04:05.006Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", provenance.timestamp())
    with pytest.raises(UsageError):
        provenance.timestamp(datetime(2026, 1, 1))


def test_orchestrator_kind_is_checked() -> None:
    with pytest.raises(UsageError):
        provenance.build_record("c", "k", [], [], {}, {"kind": "airflow"}, STARTED, FINISHED)


@pytest.mark.parametrize(
    ("output", "record"),
    [
        ("s3://b/run/quality_summary.json", "s3://b/run/quality_summary.provenance.json"),
        ("results/unsafe_metrics.jsonl", "results/unsafe_metrics.provenance.json"),
        ("metrics.json", "metrics.provenance.json"),
        ("file:///r/agg.tar.gz", "file:///r/agg.tar.provenance.json"),
        ("memory://m/noext", "memory://m/noext.provenance.json"),
    ],
)
def test_record_path(output: str, record: str) -> None:
    assert provenance.record_path(output) == record


def test_read_record_of_nothing_and_of_garbage(tmp_path: Path) -> None:
    assert provenance.read_record(str(tmp_path / "none.provenance.json")) is None
    (tmp_path / "bad.provenance.json").write_text("{not json")
    with pytest.raises(InputError, match="bad.provenance.json"):
        provenance.read_record(str(tmp_path / "bad.provenance.json"))
    (tmp_path / "other.provenance.json").write_text('{"schema": "something/2"}')
    with pytest.raises(InputError, match="schema"):
        provenance.read_record(str(tmp_path / "other.provenance.json"))


def test_record_is_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = make_run(tmp_path)
    url = write_health_record(files)
    before = Path(url).read_bytes()

    def crash(src: str, dst: str) -> None:
        raise OSError("killed between the temp file and the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(Exception, match="killed"):
        write_health_record(files, {"ignored_checks": ["x"]})
    monkeypatch.undo()
    assert Path(url).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "quality_summary.json",
        "quality_summary.provenance.json",
        "rollout_verdicts.jsonl",
        "rollouts.jsonl",
    ]


# -- up to date and verify ---------------------------------------------------------------------


def test_up_to_date_needs_the_same_key_and_unchanged_outputs(tmp_path: Path) -> None:
    files = make_run(tmp_path)
    url = write_health_record(files)
    the_key = json.loads(Path(url).read_text())["cache_key"]
    assert provenance.up_to_date(url, the_key)
    assert not provenance.up_to_date(url, "sha256:" + "f" * 64)
    assert not provenance.up_to_date(str(tmp_path / "absent.provenance.json"), the_key)
    # An input change shows in the key the caller computes, not here.
    files["rollouts"].write_bytes(b"changed\n")
    assert provenance.up_to_date(url, the_key)
    files["summary"].write_bytes(b'{"ok": false}\n')  # same size, different bytes
    assert not provenance.up_to_date(url, the_key)
    write_health_record(files)
    files["verdicts"].unlink()
    assert not provenance.up_to_date(url, json.loads(Path(url).read_text())["cache_key"])


def test_up_to_date_treats_an_unreadable_record_as_stale(tmp_path: Path) -> None:
    (tmp_path / "x.provenance.json").write_text("[]")
    assert not provenance.up_to_date(str(tmp_path / "x.provenance.json"), "sha256:" + "0" * 64)


def test_verify_reports_ok_changed_missing(tmp_path: Path) -> None:
    files = make_run(tmp_path)
    url = write_health_record(files)
    assert provenance.verify(url) == [
        (f"file://{files['rollouts']}", "ok"),
        (f"file://{files['summary']}", "ok"),
        (f"file://{files['verdicts']}", "ok"),
    ]
    files["summary"].write_bytes(b'{"ok": true, "edited": 1}\n')
    files["verdicts"].unlink()
    checks = provenance.verify(url)
    assert [c.status for c in checks] == ["ok", "changed", "missing"]
    with pytest.raises(InputError, match="no provenance record"):
        provenance.verify(str(tmp_path / "absent.provenance.json"))


def test_provenance_on_s3(s3_bucket: str) -> None:
    rollouts, summary = f"{s3_bucket}/run/rollouts.jsonl", f"{s3_bucket}/run/quality_summary.json"
    storage.write_atomic(rollouts, b'{"reward": 1}\n')
    storage.write_atomic(summary, b"{}\n")
    inputs, outputs = [provenance.digest(rollouts)], [provenance.digest(summary)]
    assert inputs[0].uri == rollouts
    the_key = provenance.cache_key("eval health-check", {}, [("rollouts", inputs[0].sha256)])
    url = provenance.record_path(summary)
    provenance.write_record(
        url,
        provenance.build_record(
            "eval health-check", the_key, inputs, outputs, {}, {"kind": "direct"}, STARTED, FINISHED
        ),
    )
    assert provenance.up_to_date(url, the_key)
    assert [c.status for c in provenance.verify(url)] == ["ok", "ok"]
    storage.write_atomic(summary, b"{ }\n")
    assert [c.status for c in provenance.verify(url)] == ["ok", "changed"]
    assert not provenance.up_to_date(url, the_key)


# -- the CLI -----------------------------------------------------------------------------------


@pytest.fixture
def cli() -> types.ModuleType:
    """The ``gymflow.cli`` module."""
    return gymflow.cli


def test_cli_verify_ok_then_changed(
    tmp_path: Path, cli: types.ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    files = make_run(tmp_path)
    write_health_record(files)
    for path in ("quality_summary.json", "rollout_verdicts.jsonl", "quality_summary.provenance.json"):
        assert cli.main(["provenance", "verify", str(tmp_path / path)]) == 0
        assert capsys.readouterr().out.splitlines() == [
            f"ok  file://{files['rollouts']}",
            f"ok  file://{files['summary']}",
            f"ok  file://{files['verdicts']}",
        ]
    files["verdicts"].write_bytes(b'{"verdict": "fail"}\n')
    files["rollouts"].unlink()
    assert cli.main(["provenance", "verify", str(files["summary"])]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"missing  file://{files['rollouts']}",
        f"ok  file://{files['summary']}",
        f"changed  file://{files['verdicts']}",
    ]


def test_cli_show_prints_the_record(
    tmp_path: Path, cli: types.ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    files = make_run(tmp_path)
    url = write_health_record(files)
    assert cli.main(["provenance", "show", str(files["verdicts"])]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(Path(url).read_text())


def test_cli_finds_a_record_after_the_directory_moved(
    tmp_path: Path, cli: types.ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    files = make_run(tmp_path / "old")
    write_health_record(files)
    (tmp_path / "old").rename(tmp_path / "new")
    # The moved copy is checked where it is now (files are looked up relative to the record).
    assert cli.main(["provenance", "verify", str(tmp_path / "new" / "rollout_verdicts.jsonl")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.startswith(f"ok  {(tmp_path / 'new').as_uri()}/") for line in lines)
    (tmp_path / "new" / "rollout_verdicts.jsonl").write_bytes(b"{}\n")
    assert cli.main(["provenance", "verify", str(tmp_path / "new" / "rollout_verdicts.jsonl")]) == 1
    assert f"changed  {(tmp_path / 'new' / 'rollout_verdicts.jsonl').as_uri()}" in capsys.readouterr().out


def test_a_copied_run_is_verified_against_its_own_files_only(
    tmp_path: Path, cli: types.ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    from tests.health.builders import record as health_record
    from tests.health.builders import write_lines

    original = tmp_path / "run"
    original.mkdir()
    write_lines(original / "rollouts.jsonl", [health_record(0), health_record(1)])
    assert cli.main(["eval", "health-check", str(original), "--direct"]) == 0
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    (copy / "rollout_verdicts.jsonl").unlink()
    capsys.readouterr()
    assert cli.main(["provenance", "verify", str(copy / "quality_summary.json")]) == 1
    assert sorted(capsys.readouterr().out.splitlines()) == [
        f"missing  {(copy / 'rollout_verdicts.jsonl').as_uri()}",
        f"ok  {(copy / 'quality_summary.json').as_uri()}",
        f"ok  {(copy / 'rollouts.jsonl').as_uri()}",
    ]
    # The report named by the deleted file still finds the copy's record, and the same verdict.
    assert cli.main(["provenance", "verify", str(copy / "rollout_verdicts.jsonl")]) == 1
    assert f"missing  {(copy / 'rollout_verdicts.jsonl').as_uri()}" in capsys.readouterr().out
    assert cli.main(["provenance", "verify", str(original / "quality_summary.json")]) == 0
    assert all(line.startswith(f"ok  {original.as_uri()}/") for line in capsys.readouterr().out.splitlines())
    # A rerun in the copy is not fooled either: the record's outputs are not all there.
    record = provenance.record_path(str(copy / "quality_summary.json"))
    assert not provenance.up_to_date(record, json.loads(Path(record).read_text())["cache_key"])


def test_cli_without_a_record_or_with_extras(
    tmp_path: Path, cli: types.ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "lonely.json").write_text("{}")
    assert cli.main(["provenance", "verify", str(tmp_path / "lonely.json")]) == 1
    assert "no provenance record found" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        cli.main(["provenance", "show", str(tmp_path / "lonely.json"), "--bogus"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def _key_of_the_whole_payload(
    command: str, parameters: dict[str, object], inputs: list[tuple[str, str]], verifier: object = None
) -> str:
    """The spec's formula, over the whole payload at once."""
    payload = {
        "schema": provenance.SCHEMA,
        "command": command,
        "gymflow": __version__,
        "parameters": provenance.redact(parameters),
        "inputs": sorted([role, sha] for role, sha in inputs),
        "verifier": verifier,
    }
    return "sha256:" + hashlib.sha256(provenance.canonical_json(payload)).hexdigest()


def test_the_key_of_sorted_inputs_is_the_key_of_the_same_inputs() -> None:
    """A key hashed as its (sorted) inputs come is byte for byte the key of the whole list, for
    roles that JSON escapes too; inputs out of order are refused, never hashed into a wrong key."""
    import random

    rng = random.Random(3)
    for _ in range(100):
        roles = [
            f"capture:{rng.choice(['a', 'é', 'x y', chr(34), chr(92)])}{i}" for i in range(rng.randint(0, 20))
        ]
        inputs = sorted([(role, f"{rng.getrandbits(64):016x}") for role in roles] + [("rollouts", "ab")])
        parameters = {"capture": True, "api_key": SECRET, "quote": chr(34)}
        expected = _key_of_the_whole_payload("eval join", parameters, inputs, {"v": 1})
        assert provenance.cache_key_of_sorted("eval join", parameters, iter(inputs), {"v": 1}) == expected
        assert provenance.cache_key("eval join", parameters, inputs[::-1], {"v": 1}) == expected
    for count in (999, 1000, 1001, 2500):  # hashed a thousand at a time
        inputs = [(f"capture:{i:06d}", f"{i:064x}") for i in range(count)] + [("rollouts", "ab")]
        assert provenance.cache_key_of_sorted("c", {}, iter(inputs)) == _key_of_the_whole_payload(
            "c", {}, inputs
        )
    with pytest.raises(ValueError, match="out of order"):
        provenance.cache_key_of_sorted("eval join", {}, [("rollouts", "a"), ("capture:x", "b")])


def test_a_record_written_with_more_inputs_as_they_come(tmp_path: Path) -> None:
    """``more_inputs`` are written after the record's inputs, the same bytes as listed in it; an
    observer gets the record whole."""
    digests = [
        provenance.FileDigest(f"file:///run/{i}-é{chr(34)}.capture.jsonl", f"{i:064x}", i) for i in range(7)
    ]
    record = provenance.build_record(
        "eval join", "k", digests[:1], digests[:1], {}, {"kind": "direct"}, STARTED, FINISHED
    )
    whole = tmp_path / "whole.provenance.json"
    streamed = tmp_path / "streamed.provenance.json"
    provenance.write_record(str(whole), {**record, "inputs": [d.to_json() for d in digests]})
    provenance.write_record(str(streamed), record, more_inputs=iter(digests[1:]))
    assert streamed.read_bytes() == whole.read_bytes()
    many = [provenance.FileDigest(f"file:///run/{i}.capture.jsonl", f"{i:064x}", i) for i in range(2500)]
    provenance.write_record(str(whole), {**record, "inputs": [d.to_json() for d in [digests[0], *many]]})
    provenance.write_record(str(streamed), record, more_inputs=iter(many))  # a thousand at a time
    assert streamed.read_bytes() == whole.read_bytes()
    provenance.write_record(str(streamed), record, more_inputs=iter([]))
    provenance.write_record(str(whole), record)
    assert streamed.read_bytes() == whole.read_bytes()
    seen: list[dict[str, object]] = []
    with provenance.observing(lambda _, observed: seen.append(dict(observed))):
        provenance.write_record(str(streamed), record, more_inputs=iter(digests[1:]))
    assert seen[0]["inputs"] == [d.to_json() for d in digests]
    assert json.loads(streamed.read_bytes())["inputs"] == seen[0]["inputs"]

"""Records name the code they were written by (issue 20 item 5): the git commit and a dirty flag
from a checkout, else a hash of the installed package's files."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gymflow import provenance
from gymflow.provenance import FileDigest

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture(autouse=True)
def _fresh_identity() -> Iterator[None]:
    """Each test computes the code's identity anew (it is cached once per process)."""
    provenance.code_identity.cache_clear()
    yield
    provenance.code_identity.cache_clear()


def _git(*args: str) -> str:
    root = provenance.package_dir()
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def _record() -> dict[str, Any]:
    digest = FileDigest(uri="file:///tmp/in.jsonl", sha256="0" * 64, bytes=1)
    return provenance.build_record(
        command="eval health-check",
        cache_key="sha256:" + "1" * 64,
        inputs=[digest],
        outputs=[digest],
        parameters={},
        orchestrator={"kind": "direct"},
        started_at="2026-12-01T00:00:00.000Z",
        finished_at="2026-12-01T00:00:01.000Z",
    )


def _hide_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "checkout_of", lambda directory: None)


def test_a_record_from_this_checkout_names_its_commit_and_dirty_flag() -> None:
    code = _record()["code"]
    assert code["git"] == {
        "commit": _git("rev-parse", "HEAD").strip(),
        "dirty": bool(_git("status", "--porcelain").strip()),
    }
    assert "files_sha256" not in code


def test_the_dirty_flag_follows_the_working_tree(tmp_path: Path) -> None:
    package = tmp_path / "gymflow"
    package.mkdir()
    (package / "__init__.py").write_text("")

    def git(*args: str) -> str:
        command = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args]
        return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "one")
    assert provenance.checkout_of(package) == {"commit": git("rev-parse", "HEAD").strip(), "dirty": False}
    (package / "__init__.py").write_text("# changed\n")
    assert provenance.checkout_of(package) == {"commit": git("rev-parse", "HEAD").strip(), "dirty": True}
    git("commit", "-qam", "two")
    assert provenance.checkout_of(package) == {"commit": git("rev-parse", "HEAD").strip(), "dirty": False}
    (tmp_path / "new.py").write_text("")  # an untracked file changes what runs: dirty
    assert provenance.checkout_of(package) == {"commit": git("rev-parse", "HEAD").strip(), "dirty": True}


def test_an_installed_copy_inside_a_checkout_is_not_named_by_it(tmp_path: Path) -> None:
    """A package directory that git does not track (a venv's site-packages inside a checkout)."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    package = tmp_path / "site-packages" / "gymflow"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    assert provenance.checkout_of(package) is None


def test_without_a_checkout_the_files_hash_is_present_and_stable(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide_checkout(monkeypatch)
    first = _record()["code"]
    provenance.code_identity.cache_clear()
    second = _record()["code"]
    assert "git" not in first
    assert len(first["files_sha256"]) == 64
    assert first == second
    assert first["files_sha256"] == provenance.files_sha256(provenance.package_dir())


def test_without_git_the_files_hash_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    code = _record()["code"]
    assert "git" not in code and len(code["files_sha256"]) == 64


def test_the_files_hash_covers_names_and_bytes_of_py_and_yaml_files_only(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub" / "b.yaml").write_text("k: v\n")
    (tmp_path / "notes.txt").write_text("ignored\n")
    before = provenance.files_sha256(tmp_path)
    (tmp_path / "notes.txt").write_text("still ignored\n")
    (tmp_path / "sub" / "__pycache__").mkdir()
    (tmp_path / "sub" / "__pycache__" / "c.py").write_text("cached\n")
    assert provenance.files_sha256(tmp_path) == before
    (tmp_path / "sub" / "b.yaml").write_text("k: w\n")
    changed = provenance.files_sha256(tmp_path)
    assert changed != before
    (tmp_path / "sub" / "b.yaml").rename(tmp_path / "sub" / "c.yaml")
    assert provenance.files_sha256(tmp_path) not in (before, changed)


def test_the_cache_key_does_not_depend_on_the_code_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    key = provenance.cache_key("eval health-check", {"ignored_checks": []}, [("rollouts", "0" * 64)])
    _hide_checkout(monkeypatch)
    provenance.code_identity.cache_clear()
    assert "files_sha256" in provenance.code_versions()
    assert provenance.cache_key("eval health-check", {"ignored_checks": []}, [("rollouts", "0" * 64)]) == key


def test_an_observer_sees_records_written_and_found_current_and_never_fails_a_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = tmp_path / "out.json"
    output.write_text("{}")
    digest = provenance.digest(str(output))
    record = {**_record(), "cache_key": "sha256:k", "outputs": [digest.to_json()]}
    url = str(tmp_path / "out.provenance.json")
    outer: list[str] = []
    inner: list[tuple[str, Any]] = []
    with provenance.observing(lambda u, r: outer.append(u)):
        with provenance.observing(lambda u, r: inner.append((u, r["cache_key"]))):
            provenance.write_record(url, record)
            assert provenance.up_to_date(url, "sha256:k")
            assert not provenance.up_to_date(url, "sha256:other")
        assert inner == [(url, "sha256:k"), (url, "sha256:k")] and outer == []

        def broken(u: str, r: Any) -> None:
            raise RuntimeError("observer down")

        with provenance.observing(broken):
            provenance.write_record(url, record)
    assert provenance.read_record(url) == record
    assert "observer down" in caplog.text
    provenance.write_record(url, record)  # outside every block: nobody is told
    assert len(inner) == 2 and outer == []

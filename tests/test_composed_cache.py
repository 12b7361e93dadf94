"""The packaged configuration Hydra composes is kept between commands (gymflow.conf.composed_cache):
the same result as Hydra's, named by every input, and a cache that cannot be used is ignored."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gymflow.conf import compose as compose_module
from gymflow.conf import composed_cache
from gymflow.conf.compose import COMMANDS
from gymflow.conf.overrides import Override, parse_overrides

CHOICES = [[], ["runner=dask"], ["server=local", "storage=default"]]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "gymflow" / "config"


def _choices(texts: list[str]) -> list[Override]:
    return parse_overrides(texts)


@pytest.mark.parametrize("name", COMMANDS)
def test_the_cached_composition_is_hydras(cache: Path, name: str) -> None:
    for texts in CHOICES:
        fresh = compose_module._hydra_compose(name, texts)
        stored = compose_module._compose_packaged(name, _choices(texts))
        assert stored == fresh
        files = list(cache.glob(f"{name}-*.json"))
        assert files, "the composition was not stored"
        again = compose_module._compose_packaged(name, _choices(texts))
        assert again == fresh


def test_a_stored_result_is_read_instead_of_composing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = compose_module._compose_packaged("join", [])
    calls: list[str] = []

    def composing(name: str, texts: list[str]) -> dict[str, object]:
        calls.append(name)
        return {}

    monkeypatch.setattr(compose_module, "_hydra_compose", composing)
    assert compose_module._compose_packaged("join", []) == first
    assert calls == []


def test_every_input_names_the_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "conf"
    shutil.copytree(
        Path(composed_cache.__file__).parent, package, ignore=shutil.ignore_patterns("*.py", "__pycache__")
    )
    monkeypatch.setattr(composed_cache, "_PACKAGE", package)
    key = composed_cache._key("join", [])
    assert composed_cache._key("join", []) == key
    assert composed_cache._key("aggregate", []) != key
    assert composed_cache._key("join", ["runner=dask"]) != key
    dask = package / "runner" / "dask.yaml"
    dask.write_text(dask.read_text() + "\n# edited\n")
    edited = composed_cache._key("join", [])
    assert edited != key
    (package / "runner" / "new.yaml").write_text("workers: 1\n")
    assert composed_cache._key("join", []) != edited


def test_a_cache_that_cannot_be_used_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # cannot be created: composed each time
    assert compose_module._compose_packaged("join", []) == compose_module._hydra_compose("join", [])
    assert not list(tmp_path.glob("**/*.tmp"))

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    compose_module._compose_packaged("join", [])
    [stored] = list((tmp_path / "cache").glob("gymflow/config/join-*.json"))
    stored.write_bytes(b"{ torn")
    assert compose_module._compose_packaged("join", []) == compose_module._hydra_compose("join", [])
    assert stored.read_bytes().startswith(b"{") and stored.read_bytes() != b"{ torn"  # stored again


def test_a_value_json_cannot_hold_exactly_is_not_stored(cache: Path) -> None:
    data = {"limit": float("inf")}
    assert composed_cache.cached_compose("x", [], lambda: data) == data
    assert not cache.exists() or not list(cache.iterdir())

"""The versions a provenance record names are read from each distribution's metadata headers, as
``importlib.metadata.version`` reads them: for every installed distribution, and for metadata
whose description or folded headers mention another version."""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable
from pathlib import Path

import pytest

from gymflow import provenance


def test_installed_versions_read_as_importlib_metadata_reads_them() -> None:
    names = {dist.metadata["Name"] for dist in importlib.metadata.distributions()} - {None}
    assert len(names) > 20
    for name in sorted(names):
        assert provenance.installed_version(name) == importlib.metadata.version(name), name


@pytest.mark.parametrize(
    "metadata",
    [
        "Metadata-Version: 2.1\nName: tricky\nversion: 1.2.3\n\nVersion: 9.9 in the description\n",
        "Metadata-Version: 2.1\nName: tricky\nSummary: a summary\n Version: 0.0 folded into it\n"
        "Version: 1.2.3\nVersion: 4.5.6\n",
        "Metadata-Version: 2.1\nName: tricky\nVersion:1.2.3  \n",
        "Metadata-Version: 2.1\nName: tricky\n\nVersion: 1.2.3\n",  # none among the headers
        "Metadata-Version: 2.1\nName: tricky\nnot a header\nVersion: 1.2.3\n",  # the headers ended
        "Metadata-Version: 2.1\r\nName: tricky\r\nVersion: \t1.2.3\r\n",
        "Metadata-Version: 2.1\nName: tricky\nVersion: 1.2\n .3 folded\n",
    ],
)
def test_a_version_is_read_from_the_headers_only(
    metadata: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = tmp_path / "tricky-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(metadata)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    # Without a Version header importlib.metadata gives None, or raises KeyError where the
    # importlib_metadata backport found the distribution: the same either way.
    assert _outcome(provenance.installed_version) == _outcome(importlib.metadata.version)


def _outcome(version: Callable[[str], str]) -> tuple[str, object]:
    try:
        return "value", version("tricky")
    except Exception as exc:  # noqa: BLE001 - compared, not handled
        return "raised", type(exc).__name__


def test_an_absent_distribution_is_not_found() -> None:
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        provenance.installed_version("no-such-distribution-of-gymflow")

"""Output paths: derived names (reverify.md §0), ``unsafe_`` prefix (§2.5), local staging of remote
outputs (§0 G), deletion for ``--overwrite`` (§2.7)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

from gymflow import provenance, scratch, storage

__all__ = ["OutputPaths", "delete", "derived", "download", "stem_path", "upload"]


def stem_path(url: str, suffix: str) -> str:
    """``D/S<suffix>`` for an output ``D/S.ext`` (S = name minus its last suffix)."""
    base = storage.name(url)
    stem = base.rsplit(".", 1)[0] if "." in base.lstrip(".") else base
    return url.rstrip("/")[: len(url.rstrip("/")) - len(base)] + stem + suffix


def derived(url: str) -> tuple[str, str]:
    """The failures sidecar and the aggregate-metrics file of an output."""
    return stem_path(url, "_failures.jsonl"), stem_path(url, "_aggregate_metrics.json")


def with_prefix(url: str, prefix: str) -> str:
    """``url`` with its file name (not its directory) prefixed."""
    base = storage.name(url)
    return url.rstrip("/")[: len(url.rstrip("/")) - len(base)] + prefix + base


@dataclass
class OutputPaths:
    """Where one run writes: final URLs and the local files appended to during the run."""

    output: str
    sidecar: str
    metrics: str
    record: str
    local_output: str
    local_sidecar: str
    staging: str | None = None

    @classmethod
    def of(cls, output: str, unsafe: bool) -> OutputPaths:
        final = with_prefix(output, "unsafe_") if unsafe else output
        sidecar, metrics = derived(final)
        record = provenance.record_path(final)
        if storage.is_local(final):
            local = final[len("file://") :] if final.startswith("file://") else final
            return cls(final, sidecar, metrics, record, local, derived(local)[0])
        staging = scratch.scratch_dir("reverify")
        local = os.path.join(staging, storage.name(final))
        return cls(final, sidecar, metrics, record, local, derived(local)[0], staging)

    @property
    def remote(self) -> bool:
        return self.staging is not None

    def publish(self) -> None:
        """Put the staged files at the remote location (no-op for local outputs)."""
        if self.staging is None:
            return
        for local, url in ((self.local_output, self.output), (self.local_sidecar, self.sidecar)):
            if os.path.isfile(local):
                upload(local, url)

    def cleanup(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)


def upload(local: str, url: str) -> None:
    def chunks() -> Iterator[bytes]:
        with open(local, "rb") as handle:
            while block := handle.read(storage.CHUNK_SIZE):
                yield block

    storage.write_atomic_lines(url, chunks())


def download(url: str, local: str) -> None:
    with storage.open_read(url) as source, open(local, "wb") as target:
        shutil.copyfileobj(source, target, storage.CHUNK_SIZE)


def delete(url: str) -> None:
    storage.remove(url)

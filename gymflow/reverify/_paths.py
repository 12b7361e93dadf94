"""Output paths: derived names (reverify.md §0), ``unsafe_`` prefix (§2.5), local staging of remote
outputs (§0 G; kept when the upload fails, for ``--resume``), deletion for ``--overwrite`` (§2.7)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from gymflow import provenance, storage
from gymflow.errors import GymflowError, StorageError

__all__ = [
    "OutputPaths",
    "UploadError",
    "delete",
    "derived",
    "download",
    "staged_files",
    "staging_dir",
    "stem_path",
    "upload",
]


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


STAGING_ROOT = "gymflow-staged"
"""The directory (in the system's temporary directory) holding one staging directory per remote
output. Not a pid-named scratch entry: rows a failed upload left there must outlive the process."""


def staging_dir(url: str) -> str:
    """The local staging directory of a remote output, the same for every run of that output (the
    run lock keeps two runs apart), so ``--resume`` finds what an earlier run could not put."""
    digest = hashlib.sha256(storage.to_uri(url).encode()).hexdigest()[:20]
    return os.path.join(tempfile.gettempdir(), STAGING_ROOT, digest)


def staged_files(url: str) -> list[str]:
    """The staged copies of a remote output and its sidecar left by an earlier run."""
    if storage.is_local(url):
        return []
    directory = staging_dir(url)
    names = (storage.name(url), storage.name(derived(url)[0]))
    return [os.path.join(directory, n) for n in names if os.path.isfile(os.path.join(directory, n))]


class UploadError(StorageError):
    """A staged output could not be put at its remote location; the staged files are kept."""


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
    published: bool = False

    @classmethod
    def of(cls, output: str, unsafe: bool) -> OutputPaths:
        final = with_prefix(output, "unsafe_") if unsafe else output
        sidecar, metrics = derived(final)
        record = provenance.record_path(final)
        if storage.is_local(final):
            local = final[len("file://") :] if final.startswith("file://") else final
            return cls(final, sidecar, metrics, record, local, derived(local)[0])
        staging = staging_dir(final)
        local = os.path.join(staging, storage.name(final))
        return cls(final, sidecar, metrics, record, local, derived(local)[0], staging)

    @property
    def remote(self) -> bool:
        return self.staging is not None

    def publish(self) -> None:
        """Put the staged files at the remote location (no-op for local outputs). When a put fails
        the staged files stay where they are (:meth:`cleanup` keeps them) and the error names them:
        ``--resume`` continues from them."""
        if self.staging is None:
            return
        self.published = False
        try:
            for local, url in ((self.local_output, self.output), (self.local_sidecar, self.sidecar)):
                if os.path.isfile(local):
                    upload(local, url)
        except GymflowError as exc:
            raise UploadError(
                f"{exc}. The verified rows are kept in {self.local_output!r} and the failures in "
                f"{self.local_sidecar!r}: run the same command with --resume to continue from them."
            ) from exc
        self.published = True

    def cleanup(self) -> None:
        """Remove the staging directory once its files were put (kept otherwise)."""
        if self.staging is not None and self.published:
            shutil.rmtree(self.staging, ignore_errors=True)
            with contextlib.suppress(OSError):  # the shared parent, once no output is staged
                os.rmdir(os.path.dirname(self.staging))


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

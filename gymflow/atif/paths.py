"""Where a manifest's ``trajectory_path`` points, and whether it may be read (reverify.md §3.2).

A relative path is resolved against the manifest's directory, then made absolute with symlinks
resolved. **G:** the result must stay inside the manifest's directory — ``..``, an absolute path
elsewhere, a symlink that leads out and a symlink loop are refused, naming the manifest row —
unless the caller allows paths outside it (a symlink loop is refused either way).
"""

from __future__ import annotations

import errno
import os
import posixpath
import re

from gymflow import storage
from gymflow.atif.errors import AtifError
from gymflow.atif.manifest import ManifestEntry

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def _refuse(manifest: str, entry: ManifestEntry, why: str) -> AtifError:
    return AtifError(
        f"ATIF manifest row {entry.row} in {manifest}: trajectory_path {entry.trajectory_path!r} {why}"
    )


def _local(manifest: str, entry: ManifestEntry, allow_outside: bool) -> str:
    manifest_dir = os.path.dirname(os.path.abspath(manifest))
    joined = os.path.join(manifest_dir, entry.trajectory_path)
    try:
        resolved = os.path.realpath(joined, strict=True)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(manifest, entry, "is a symlink loop") from exc
        resolved = os.path.realpath(joined)
    if not allow_outside:
        base = os.path.realpath(manifest_dir)
        if os.path.commonpath([base, resolved]) != base:
            raise _refuse(
                manifest,
                entry,
                f"resolves outside the manifest directory {base} (to {resolved}); "
                "pass --allow-outside-manifest to read it",
            )
    return resolved


def _remote(manifest: str, entry: ManifestEntry, allow_outside: bool) -> str:
    scheme = _SCHEME.match(manifest)
    assert scheme is not None
    prefix, rest = manifest[: scheme.end()], manifest[scheme.end() :]
    base = posixpath.dirname(posixpath.normpath(rest))
    path = entry.trajectory_path
    given = _SCHEME.match(path)
    if given is not None and path[: given.end()].lower() == prefix.lower():
        target = posixpath.normpath(path[given.end() :])
    elif given is not None or path.startswith("/"):
        if not allow_outside:
            raise _refuse(manifest, entry, "is not inside the manifest directory")
        return path
    else:
        target = posixpath.normpath(posixpath.join(base, path))
    inside = target.startswith(base + "/") if base else target != ".." and not target.startswith(("../", "/"))
    if not inside and not allow_outside:
        raise _refuse(manifest, entry, f"resolves outside the manifest directory {prefix}{base}")
    return prefix + target


def resolve_trajectory(manifest: str, entry: ManifestEntry, *, allow_outside: bool) -> str:
    """The path or URL of ``entry``'s trajectory, refused when it leaves the manifest's directory."""
    scheme = _SCHEME.match(manifest)
    if scheme is not None and not storage.is_local(manifest):
        return _remote(manifest, entry, allow_outside)
    if _SCHEME.match(entry.trajectory_path):
        if not allow_outside:
            raise _refuse(manifest, entry, "is not inside the manifest directory")
        return entry.trajectory_path
    local = manifest if scheme is None else manifest[scheme.end() :]
    return _local(local, entry, allow_outside)

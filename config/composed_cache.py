"""What Hydra composes of gymflow's own config files, kept between commands.

Composing ``config/<command>.yaml`` through Hydra (importing it, building its defaults list,
merging the groups) cost every command about 0.1 s before it did any work, for a result that
depends only on the packaged YAML files, the group choices of the command line and the versions
of Hydra and OmegaConf. That result is stored as JSON under ``$XDG_CACHE_HOME/gymflow/config``
(``~/.cache`` without it), named by the SHA-256 of all of these, and read back by the next command
with the same inputs. A changed file, choice or version is another name; a cache that cannot be
read or written is ignored (the command composes as before); a value JSON cannot hold exactly
(an infinite float) is not stored.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from gymflow.provenance import installed_version

__all__ = ["cache_dir", "cached_compose"]

_PACKAGE = Path(__file__).resolve().parent


def cache_dir() -> Path:
    """Where composed configurations are kept."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "gymflow" / "config"


def _key(name: str, choices: Sequence[str]) -> str:
    digest = hashlib.sha256()
    versions = [sys.version]
    for distribution in ("hydra-core", "omegaconf"):
        try:
            versions.append(f"{distribution}=={installed_version(distribution)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{distribution}: not installed")
    digest.update(orjson.dumps({"name": name, "choices": list(choices), "versions": versions}))
    for path in sorted(_PACKAGE.rglob("*.yaml")):
        digest.update(orjson.dumps(str(path.relative_to(_PACKAGE))))
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def cached_compose(
    name: str, choices: Sequence[str], compose: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """``compose()`` (Hydra's composition of ``name`` with ``choices``), read from the cache when
    an earlier command stored the same inputs' result, else stored there."""
    path = cache_dir() / f"{name}-{_key(name, choices)}.json"
    try:
        found = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        found = None
    if isinstance(found, dict):
        return found
    data = compose()
    try:
        text = orjson.dumps(data)
    except TypeError:
        return data
    if orjson.loads(text) != data:  # not exact as JSON (e.g. a NaN): not stored
        return data
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp.write_bytes(text)
        os.replace(temp, path)
    except OSError:
        with contextlib.suppress(OSError):
            temp.unlink()
    return data

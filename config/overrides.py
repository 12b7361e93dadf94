"""The pieces of configuration a user writes: YAML files (``$GYMFLOW_CONFIG`` and NeMo Gym
``--config`` files, local or any fsspec URL) and Hydra-style overrides (``++a.b=c`` add or override,
``+a.b=c`` add, ``a.b=c`` override an existing key, ``~a.b`` back to its packaged default, or
deleted when only the user's files hold it), parsed with Hydra's override
grammar. :mod:`gymflow.conf.compose` composes them with the packaged files; the core never sees
OmegaConf objects."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gymflow import storage
from gymflow.errors import InputError, UsageError

__all__ = [
    "Override",
    "apply_override",
    "holds",
    "leaf_keys",
    "parse_overrides",
    "read_yaml",
    "split_overrides",
]

_ABSENT = object()


def split_overrides(extras: Sequence[str]) -> list[str]:
    """The override arguments among argparse's leftovers; anything else is an unrecognized argument."""
    unknown = [item for item in extras if item.startswith("-") or not ("=" in item or item.startswith("~"))]
    if unknown:
        raise UsageError(f"unrecognized arguments: {' '.join(unknown)}")
    return list(extras)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def read_yaml(path: str, label: str) -> Any:
    """The YAML mapping at ``path`` as an OmegaConf node; errors name ``label`` (e.g. ``config PATH``)."""
    from omegaconf import OmegaConf

    try:
        with storage.open_read(path) as handle:
            text = handle.read().decode("utf-8")
    except (InputError, UnicodeDecodeError, OSError) as exc:
        raise InputError(f"{label}: cannot read it: {exc}") from None
    try:
        loaded = OmegaConf.create(text) if text.strip() else OmegaConf.create({})
    except Exception as exc:  # yaml and OmegaConf errors both mean "not a usable YAML mapping"
        raise UsageError(f"{label}: not valid YAML: {_one_line(exc)}") from None
    if not OmegaConf.is_dict(loaded):
        raise UsageError(f"{label}: expected a mapping at the top level")
    return loaded


@dataclass(frozen=True)
class Override:
    """One parsed override argument."""

    text: str
    key: str
    kind: str  # "set" (a.b=c), "add" (+a.b=c), "force" (++a.b=c) or "delete" (~a.b)
    value: Any

    @property
    def source(self) -> str:
        return f"override {self.text!r}"


def parse_overrides(texts: Sequence[str]) -> list[Override]:
    """Parse with Hydra's grammar; a bad one or a sweep is a :class:`UsageError` naming it."""
    if not texts:
        return []
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    out = []
    for text in texts:
        try:
            parsed = parser.parse_override(text)
            if parsed.is_sweep_override():
                raise UsageError(f"invalid override {text!r}: sweeps are not supported")
            value = None if parsed.is_delete() else parsed.value()
        except HydraException as exc:
            raise UsageError(f"invalid override {text!r}: {_one_line(exc)}") from None
        kind = (
            "delete"
            if parsed.is_delete()
            else "force"
            if parsed.is_force_add()
            else "add"
            if parsed.is_add()
            else "set"
        )
        out.append(Override(text, parsed.key_or_group, kind, value))
    return out


def holds(config: Any, key: str) -> bool:
    """Whether the OmegaConf node ``config`` has the dotted ``key`` (a null value counts)."""
    from omegaconf import OmegaConf

    return OmegaConf.select(config, key, default=_ABSENT, throw_on_missing=False) is not _ABSENT


def apply_override(
    user: Any, override: Override, *, known: Callable[[str], bool], packaged: Callable[[str], bool]
) -> None:
    """Apply ``override`` to ``user`` (the layer of what the user wrote, an OmegaConf node).

    ``known(key)``: whether the packaged files hold the key's top-level block, so that
    ``key=value`` may set it and ``+key=value`` still may too (0.7.0 accepts ``+input_glob=...``,
    a key its files lack); ``+`` refuses only a key the user's own files already hold.
    ``packaged(key)``: whether the packaged files hold exactly that key. ``~key`` removes the key
    from the user's layer, so a packaged key is back to its default (and one only the user's
    files hold is gone); a key neither holds is an error.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    key, text = override.key, override.text
    present = holds(user, key)
    try:
        if override.kind == "delete":
            if present:
                parent, _, leaf = key.rpartition(".")
                node = OmegaConf.select(user, parent) if parent else user
                del node[leaf]
            elif not packaged(key):
                raise UsageError(f"Could not delete from config. {key!r} is not in the config.")
            return
        if override.kind == "add" and present:
            raise UsageError(
                f"Could not append to config. An item is already at {key!r}: use ++{text[1:]} to override it."
            )
        if override.kind == "set" and not present and not known(key):
            raise UsageError(f"Could not override {key!r}. To append to your config use +{text}")
        OmegaConf.update(user, key, override.value, merge=True, force_add=True)
    except OmegaConfBaseException as exc:
        raise UsageError(f"invalid override {text!r}: {_one_line(exc)}") from None


def leaf_keys(value: Any, prefix: str = "") -> Iterator[str]:
    """Dotted keys of every leaf (a scalar, a list or an empty mapping) of a plain mapping."""
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            yield from leaf_keys(item, f"{prefix}{key}.")
    elif prefix:
        yield prefix[:-1]

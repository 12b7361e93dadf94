"""Loading a NeMo Gym config in the CLI: repeated ``--config`` YAML files merged with OmegaConf, then
Hydra-style overrides (``++a.b=c`` add or override, ``+a.b=c`` add, ``a.b=c`` override an existing key),
parsed with Hydra's override grammar. Returns a plain dict; the core never sees OmegaConf objects."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from gymflow import storage
from gymflow.errors import InputError, UsageError

__all__ = ["load_gym_config", "split_overrides"]

_ABSENT = object()


def split_overrides(extras: Sequence[str]) -> list[str]:
    """The override arguments among argparse's leftovers; anything else is an unrecognized argument."""
    unknown = [item for item in extras if item.startswith("-") or "=" not in item]
    if unknown:
        raise UsageError(f"unrecognized arguments: {' '.join(unknown)}")
    return list(extras)


def _load_file(path: str) -> Any:
    from omegaconf import OmegaConf

    try:
        with storage.open_read(path) as handle:
            text = handle.read().decode("utf-8")
    except (InputError, UnicodeDecodeError, OSError) as exc:
        raise InputError(f"config {path}: cannot read it: {exc}") from None
    try:
        loaded = OmegaConf.create(text) if text.strip() else OmegaConf.create({})
    except Exception as exc:  # yaml and OmegaConf errors both mean "not a usable YAML mapping"
        detail = " ".join(str(exc).split())
        raise UsageError(f"config {path}: not valid YAML: {detail}") from None
    if not OmegaConf.is_dict(loaded):
        raise UsageError(f"config {path}: expected a mapping at the top level")
    return loaded


def load_gym_config(
    paths: Sequence[str], overrides: Sequence[str] = (), *, command_keys: Collection[str] = ()
) -> dict[str, Any]:
    """Merge ``paths`` in order, apply ``overrides``; plain ``key=value`` may also set a top-level
    ``command_keys`` entry the files do not hold (the command's own settings)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    config: Any = OmegaConf.create({})
    for path in paths:
        config = OmegaConf.merge(config, _load_file(path))
    parser = OverridesParser.create()
    for text in overrides:
        try:
            override = parser.parse_override(text)
        except HydraException as exc:
            raise UsageError(f"invalid override {text!r}: {' '.join(str(exc).split())}") from None
        if override.is_sweep_override():
            raise UsageError(f"invalid override {text!r}: sweeps are not supported")
        key = override.key_or_group
        present = OmegaConf.select(config, key, default=_ABSENT, throw_on_missing=False) is not _ABSENT
        try:
            if override.is_delete():
                if not present:
                    raise UsageError(f"Could not delete from config. {key!r} is not in the config.")
                parent, _, leaf = key.rpartition(".")
                node = OmegaConf.select(config, parent) if parent else config
                del node[leaf]
                continue
            if override.is_add() and present:
                raise UsageError(
                    f"Could not append to config. An item is already at {key!r}: "
                    f"use ++{text[1:]} to override it."
                )
            if (
                not override.is_add()
                and not override.is_force_add()
                and not present
                and key not in command_keys
            ):
                raise UsageError(f"Could not override {key!r}. To append to your config use +{text}")
            OmegaConf.update(config, key, override.value(), merge=True, force_add=True)
        except OmegaConfBaseException as exc:
            raise UsageError(f"invalid override {text!r}: {' '.join(str(exc).split())}") from None
    try:
        data = OmegaConf.to_container(config, resolve=True)
    except OmegaConfBaseException as exc:
        raise UsageError(f"config: cannot resolve: {' '.join(str(exc).split())}") from None
    assert isinstance(data, dict)
    return {str(k): v for k, v in data.items()}

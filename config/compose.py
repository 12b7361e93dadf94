"""One configuration path for every command (the CLI's and the deployment flows').

Hydra composes ``config/<command>.yaml`` (its defaults list pulls the groups ``storage/``,
``runner/``, ``result_store/`` and ``server/`` through ``config/gymflow.yaml``) once per command.
On top of it, lowest to highest precedence: the file named by ``$GYMFLOW_CONFIG``, the NeMo Gym
``--config`` files (commands that take them), the overrides, and last the flags given on the
command line. The result is validated once into frozen models (:mod:`gymflow.config`); any error
is one :class:`~gymflow.errors.UsageError` line naming the key and where it was set (a file, an
override), never an OmegaConf or Hydra traceback. A command given flags alone (no override, no
``$GYMFLOW_CONFIG``, no Gym file: the usual case) gets the same result without OmegaConf
(:func:`_flags_on`), which took ~0.1 s of every command to import and merge with.

Every key of a command's own is strict: a key it lacks, at the top level or inside one of its
blocks, is refused with the closest known key, wherever it was set. Commands that take NeMo Gym
``--config`` files keep the Gym config beside their keys, free-form: a top-level block a Gym file
holds, or one an override adds (``++judge.resources_servers.mcqa.host=...``); see
:func:`compose` for the rule that tells such a block from a typo.
"""

from __future__ import annotations

import difflib
import os
import re
import typing
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from gymflow.conf.composed_cache import cached_compose
from gymflow.conf.overrides import Override, apply_override, holds, leaf_keys, parse_overrides, read_yaml
from gymflow.config import SHARED_KEYS, GymflowConfig
from gymflow.errors import UsageError
from gymflow.frozen import FrozenDict, freeze

if TYPE_CHECKING:
    from gymflow.run_context import RunContext

__all__ = [
    "USER_CONFIG_ENV",
    "Composed",
    "compose",
    "hint",
    "load_config",
    "run_context",
]

USER_CONFIG_ENV = "GYMFLOW_CONFIG"
GROUPS = ("storage", "runner", "result_store", "server")
"""Config groups: ``GROUP=NAME`` on the command line selects ``config/GROUP/NAME.yaml``."""
COMMANDS = ("health_check", "aggregate", "join", "reverify", "post", "serve", "ui", "notify", "view")
"""The command files; in ``$GYMFLOW_CONFIG`` a block named after one holds keys for it only."""
FLAG = "flag"
NEAR_MISS = 0.8
"""How alike (difflib's ratio) a new top-level block's name and a key of the command's must be
for the block to be taken as a misspelt key rather than a Gym block (``++reverfy.enabled=true``)."""
_REFERENCE = re.compile(r"\$\{\s*([A-Za-z_][\w-]*)")

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Composed:
    """A command's resolved configuration: plain frozen data, where each key was set, and the
    shared settings already validated."""

    name: str
    data: FrozenDict[str, Any]
    sources: Mapping[str, str]
    command_keys: frozenset[str]
    settings: GymflowConfig

    def where(self, key: str) -> str | None:
        """Where ``key`` (dotted) was set: a file, an override, ``flag``, or None for a default."""
        if key in self.sources:
            return self.sources[key]
        below = [source for dotted, source in self.sources.items() if dotted.startswith(key + ".")]
        if below:
            return below[-1]
        parts = key.split(".")
        for end in range(len(parts) - 1, 0, -1):
            source = self.sources.get(".".join(parts[:end]))
            if source is not None:
                return source
        return None

    def validate(self, model: type[M]) -> M:
        """The command's keys as ``model`` (fields, or their aliases); one line on error."""
        names = {field.alias or name for name, field in model.model_fields.items()}
        return validated(model, {key: self.data[key] for key in self.command_keys if key in names}, self)

    def unknown(self, key: str, known: Iterable[str]) -> str:
        """The line refusing ``key`` (dotted): where it was set and the closest of ``known``."""
        return unknown_line(key, self.where(key), known)

    def check_block(self, block: str, known: Collection[str]) -> None:
        """Refuse a key of the mapping ``block`` that is not in ``known`` (a block whose model
        takes keys that another command validates, such as post's ``reverify``)."""
        body = self.data.get(block)
        for key in body if isinstance(body, Mapping) else ():
            if key not in known:
                raise UsageError(self.unknown(f"{block}.{key}", known))

    def gym_config(self) -> FrozenDict[str, Any]:
        """The top-level blocks that are neither gymflow's nor the command's: the NeMo Gym config."""
        gym: FrozenDict[str, Any] = FrozenDict(
            {k: v for k, v in self.data.items() if k not in SHARED_KEYS and k not in self.command_keys}
        )
        return gym

    def record(self) -> dict[str, Any]:
        """The resolved config as provenance records hold it (secrets redacted there)."""
        from gymflow.frozen import thaw

        return {"command": self.name, **thaw(self.data)}


def unknown_line(key: str, source: str | None, known: Iterable[str]) -> str:
    """``unknown configuration key 'KEY' in SOURCE (did you mean 'CLOSEST'?)``."""
    place = " from a flag" if source == FLAG else f" in {source}" if source else ""
    return f"unknown configuration key {key!r}{place}{hint(key, known)}"


def hint(key: str, known: Iterable[str]) -> str:
    """`` (did you mean 'KEY'?)`` with the closest of ``known`` (difflib), else the known keys."""
    parent, dot, leaf = key.rpartition(".")
    names = sorted({str(name) for name in known})
    match = difflib.get_close_matches(leaf, names, n=1)
    if match:
        return f" (did you mean {parent + dot + match[0]!r}?)"
    return f" (known keys: {', '.join(names)})" if names else ""


def validated(model: type[M], values: Any, composed: Composed) -> M:
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise UsageError(describe(exc, composed, model)) from None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (``Model`` or ``Model | None``), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _fields_at(model: type[BaseModel], path: Sequence[Any]) -> list[str]:
    """The keys (fields, or their aliases) of the block at ``path`` inside ``model``."""
    current: type[BaseModel] | None = model
    for part in path:
        assert current is not None
        fields = {field.alias or name: field for name, field in current.model_fields.items()}
        field = fields.get(str(part))
        current = _model_in(field.annotation) if field is not None else None
        if current is None:
            return []
    assert current is not None
    return [field.alias or name for name, field in current.model_fields.items()]


def describe(exc: ValidationError, composed: Composed, model: type[BaseModel] | None = None) -> str:
    """``invalid configuration: KEY (MESSAGE) in SOURCE; ....``: the reference's wording, plus
    where each bad key was set unless it came from a flag. Keys ``model`` lacks are named as
    :meth:`Composed.unknown` names them instead, with the closest key of their block."""
    unknown = [error for error in exc.errors() if error["type"] == "extra_forbidden"]
    if unknown:
        return "; ".join(
            composed.unknown(
                ".".join(str(part) for part in error["loc"]),
                _fields_at(model, error["loc"][:-1]) if model is not None else (),
            )
            for error in unknown
        )
    problems = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"])
        source = composed.where(key) if key else None
        suffix = f" in {source}" if source and source != FLAG else ""
        problems.append(f"{key or '<config>'} ({error['msg']}){suffix}")
    return f"invalid configuration: {'; '.join(problems)}."


def _compose_packaged(name: str, choices: Sequence[Override]) -> dict[str, Any]:
    """``config/<name>.yaml`` composed with the group ``choices`` (through the cache of
    :mod:`gymflow.conf.composed_cache`)."""
    texts = [choice.text for choice in choices]
    return cached_compose(name, texts, lambda: _hydra_compose(name, texts))


def _hydra_compose(name: str, texts: Sequence[str]) -> dict[str, Any]:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from omegaconf import OmegaConf

    try:
        with initialize_config_module(config_module="gymflow.conf", version_base=None):
            cfg = hydra_compose(config_name=name, overrides=list(texts))
    except Exception as exc:  # noqa: BLE001 - Hydra's errors (an unknown group option): one line
        detail = " ".join(str(exc).split("Config search path")[0].split())
        raise UsageError(f"invalid override {' '.join(texts)!r}: {detail}") from None
    data = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(data, dict)
    return {str(key): value for key, value in data.items()}


def _user_file(name: str) -> tuple[Any, str] | None:
    """``$GYMFLOW_CONFIG``: its shared blocks and its block for ``name``, and its label."""
    from omegaconf import OmegaConf

    user_file = os.environ.get(USER_CONFIG_ENV)
    if not user_file:
        return None
    label = f"{USER_CONFIG_ENV} {user_file}"
    if "://" not in user_file and not Path(user_file).is_file():
        raise UsageError(f"{USER_CONFIG_ENV} names no file: {user_file}")
    loaded = read_yaml(user_file, label)
    for key in loaded:
        if key not in SHARED_KEYS and key not in COMMANDS:
            close = difflib.get_close_matches(str(key), [*SHARED_KEYS, *COMMANDS], n=1)
            raise UsageError(
                f"{label}: unknown key {str(key)!r}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f" (expected {', '.join(SHARED_KEYS)}, or a command block: {', '.join(COMMANDS)})"
            )
    block = loaded.get(name) if name in COMMANDS else None
    if block is not None and not OmegaConf.is_dict(block):
        raise UsageError(f"{label}: {name} must be a mapping of {name}'s keys")
    shared = OmegaConf.create({key: loaded[key] for key in loaded if key in SHARED_KEYS})
    return (OmegaConf.merge(shared, block) if block is not None else shared), label


def _config_paths(flags: Mapping[str, Any], overrides: Sequence[Override], user: Any) -> list[str]:
    """The Gym files to merge: ``--config`` flags, else a ``config_paths`` override (``~config_paths``:
    none), else the user's."""
    if flags.get("config_paths"):
        return [str(path) for path in flags["config_paths"]]
    for override in reversed(overrides):
        if override.key == "config_paths":
            if override.kind == "delete":
                return []
            value = override.value
            return [str(value)] if isinstance(value, str) else [str(path) for path in value or []]
    value = user.get("config_paths") if user is not None else None
    return [str(path) for path in value or []]


def compose(
    name: str,
    *,
    flags: Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
    gym_files: bool = False,
    unknown_key_message: str | None = None,
) -> Composed:
    """Compose ``config/<name>.yaml`` with ``$GYMFLOW_CONFIG``, the Gym ``--config`` files (when
    ``gym_files``: their blocks are then kept as the Gym config), ``overrides`` and ``flags``.

    A top-level key the command's files lack is refused, except, with ``gym_files``, the Gym
    config: a key some Gym file holds, or one an override adds whose value is a mapping (a server
    block) not named like a key of the command's (:data:`NEAR_MISS`), or a scalar that the config
    refers to (``${policy_base_url}``). A top-level scalar nothing reads cannot configure a Gym
    server, and a ``$GYMFLOW_CONFIG`` command block and the flags hold the command's keys only, so
    those are typos. ``unknown_key_message`` prefixes the refusal of a key an override set
    (health-check keeps 0.7.0's ``does not accept Hydra overrides``).
    """
    flags = dict(flags or {})
    parsed = parse_overrides(overrides)
    choices = [o for o in parsed if o.kind == "set" and o.key in GROUPS]
    values = [o for o in parsed if o not in choices]
    base = _compose_packaged(name, choices)
    own = sorted(set(base))
    sources: dict[str, str] = {}
    for key in flags:
        if key.split(".")[0] not in base:  # a flag mapped to a key the command's file lacks
            raise UsageError(unknown_line(key, FLAG, own))
    if not parsed and not os.environ.get(USER_CONFIG_ENV) and not (gym_files and flags.get("config_paths")):
        # No override, no user file and no Gym file: the packaged config with the flags set.
        if gym_files and "config_paths" not in flags:
            flags_and_paths: Mapping[str, Any] = {**flags, "config_paths": []}  # as the merge below sets it
        else:
            flags_and_paths = flags
        plain = _flags_on(base, flags_and_paths)
        if plain is not None:
            sources.update(dict.fromkeys(flags, FLAG))
            return _composed(name, plain, sources, base, set(), gym_files, {}, set())

    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    packaged = OmegaConf.create(base)
    user: Any = OmegaConf.create({})
    found = _user_file(name)
    if found is not None:
        user, label = found
        sources.update(dict.fromkeys(leaf_keys(OmegaConf.to_container(user)), label))
    gym_keys: set[str] = set()  # top-level keys of the Gym files
    if gym_files:
        paths = _config_paths(flags, values, user)
        if "config_paths" not in flags:
            OmegaConf.update(user, "config_paths", paths, force_add=True)
        for path in paths:
            loaded = read_yaml(path, f"config {path}")
            gym_keys.update(str(key) for key in loaded)
            sources.update(dict.fromkeys(leaf_keys(OmegaConf.to_container(loaded)), f"config {path}"))
            user = OmegaConf.merge(user, loaded)

    def known(key: str) -> bool:  # the command's own keys and blocks (and the shared ones)
        return key.split(".")[0] in base

    def in_packaged(key: str) -> bool:
        return holds(packaged, key)

    added: dict[str, Override] = {}  # top-level key -> the last override that set it

    def refuse(key: str, source: str | None) -> UsageError:
        """The line refusing the top-level ``key`` (its override's own with ``unknown_key_message``)."""
        override = added.get(key)
        close = difflib.get_close_matches(key, own, n=1)
        if unknown_key_message and override is not None:
            suggestion = f" (did you mean {close[0]!r}?)" if close else ""
            return UsageError(f"{unknown_key_message}: {override.text}{suggestion}")
        line = unknown_line(key, source, own)
        if gym_files and override is not None and not close:
            line += "; a NeMo Gym setting that no block refers to goes in a --config file"
        return UsageError(line)

    for override in values:
        if override.key == "config_paths" and gym_files:
            continue  # already used to pick the files above
        top = override.key.split(".")[0]
        if override.kind != "delete":
            added[top] = override
        if override.kind == "set" and not known(top) and not holds(user, override.key):
            # `KEY=VALUE` of a key nothing holds: Hydra would say to add it with `+`, but a key
            # the command lacks (a Gym command: one named like one of its keys) is refused then.
            if not gym_files or difflib.get_close_matches(top, own, n=1):
                raise refuse(top, override.source)
        apply_override(user, override, known=known, packaged=in_packaged)
        if override.kind != "delete":
            sources.update(dict.fromkeys(leaf_keys({override.key: override.value}), override.source))
    try:
        merged = OmegaConf.merge(packaged, user)
        for key, value in flags.items():
            OmegaConf.update(merged, key, value, merge=False, force_add=True)
            sources[key] = FLAG
        referred = _references(OmegaConf.to_container(merged, resolve=False))
        resolved = OmegaConf.to_container(merged, resolve=True)
    except OmegaConfBaseException as exc:
        failed = getattr(exc, "full_key", None)
        where = sources.get(str(failed), "") if failed else ""
        raise UsageError(
            f"invalid configuration{f' in {where}' if where else ''}: {' '.join(str(exc).split())}"
        ) from None
    assert isinstance(resolved, dict)
    return _composed(name, resolved, sources, base, referred, gym_files, added, gym_keys, refuse)


def _composed(
    name: str,
    resolved: Mapping[Any, Any],
    sources: dict[str, str],
    base: Mapping[str, Any],
    referred: set[str],
    gym_files: bool,
    added: Mapping[str, Override],
    gym_keys: set[str],
    refuse: Callable[[str, str | None], UsageError] | None = None,
) -> Composed:
    """The :class:`Composed` of the resolved data: a top-level key that is neither the command's
    nor (with ``gym_files``) a Gym block is refused (``refuse``: the line for it, else the line
    of :func:`unknown_line`), and the shared settings are validated."""
    own = sorted(set(base))
    data: FrozenDict[str, Any] = freeze({str(key): value for key, value in resolved.items()})
    command_keys = frozenset(base) - set(SHARED_KEYS)
    composed = Composed(name, data, sources, command_keys, GymflowConfig())

    def gym_block(key: str, value: Any) -> bool:
        if key in gym_keys:
            return True
        if key not in added:  # from the $GYMFLOW_CONFIG command block
            return False
        if isinstance(value, Mapping):
            return not difflib.get_close_matches(key, own, n=1, cutoff=NEAR_MISS)
        return key in referred

    for key, value in data.items():
        if key not in base and not (gym_files and gym_block(key, value)):
            source = composed.where(key)
            raise refuse(key, source) if refuse is not None else UsageError(unknown_line(key, source, own))
    settings = validated(GymflowConfig, {key: data[key] for key in SHARED_KEYS if key in data}, composed)
    return replace(composed, settings=settings)


_PLAIN_SCALARS = (str, int, float, bool, type(None))


def _plain(value: Any) -> Any:
    """``value`` as OmegaConf would give it back (lists for tuples), or :data:`_NOT_PLAIN` for a
    value only OmegaConf can say what becomes of: an interpolation, a key that is not a string, a
    type beyond JSON's."""
    kind = type(value)
    if kind is str:
        return _NOT_PLAIN if "${" in value else value
    if kind in _PLAIN_SCALARS:
        return value
    if kind is list or kind is tuple:
        items = [_plain(item) for item in value]
        return _NOT_PLAIN if any(item is _NOT_PLAIN for item in items) else items
    if kind is dict:
        pairs = {key: _plain(item) for key, item in value.items()}
        plain = all(type(key) is str for key in pairs) and not any(v is _NOT_PLAIN for v in pairs.values())
        return pairs if plain else _NOT_PLAIN
    return _NOT_PLAIN


_NOT_PLAIN: Any = object()


def _flags_on(base: Mapping[str, Any], flags: Mapping[str, Any]) -> dict[str, Any] | None:
    """The packaged config with each flag set on it (a dotted key's missing blocks added), as
    OmegaConf's merge and resolution would make it; None when only OmegaConf can say (an
    interpolation anywhere, a value beyond plain JSON, a dotted key through a value that is not a
    block), and then the caller composes through OmegaConf. Importing OmegaConf and merging with it
    cost each command ~0.1 s for what is, with no override and no user file, a copy of the packaged
    config with the flags set."""
    merged = _plain(dict(base))
    if merged is _NOT_PLAIN:
        return None
    for key, value in flags.items():
        plain = _plain(value)
        *parents, leaf = key.split(".")
        if plain is _NOT_PLAIN or "[" in key or not all(parents) or not leaf:
            return None
        block = merged
        for part in parents:
            block = block.setdefault(part, {})
            if type(block) is not dict:
                return None
        block[leaf] = plain
    assert isinstance(merged, dict)
    return merged


def _references(value: Any) -> set[str]:
    """The top-level keys that the interpolations (``${key}``, ``${key.sub}``) in ``value`` name."""
    if isinstance(value, str):
        return set(_REFERENCE.findall(value))
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else ()
    found: set[str] = set()
    for item in items:
        found |= _references(item)
    return found


def load_config(overrides: Sequence[str] = ()) -> GymflowConfig:
    """The shared settings alone (``config/gymflow.yaml`` + ``$GYMFLOW_CONFIG`` + ``overrides``)."""
    return compose("gymflow", overrides=overrides).settings


def run_context(composed: Composed) -> RunContext:
    """The run context of the command: its storage options, its resolved config (redacted) for
    every provenance record, its runner settings."""
    from gymflow.run_context import RunContext

    settings = composed.settings
    return RunContext(
        storage_options=storage_options(settings),
        config=composed.record(),
        runner=settings.runner,
        lineage=settings.openlineage,
    )


def storage_options(settings: GymflowConfig) -> dict[str, Any]:
    """The storage options of the shared settings, with ``storage.timeout_s`` among them."""
    from gymflow import storage_faults
    from gymflow.frozen import thaw

    return storage_faults.with_timeout_s(thaw(settings.storage.options), settings.storage.timeout_s)

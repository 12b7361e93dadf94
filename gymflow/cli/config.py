"""One configuration path for every command.

Hydra composes ``config/<command>.yaml`` (its defaults list pulls the groups ``storage/``,
``runner/``, ``result_store/`` and ``server/`` through ``config/gymflow.yaml``) once per command.
On top of it, lowest to highest precedence: the file named by ``$GYMFLOW_CONFIG``, the NeMo Gym
``--config`` files (commands that take them), the overrides, and last the flags given on the
command line. The result is validated once into frozen models (:mod:`gymflow.config`); any error
is one :class:`~gymflow.errors.UsageError` line naming the key and where it was set (a file, an
override), never an OmegaConf or Hydra traceback.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from gymflow.cli.gym_config import Override, apply_override, leaf_keys, parse_overrides, read_yaml
from gymflow.config import SHARED_KEYS, GymflowConfig
from gymflow.errors import UsageError
from gymflow.frozen import FrozenDict, freeze

if TYPE_CHECKING:
    from gymflow.run_context import RunContext

__all__ = [
    "USER_CONFIG_ENV",
    "Composed",
    "compose",
    "configure_storage",
    "flags_given",
    "load_config",
    "prepare_prefect",
    "run_context",
]

USER_CONFIG_ENV = "GYMFLOW_CONFIG"
GROUPS = ("storage", "runner", "result_store", "server")
"""Config groups: ``GROUP=NAME`` on the command line selects ``config/GROUP/NAME.yaml``."""
COMMANDS = ("health_check", "aggregate", "join", "reverify", "post", "serve", "ui", "notify")
"""The command files; in ``$GYMFLOW_CONFIG`` a block named after one holds keys for it only."""
FLAG = "flag"

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


def validated(model: type[M], values: Any, composed: Composed) -> M:
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise UsageError(describe(exc, composed)) from None


def describe(exc: ValidationError, composed: Composed) -> str:
    """``invalid configuration: KEY (MESSAGE) in SOURCE; ....``: the reference's wording, plus
    where each bad key was set unless it came from a flag."""
    problems = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"])
        source = composed.where(key) if key else None
        suffix = f" in {source}" if source and source != FLAG else ""
        problems.append(f"{key or '<config>'} ({error['msg']}){suffix}")
    return f"invalid configuration: {'; '.join(problems)}."


def flags_given(args: argparse.Namespace, keys: Mapping[str, str]) -> dict[str, Any]:
    """Config key -> value of each flag (argparse destination in ``keys``) given on the command line."""
    return {key: getattr(args, dest) for dest, key in keys.items() if getattr(args, dest, None) is not None}


def _compose_packaged(name: str, choices: Sequence[Override]) -> dict[str, Any]:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from omegaconf import OmegaConf

    try:
        with initialize_config_module(config_module="gymflow.conf", version_base=None):
            cfg = hydra_compose(config_name=name, overrides=[choice.text for choice in choices])
    except Exception as exc:  # noqa: BLE001 - Hydra's errors (an unknown group option): one line
        texts = " ".join(choice.text for choice in choices)
        detail = " ".join(str(exc).split("Config search path")[0].split())
        raise UsageError(f"invalid override {texts!r}: {detail}") from None
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
            raise UsageError(
                f"{label}: unknown key {str(key)!r} (expected {', '.join(SHARED_KEYS)}, or a command "
                f"block: {', '.join(COMMANDS)})"
            )
    block = loaded.get(name) if name in COMMANDS else None
    if block is not None and not OmegaConf.is_dict(block):
        raise UsageError(f"{label}: {name} must be a mapping of {name}'s keys")
    shared = OmegaConf.create({key: loaded[key] for key in loaded if key in SHARED_KEYS})
    return (OmegaConf.merge(shared, block) if block is not None else shared), label


def _config_paths(flags: Mapping[str, Any], overrides: Sequence[Override], user: Any) -> list[str]:
    """The Gym files to merge: ``--config`` flags, else a ``config_paths`` override, else the user's."""
    if flags.get("config_paths"):
        return [str(path) for path in flags["config_paths"]]
    for override in reversed(overrides):
        if override.key == "config_paths" and override.kind != "delete":
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

    Without ``gym_files`` a top-level key the command lacks is an error (``unknown_key_message``
    replaces its text when the key came from an override: health-check keeps 0.7.0's).
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    flags = dict(flags or {})
    parsed = parse_overrides(overrides)
    choices = [o for o in parsed if o.kind == "set" and o.key in GROUPS]
    values = [o for o in parsed if o not in choices]
    base = _compose_packaged(name, choices)
    sources: dict[str, str] = {}

    user: Any = OmegaConf.create({})
    found = _user_file(name)
    if found is not None:
        user, label = found
        sources.update(dict.fromkeys(leaf_keys(OmegaConf.to_container(user)), label))
    if gym_files:
        paths = _config_paths(flags, values, user)
        if "config_paths" not in flags:
            OmegaConf.update(user, "config_paths", paths, force_add=True)
        for path in paths:
            loaded = read_yaml(path, f"config {path}")
            sources.update(dict.fromkeys(leaf_keys(OmegaConf.to_container(loaded)), f"config {path}"))
            user = OmegaConf.merge(user, loaded)

    def known(key: str) -> bool:  # the command's own keys and blocks (and the shared ones)
        return key.split(".")[0] in base

    for override in values:
        if override.key == "config_paths" and gym_files:
            continue  # already used to pick the files above
        apply_override(user, override, known=known)
        if override.kind != "delete":
            sources.update(dict.fromkeys(leaf_keys({override.key: override.value}), override.source))
    try:
        merged = OmegaConf.merge(OmegaConf.create(base), user)
        for key, value in flags.items():
            OmegaConf.update(merged, key, value, merge=False, force_add=True)
            sources[key] = FLAG
        resolved = OmegaConf.to_container(merged, resolve=True)
    except OmegaConfBaseException as exc:
        failed = getattr(exc, "full_key", None)
        where = sources.get(str(failed), "") if failed else ""
        raise UsageError(
            f"invalid configuration{f' in {where}' if where else ''}: {' '.join(str(exc).split())}"
        ) from None
    assert isinstance(resolved, dict)
    data: FrozenDict[str, Any] = freeze({str(key): value for key, value in resolved.items()})
    command_keys = frozenset(base) - set(SHARED_KEYS)
    if not gym_files:
        for key in data:
            if key not in base:
                source = sources.get(key) or next(
                    (s for k, s in sources.items() if k.startswith(key + ".")), "the configuration"
                )
                if unknown_key_message and source.startswith("override "):
                    raise UsageError(unknown_key_message)
                raise UsageError(f"unknown configuration key {key!r} in {source}")
    composed = Composed(name, data, sources, command_keys, GymflowConfig())
    settings = validated(GymflowConfig, {key: data[key] for key in SHARED_KEYS if key in data}, composed)
    return replace(composed, settings=settings)


def load_config(overrides: Sequence[str] = ()) -> GymflowConfig:
    """The shared settings alone (``config/gymflow.yaml`` + ``$GYMFLOW_CONFIG`` + ``overrides``)."""
    return compose("gymflow", overrides=overrides).settings


def prepare_prefect(settings: GymflowConfig, verbose: bool) -> None:
    """Prefect's environment from the shared settings (before Prefect is imported): the local
    server's port as ``PREFECT_SERVER_API_PORT`` unless that is set already."""
    from gymflow.flows import _environment

    if settings.prefect.port is not None:
        os.environ.setdefault("PREFECT_SERVER_API_PORT", str(settings.prefect.port))
    _environment.prepare(settings.prefect, verbose)


def run_context(composed: Composed) -> RunContext:
    """The run context of the command: its storage options, its resolved config (redacted) for
    every provenance record, its runner settings."""
    from gymflow.run_context import RunContext

    settings = composed.settings
    return RunContext(
        storage_options=storage_options(settings), config=composed.record(), runner=settings.runner
    )


_COMMAND_SCOPE = ExitStack()
"""The storage scope of the command this process runs, closed by :func:`close_command_scope`."""


def configure_storage(settings: GymflowConfig) -> None:
    """``storage.options`` and ``storage.timeout_s`` in force for the rest of the command (the
    checks the CLI makes before the run; the run itself enters its :class:`RunContext`)."""
    from gymflow import storage

    _COMMAND_SCOPE.enter_context(storage.using(storage_options(settings)))


def storage_options(settings: GymflowConfig) -> dict[str, Any]:
    """The storage options of the shared settings, with ``storage.timeout_s`` among them."""
    from gymflow import storage_faults
    from gymflow.frozen import thaw

    return storage_faults.with_timeout_s(thaw(settings.storage.options), settings.storage.timeout_s)


def close_command_scope() -> None:
    """Leave the storage scope of the command that just ended (``gymflow.cli.main``)."""
    _COMMAND_SCOPE.close()

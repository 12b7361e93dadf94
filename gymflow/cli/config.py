"""Loading configuration: Hydra composes ``config/gymflow.yaml`` (+ ``$GYMFLOW_CONFIG``), then
the result is validated into the frozen :class:`~gymflow.config.GymflowConfig`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gymflow.config import GymflowConfig
from gymflow.errors import UsageError

USER_CONFIG_ENV = "GYMFLOW_CONFIG"


def load_config(overrides: Sequence[str] = ()) -> GymflowConfig:
    """Compose the packaged defaults, the file named by ``$GYMFLOW_CONFIG`` and ``overrides``."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    with initialize_config_module(config_module="gymflow.conf", version_base=None):
        cfg = compose(config_name="gymflow", overrides=list(overrides))
    user_file = os.environ.get(USER_CONFIG_ENV)
    if user_file:
        path = Path(user_file)
        if not path.is_file():
            raise UsageError(f"{USER_CONFIG_ENV} names no file: {user_file}")
        # The packaged defaults leave open maps (storage.options) that users fill in: merge
        # without Hydra's struct mode; the model below still rejects unknown keys.
        OmegaConf.set_struct(cfg, False)
        try:
            merged = OmegaConf.merge(cfg, OmegaConf.load(path))
        except Exception as exc:  # noqa: BLE001 - YAML or merge errors: one line, no traceback
            raise UsageError(f"{USER_CONFIG_ENV} {user_file}: {' '.join(str(exc).split())}") from None
    else:
        merged = cfg
    data: Any = OmegaConf.to_container(merged, resolve=True)
    try:
        return GymflowConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc'])} ({error['msg']})" for error in exc.errors()
        )
        where = f" in {USER_CONFIG_ENV} {user_file}" if user_file else ""
        raise UsageError(f"invalid configuration{where}: {problems}.") from None

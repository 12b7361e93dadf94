"""gymflow's configuration as frozen, validated values.

Hydra composes the YAML under ``config/`` (in the CLI layer); the result is validated here once
and passed down as values. The core never reads Hydra objects.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StorageConfig(_Frozen):
    options: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="fsspec options per protocol, e.g. {'s3': {'endpoint_url': ...}}. Empty: the "
        "usual AWS_* environment variables apply.",
    )


class RunnerConfig(_Frozen):
    kind: Literal["process", "dask"] = Field(
        default="process", description="Prefect task runner: a process pool here, or a Dask cluster."
    )
    dask_address: str | None = Field(
        default=None, description="Address of a running Dask scheduler; null starts a LocalCluster."
    )


class PrefectConfig(_Frozen):
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="WARNING", description="Prefect's console log level when -v is not given."
    )
    startup_timeout_seconds: int = Field(
        default=90, ge=1, description="How long to wait for the local Prefect server to start."
    )
    result_store: str | None = Field(
        default=None,
        description="Where cached task results persist: a local directory or any fsspec URL "
        "(s3://bucket/prefix, with storage.options); null: Prefect's default under $PREFECT_HOME.",
    )


class HealthConfig(_Frozen):
    workers: int | None = Field(default=None, ge=1, description="Worker limit; null: min(CPUs, 8).")


class GymflowConfig(_Frozen):
    """Everything a command may be configured with."""

    storage: StorageConfig = Field(default_factory=StorageConfig)
    runner: RunnerConfig = Field(default_factory=RunnerConfig)
    prefect: PrefectConfig = Field(default_factory=PrefectConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)

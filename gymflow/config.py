"""gymflow's configuration as frozen, validated values.

Hydra composes the YAML under ``config/`` (in the CLI layer: one file per command, plus the groups
``storage/``, ``runner/``, ``result_store/`` and ``server/``); the result is validated here once and
passed down as values. The core never reads Hydra objects. Defaults live in the YAML files: the
command models below have none of their own (the shared ones keep theirs for code that builds
them directly).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gymflow.frozen import freeze


class _Frozen(BaseModel):
    # defer_build: a model's validator is built when it first validates, so a process builds
    # only the few its command uses (a pool worker, which only unpickles a run context, none):
    # 40 ms of every worker's start.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


def _comma_list(value: Any) -> Any:
    """``"a, b"`` -> ``["a", "b"]``: list-valued keys also take 0.7.0's comma strings."""
    return [item.strip() for item in value.split(",")] if isinstance(value, str) else value


# -- the groups every command composes ---------------------------------------------------------


class StorageConfig(_Frozen):
    options: Mapping[str, Mapping[str, Any]] = Field(
        default_factory=dict,
        description="fsspec options per protocol, e.g. {'s3': {'endpoint_url': ...}}. Empty: the "
        "usual AWS_* environment variables apply. Frozen: a FrozenDict of FrozenDicts.",
    )
    timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Seconds a storage operation may take, retries included, before the command "
        "fails with one line naming the URL (an endpoint that accepts connections and never answers).",
    )

    @field_validator("options", mode="after")
    @classmethod
    def _freeze(cls, value: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Mapping[str, Any]]:
        frozen: Mapping[str, Mapping[str, Any]] = freeze(value)
        return frozen


class RunnerConfig(_Frozen):
    kind: Literal["process", "dask"] = Field(
        default="process", description="Prefect task runner: a process pool here, or a Dask cluster."
    )
    dask_address: str | None = Field(
        default=None, description="Address of a running Dask scheduler; null starts a LocalCluster."
    )


class PrefectConfig(_Frozen):
    """The ``prefect`` block, filled by the ``server`` and ``result_store`` groups."""

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="WARNING", description="Prefect's console log level when -v is not given."
    )
    startup_timeout_seconds: int = Field(
        default=90, ge=1, description="How long to wait for the local Prefect server to start."
    )
    port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Port of the local Prefect server; null: $PREFECT_SERVER_API_PORT or 4200 "
        "(the environment variable wins when both are set).",
    )
    result_store: str | None = Field(
        default=None,
        description="Where cached task results persist: a local directory or any fsspec URL "
        "(s3://bucket/prefix, with storage.options); null: Prefect's default under $PREFECT_HOME.",
    )


class OpenLineageConfig(_Frozen):
    """The ``openlineage`` block: where each report's OpenLineage run events go
    (:mod:`gymflow.lineage`). Unset, and without the library's own settings, nothing is emitted."""

    transport: Mapping[str, Any] | None = Field(
        default=None,
        description="An openlineage-python transport, as its config file spells one: {type: http, "
        "url: ..., endpoint: ..., timeout: ...}, {type: file, log_file_path: ...}, {type: console}. "
        "null: $OPENLINEAGE_URL, $OPENLINEAGE_CONFIG or the library's other settings, else no events.",
    )
    namespace: str | None = Field(
        default=None, description="The jobs' namespace; null: $OPENLINEAGE_NAMESPACE, else 'gymflow'."
    )
    timeout_s: float = Field(
        default=2.0,
        gt=0,
        description="How long a run waits, as it ends, for its events to be sent (an HTTP transport "
        "without its own timeout also gets this one); then they are dropped with one warning.",
    )

    @field_validator("transport", mode="after")
    @classmethod
    def _freeze(cls, value: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        frozen: Mapping[str, Any] | None = None if value is None else freeze(value)
        return frozen


class GymflowConfig(_Frozen):
    """The settings every command shares."""

    storage: StorageConfig = Field(default_factory=StorageConfig)
    runner: RunnerConfig = Field(default_factory=RunnerConfig)
    prefect: PrefectConfig = Field(default_factory=PrefectConfig)
    openlineage: OpenLineageConfig = Field(default_factory=OpenLineageConfig)


SHARED_KEYS = tuple(GymflowConfig.model_fields)
"""Top-level keys of every composed config that hold :class:`GymflowConfig`."""


# -- the commands (one model per file under config/; each key is also a flag) -----------------


class _Command(_Frozen):
    verbose: bool
    direct: bool


class HealthCheckConfig(_Command):
    """``config/health_check.yaml``. ``workers`` and ``ignore_checks`` are checked by the command
    itself, after the run directory (health spec §7.4 orders the messages)."""

    rollouts_file: str
    workers: int | None
    ignore_checks: tuple[str, ...] | None
    json_: bool = Field(alias="json")
    no_cache: bool

    @field_validator("ignore_checks", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _comma_list(value)


class JoinConfig(_Command):
    """``config/join.yaml``."""

    rollouts_file: str | None
    capture_dir: str | None
    no_capture: bool
    output: str | None
    no_perf: bool
    summary: str | None
    json_: bool = Field(alias="json")
    workers: int | None
    no_cache: bool


class PassMajorityConfig(_Frozen):
    score_field: str = Field(default="reward", description="row field scored as `accuracy`")
    answer_key: str | None = Field(default=None, description="row field holding the extracted answer")


class AggregateConfig(_Command):
    """``config/aggregate.yaml`` (aggregate spec §1.1 for the 0.7.0 key names)."""

    input_glob: str | None
    output_jsonl_fpath: str | None
    config_paths: tuple[str, ...]
    merge_shards: bool
    count_failure_classes_as_zero: tuple[str, ...]
    count_missing_rollouts_as_zero: bool
    pass_majority: PassMajorityConfig | None
    server_metrics: bool
    disable_health_check: bool
    health_check_workers: int | None = Field(ge=1)
    health_check_ignored_checks: tuple[str, ...]
    workers: int | None
    no_cache: bool

    @field_validator("health_check_ignored_checks", mode="before")
    @classmethod
    def _known_checks(cls, value: Any) -> tuple[str, ...]:
        if value is None or (isinstance(value, str | list | tuple) and not value):
            return ()  # nothing to check: the health package is imported by a run that uses it
        from gymflow.errors import UnknownCheckError
        from gymflow.health import normalize_ignored

        try:
            return tuple(normalize_ignored(value))
        except UnknownCheckError as exc:
            raise ValueError(str(exc)) from None


class PostSection(_Frozen):
    """The ``post`` block of ``eval post``'s config."""

    shards: str = Field(description="shard glob, relative to the run")
    rollouts: str = Field(description="the run's (merged) rollouts file")
    capture_dir: str = Field(description="CaptureStore directory for the join")
    health_check_workers: int | None = Field(ge=1)
    health_check_ignore: tuple[str, ...]

    @field_validator("health_check_ignore", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _comma_list(value)


class ReverifySection(BaseModel):
    """The ``reverify`` block of ``eval post``'s config: the step runs only with ``enabled: true``;
    other keys are reverify's own (validated by :func:`gymflow.reverify.options_from_config`)."""

    model_config = ConfigDict(frozen=True, extra="allow", defer_build=True)
    enabled: bool
    inputs: str = Field(description="materialized inputs, relative to the run")
    output: str = Field(description="re-verified rollouts, relative to the run")


class PostConfig(_Command):
    """``config/post.yaml``."""

    config_paths: tuple[str, ...]
    no_cache: bool
    post: PostSection
    reverify: ReverifySection


class ServeConfig(_Frozen):
    """``config/serve.yaml``."""

    config_paths: tuple[str, ...]
    sweep: str | None
    sweep_interval: float = Field(gt=0)
    evaluation_flow: str | None
    run_parameter: str
    verbose: bool


class UiConfig(_Frozen):
    """``config/ui.yaml``."""

    stop: bool


class ViewConfig(_Frozen):
    """``config/view.yaml``."""

    port: int = Field(ge=0, le=65535)

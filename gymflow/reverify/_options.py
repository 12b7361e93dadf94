"""The settings of one ``eval reverify`` run and their validation (reverify.md §1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gymflow.errors import UsageError

__all__ = ["CONFIG_KEYS", "ReverifyOptions", "options_from_config"]


class ReverifyOptions(BaseModel):
    """Every flag / config key of reverify.md §1, validated; frozen."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    input_format: Literal["gym", "atif"] = Field(default="gym", description="gym rollouts or Relay ATIF")
    materialized_inputs_jsonl_fpath: str = Field(description="materialized inputs JSONL")
    rollouts_jsonl_fpath: str | None = Field(default=None, description="rollouts JSONL (gym only)")
    atif_manifest_jsonl_fpath: str | None = Field(default=None, description="ATIF manifest (atif only)")
    output_jsonl_fpath: str = Field(description="re-verified rollouts JSONL")
    num_samples_in_parallel: int = Field(default=32, ge=1, description="requests in flight")
    limit: int | None = Field(default=None, ge=1, description="first N joined pairs only")
    force: bool = False
    overwrite: bool = False
    resume_from_cache: bool = False
    disable_aggregation: bool = False
    judge_failed_only: bool = False
    append: bool = False
    retry_terminal_timeouts: bool = False
    retry_invalid_judge_responses: bool = False
    verify_timeout_s: float = Field(default=300.0, gt=0, description="per-request timeout")
    verify_max_attempts: int = Field(default=4, ge=1, description="attempts per request")
    server_metrics: bool = Field(
        default=False, description="metrics from the resources server (the default, named explicitly)"
    )
    local_metrics: bool = Field(default=False, description="compute the metrics locally, without a server")
    allow_outside_manifest: bool = Field(
        default=False, description="ATIF: trajectories outside the manifest dir"
    )
    server_start_timeout_s: float = Field(default=120.0, gt=0, description="wait for a launched server")
    reuse_server: bool = Field(
        default=False, description="use a running server the config sets settings for, as it runs"
    )
    config_paths: tuple[str, ...] = Field(default=(), description="Gym config files (provenance)")
    search_dirs: tuple[str, ...] = Field(
        default=(), description="extra roots for Gym components (--search-dir)"
    )
    upload_rollouts: bool = Field(default=False, description="0.7.0's exporter upload: only false")

    @field_validator("upload_rollouts")
    @classmethod
    def _no_exporters(cls, value: bool) -> bool:
        if value:
            raise ValueError(
                "upload_rollouts=true is not supported: gymflow has no rollout exporters (W&B and the "
                "others NeMo Gym uploads to); the re-verified rollouts are the --output file"
            )
        return value

    @model_validator(mode="after")
    def _cross_field(self) -> ReverifyOptions:
        if self.append and not self.judge_failed_only:
            raise ValueError(
                "`append` is only valid together with `judge_failed_only` (pass --judge-failed-only)."
            )
        if self.append and self.overwrite:
            raise ValueError(
                "`append` and `overwrite` are mutually exclusive: one appends, the other clears."
            )
        if self.input_format == "gym":
            if self.rollouts_jsonl_fpath is None:
                raise ValueError(
                    "native Gym reverification requires `rollouts_jsonl_fpath` (pass --rollouts)."
                )
            if self.atif_manifest_jsonl_fpath is not None:
                raise ValueError("`atif_manifest_jsonl_fpath` is only valid with input_format=atif.")
        else:
            if self.atif_manifest_jsonl_fpath is None:
                raise ValueError(
                    "ATIF reverification requires `atif_manifest_jsonl_fpath` (pass --atif-manifest)."
                )
            if self.rollouts_jsonl_fpath is not None:
                raise ValueError("`rollouts_jsonl_fpath` cannot be combined with input_format=atif.")
            if self.judge_failed_only:
                raise ValueError(
                    "ATIF reverification does not support judge-failure recovery or append mode."
                )
            if self.force:
                raise ValueError(
                    "ATIF reverification requires a stateless verifier; --force is not supported."
                )
        if self.local_metrics and self.server_metrics:
            raise ValueError(
                "`local_metrics` and `server_metrics` are mutually exclusive: one computes the "
                "metrics locally, the other asks the resources server (the default)."
            )
        return self

    @property
    def atif(self) -> bool:
        return self.input_format == "atif"

    def parameters(self) -> dict[str, Any]:
        """The settings as plain data (for the provenance record)."""
        return self.model_dump(mode="json")

    def input_files(self) -> list[str]:
        """The files the provenance record digests as inputs (besides a recovery run's source sidecar)."""
        named = (
            self.materialized_inputs_jsonl_fpath,
            self.rollouts_jsonl_fpath,
            self.atif_manifest_jsonl_fpath,
            *self.config_paths,
        )
        return [path for path in named if path]


CONFIG_KEYS = tuple(ReverifyOptions.model_fields)
"""Top-level config keys that belong to the command rather than to a Gym server block."""


def _describe(exc: ValidationError) -> str:
    missing: list[str] = []
    invalid: list[str] = []
    for error in exc.errors():
        location = ".".join(str(part) for part in error["loc"]) or "<config>"
        if error["type"] == "missing":
            missing.append(location)
        else:
            invalid.append(f"{location} ({error['msg']})")
    parts: list[str] = []
    if missing:
        parts.append(
            f"missing required configuration: {', '.join(missing)}. "
            f"Provide each via its flag (see --help) or as a +{missing[0]}=<value> override."
        )
    if invalid:
        parts.append(f"invalid configuration: {'; '.join(invalid)}.")
    return " ".join(parts) if parts else str(exc)


def options_from_config(values: Mapping[str, Any]) -> ReverifyOptions:
    """Validate the command's keys; :class:`UsageError` with the messages of §1."""
    data = {key: values[key] for key in CONFIG_KEYS if key in values and values[key] is not None}
    for name in ("config_paths", "search_dirs"):
        if name in data and isinstance(data[name], list | str):
            paths = data[name]
            data[name] = (paths,) if isinstance(paths, str) else tuple(paths)
    try:
        return ReverifyOptions.model_validate(data)
    except ValidationError as exc:
        raise UsageError(_describe(exc)) from None

"""Core options from composed configuration: what ``eval post`` runs (and the deployments that
run it), the agents' environment servers, reverify's validated options. Built here, beside the
composition, so the CLI and the deployment flows build them the same way and flows never import
the CLI."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gymflow import storage
from gymflow.conf.compose import Composed, compose, describe
from gymflow.config import PostConfig, PostSection, ReverifySection
from gymflow.errors import UsageError

if TYPE_CHECKING:
    from gymflow.pipeline import PostOptions

__all__ = [
    "POST_SETS",
    "agent_environments",
    "compose_options",
    "compose_post",
    "post_options",
    "reverify_block_keys",
    "reverify_options",
]


def compose_post(flags: Mapping[str, Any], overrides: Sequence[str]) -> tuple[Composed, PostConfig]:
    """``config/post.yaml`` + ``$GYMFLOW_CONFIG`` + Gym files + overrides + flags, validated."""
    from gymflow.conf.overrides import split_overrides

    composed = compose("post", flags=flags, overrides=split_overrides(overrides), gym_files=True)
    config = composed.validate(PostConfig)
    composed.check_block("reverify", reverify_block_keys())
    return composed, config


POST_SETS = (
    "materialized_inputs_jsonl_fpath",
    "rollouts_jsonl_fpath",
    "output_jsonl_fpath",
    "resume_from_cache",
)
"""Keys of eval reverify that post sets itself (from ``post.rollouts``, ``reverify.inputs`` and
``reverify.output``; it always resumes), so its ``reverify`` block does not take them."""


def reverify_block_keys() -> frozenset[str]:
    """The keys post's ``reverify`` block takes: its own and eval reverify's, but for :data:`POST_SETS`."""
    from gymflow.reverify import CONFIG_KEYS

    return frozenset(ReverifySection.model_fields) | (frozenset(CONFIG_KEYS) - set(POST_SETS))


def compose_options(
    run_dir: str, config_files: Sequence[str], overrides: Sequence[str]
) -> tuple[Composed, PostOptions]:
    """Config files and overrides -> the composed config and validated :class:`PostOptions`
    (the deployments' entry, which receive the same things as parameters)."""
    flags: dict[str, Any] = {"config_paths": list(config_files)} if config_files else {}
    composed, config = compose_post(flags, overrides)
    from gymflow.frozen import thaw

    with storage.using(thaw(composed.settings.storage.options)):
        return composed, post_options(run_dir, composed, config)


def post_options(run_dir: str, composed: Composed, config: PostConfig) -> PostOptions:
    from gymflow.aggregate import AggregateOptions
    from gymflow.conf.options import agent_environments
    from gymflow.health import normalize_ignored

    post, reverify = config.post, config.reverify
    gym_config = composed.gym_config()
    use_cache = not config.no_cache
    if not storage.exists(run_dir):
        raise UsageError(f"Run directory not found: {run_dir}")
    aggregate = AggregateOptions(
        input_glob="",
        output="",
        agent_environments=agent_environments(gym_config),
        config_files=config.config_paths,
        use_cache=use_cache,
    )
    from gymflow.pipeline import HealthStep, PostOptions

    return PostOptions(
        run=run_dir,
        shards=post.shards,
        rollouts=post.rollouts,
        capture_dir=post.capture_dir,
        health=HealthStep(
            post.health_check_workers, tuple(normalize_ignored(list(post.health_check_ignore)))
        ),
        aggregate=aggregate,
        reverify=_reverify_options(run_dir, post, reverify, composed) if reverify.enabled else None,
        gym_config=gym_config,
        use_cache=use_cache,
    )


def _reverify_options(run_dir: str, post: PostSection, section: ReverifySection, composed: Composed) -> Any:
    """The reverify step's options: the run's rollouts and materialized inputs, resuming into one
    output, so a rerun after a judge outage verifies only what failed."""
    from gymflow.conf.options import reverify_options

    extra = {
        key: value
        for key, value in section.model_dump().items()
        if key not in ("enabled", "inputs", "output")
    }
    return reverify_options(
        composed,
        {
            **extra,
            "materialized_inputs_jsonl_fpath": storage.resolve_under(run_dir, section.inputs),
            "rollouts_jsonl_fpath": storage.resolve_under(run_dir, post.rollouts),
            "output_jsonl_fpath": storage.resolve_under(run_dir, section.output),
            "resume_from_cache": True,
        },
    )


def agent_environments(config: Mapping[str, Any]) -> dict[str, str]:
    """Agent name -> the one environment server whose config fronts it (§1.6).

    An environment-server block is a top-level block with ``environment_servers``; an
    implementation names its agent under ``agent``/``agent_ref``/``responses_api_agent``
    (a mapping with ``name``, or a string). Agents behind several environment servers are an error.
    """
    fronts: dict[str, list[str]] = {}
    for block, body in config.items():
        servers = body.get("environment_servers") if isinstance(body, Mapping) else None
        if not isinstance(servers, Mapping):
            continue
        for impl in servers.values():
            if not isinstance(impl, Mapping):
                continue
            for key in ("agent", "agent_ref", "responses_api_agent"):
                ref = impl.get(key)
                name = ref.get("name") if isinstance(ref, Mapping) else ref
                if isinstance(name, str) and name and block not in fronts.setdefault(name, []):
                    fronts[name].append(block)
    ambiguous = {agent: blocks for agent, blocks in fronts.items() if len(blocks) > 1}
    if ambiguous:
        agent, blocks = next(iter(ambiguous.items()))
        raise UsageError(
            f"Agent {agent!r} is behind several environment servers {blocks}; cannot group its rows"
        )
    return {agent: blocks[0] for agent, blocks in fronts.items()}


def reverify_options(composed: Composed, values: Mapping[str, Any]) -> Any:
    """``values`` (reverify's keys) validated with reverify.md §1's messages; a bad key set in a
    file or an override is named with its source."""
    from pydantic import ValidationError

    from gymflow.reverify import ReverifyOptions, options_from_config

    try:
        return options_from_config(values)
    except UsageError as exc:
        message = str(exc)
        if message.startswith("invalid configuration: ") and "<config>" not in message:
            data = {key: value for key, value in values.items() if value is not None}
            try:
                ReverifyOptions.model_validate(data)
            except ValidationError as detail:
                message = describe(detail, composed)
        raise UsageError(message) from None

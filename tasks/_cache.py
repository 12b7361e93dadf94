"""Prefect's cache keys from gymflow's own: :func:`gymflow.provenance.cache_key` over the SHA-256
of a task's source bytes and its output-affecting parameters, so the direct path's up-to-date
check and Prefect's task cache agree on what is current. Results persist to the result store
(``prefect.result_store``, a local directory by default), so a rerun after a failure redoes only
the tasks whose inputs changed or that did not finish.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefect.cache_policies import CachePolicy
from prefect.context import TaskRunContext

from gymflow import provenance

KeyParts = Callable[[Mapping[str, Any]], tuple[Mapping[str, Any], Sequence[tuple[str, str]]]]
"""Task parameters -> (output-affecting parameters, (role, sha256) of each source)."""


@dataclass
class ContentKey(CachePolicy):
    """A cache policy keyed by content: ``name`` + what ``parts`` extracts from the parameters.

    Task code changes do not invalidate it (gymflow's version is part of every key instead)."""

    name: str = ""
    parts: KeyParts | None = None

    def compute_key(
        self,
        task_ctx: TaskRunContext,
        inputs: dict[str, Any],
        flow_parameters: dict[str, Any],
        **kwargs: Any,
    ) -> str | None:
        if self.parts is None:
            return None
        parameters, sources = self.parts(inputs)
        key = provenance.cache_key(f"task:{self.name}", parameters, sources)
        return f"{self.name}-{key.removeprefix('sha256:')}"


def content_key(name: str, parts: KeyParts) -> ContentKey:
    return ContentKey(name=name, parts=parts)

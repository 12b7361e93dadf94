"""The check registry: stable ids in registry order, each rollout check a small pure function.

Registry order governs the order of ``unobserved`` ids, of findings, of coverage and of issues.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gymflow.errors import UnknownCheckError
from gymflow.health._vocabulary import CHECK_IDS, CheckId, Finding, is_check_id

if TYPE_CHECKING:
    from gymflow.health._observed import Evidence

Gate = Callable[["Evidence"], bool]
Evaluate = Callable[["Evidence"], list[Finding]]

ROLLOUT_CHECK_IDS: tuple[CheckId, ...] = CHECK_IDS[:12]
TASK_CHECK_IDS: tuple[CheckId, ...] = CHECK_IDS[12:]
TRAJECTORY_CHECK_IDS: tuple[CheckId, ...] = CHECK_IDS[3:12]


@dataclass(frozen=True, slots=True)
class TrajectoryCheck:
    """A rollout check over an observed trajectory: ``observable`` gates, ``evaluate`` finds."""

    id: CheckId
    observable: Gate
    evaluate: Evaluate


_checks: dict[CheckId, TrajectoryCheck] = {}
TRAJECTORY_CHECKS: Mapping[CheckId, TrajectoryCheck] = MappingProxyType(_checks)


def trajectory_check(check_id: CheckId, observable: Gate) -> Callable[[Evaluate], Evaluate]:
    """Register ``evaluate`` as the trajectory check ``check_id``."""
    if check_id not in TRAJECTORY_CHECK_IDS:
        raise ValueError(f"{check_id!r} is not a trajectory check id")

    def register(evaluate: Evaluate) -> Evaluate:
        if check_id in _checks:
            raise ValueError(f"check {check_id!r} is already registered")
        _checks[check_id] = TrajectoryCheck(check_id, observable, evaluate)
        return evaluate

    return register


def finding(check: CheckId, detail: dict[str, Any], locator: dict[str, Any] | None = None) -> Finding:
    if locator is None:
        return {"check": check, "detail": detail}
    return {"check": check, "locator": locator, "detail": detail}


def normalize_ignored(ignored: str | Iterable[str] | None) -> tuple[CheckId, ...]:
    """Trim, drop empties, de-duplicate (first kept) and validate ignored check ids (spec §6.4)."""
    if ignored is None:
        return ()
    items = ignored.split(",") if isinstance(ignored, str) else list(ignored)
    result: list[str] = []
    for item in items:
        item = item.strip()
        if item and item not in result:
            result.append(item)
    valid = [item for item in result if is_check_id(item)]
    unknown = sorted(set(result) - set(valid))
    if unknown:
        # G: the reference's message, then the ids that would have been accepted.
        raise UnknownCheckError(
            f"Unknown rollout health check(s): {', '.join(unknown)}; valid ids: {', '.join(CHECK_IDS)}"
        )
    return tuple(valid)

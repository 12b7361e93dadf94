"""Models of the NeMo Gym 0.7.0 artifacts gymflow reads (the canonical ``ng_trajectory``)."""

from gymflow.evidence.trajectory import (
    MAX_FREE_FORM_DEPTH,
    AgentInvocation,
    ModelCallRef,
    ModelServerRef,
    ObservationGap,
    ResponseMetadata,
    TokenStats,
    TrajectoryModelCall,
    TrajectoryRecord,
    TrajectoryToolCall,
    TrajectoryTurn,
    TrajectoryUnreadable,
    validate_trajectory,
)

__all__ = [
    "MAX_FREE_FORM_DEPTH",
    "AgentInvocation",
    "ModelCallRef",
    "ModelServerRef",
    "ObservationGap",
    "ResponseMetadata",
    "TokenStats",
    "TrajectoryModelCall",
    "TrajectoryRecord",
    "TrajectoryToolCall",
    "TrajectoryTurn",
    "TrajectoryUnreadable",
    "validate_trajectory",
]

"""ATIF v1.7 trajectories: strict reading, the accepted profile, projection to a ``/verify`` body."""

from gymflow.atif.errors import AtifError
from gymflow.atif.preflight import preflight
from gymflow.atif.source import PROVENANCE_KEY, atif_items

__all__ = ["AtifError", "PROVENANCE_KEY", "atif_items", "preflight"]

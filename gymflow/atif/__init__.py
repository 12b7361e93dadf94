"""ATIF v1.7 trajectories: strict reading, the accepted profile, projection to a ``/verify`` body."""

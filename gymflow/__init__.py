"""gymflow: trustworthy post-processing of NeMo Gym evaluation rollouts.

The core package is pure Python: it never imports Prefect, Hydra or the CLI.
"""

__version__ = "0.1.0"

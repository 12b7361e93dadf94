"""``python -m gymflow.cli``: the same as the ``gymflow`` console script."""

from gymflow.cli import entrypoint

entrypoint()

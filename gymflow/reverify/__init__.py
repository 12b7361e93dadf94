"""Re-scoring stored rollouts through a resources server's ``/verify`` (spec ``reverify.md``)."""

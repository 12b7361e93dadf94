"""Re-scoring stored rollouts through a resources server's ``/verify`` (spec ``reverify.md``).

Steps, each separable so a Prefect flow can wrap it in a task::

    options = options_from_config(values)          # §1 validation, before any server is contacted
    plan = prepare(options, gym_config, echo)      # read, route, launch, guard, output paths, resume
    for batch in plan.batches(1000):               # lazily read rows still to verify
        result = verify_batch(plan, batch)         # own event loop: callable from a worker thread
        record_batch(plan, result, echo)           # append + flush, 🚨 lines
    outcome = finish(plan, echo, orchestrator)     # sort, aggregate, banner, provenance record

On an interruption between the steps call ``plan.abort()``: the output stays resumable.

The direct path, :func:`run_reverify`, runs ``prepare``, then streams every row of ``plan.rows()``
through one event loop and one connection pool (``--concurrency`` requests in flight from the first
row to the last, each row appended as it completes), then ``finish``.
"""

from gymflow.reverify._classes import FailureClass
from gymflow.reverify._client import ClientSettings, TransportFactory
from gymflow.reverify._finish import COMMAND, ReverifyOutcome, finish
from gymflow.reverify._options import CONFIG_KEYS, ReverifyOptions, options_from_config
from gymflow.reverify._plan import Echo, ReverifyPlan, Routed, Tally, prepare
from gymflow.reverify._results import Destination, reverify_key
from gymflow.reverify._run import Progress, run_reverify
from gymflow.reverify._verify import BatchResult, OnRow, record_batch, verify_batch

__all__ = [
    "COMMAND",
    "CONFIG_KEYS",
    "BatchResult",
    "ClientSettings",
    "FailureClass",
    "Destination",
    "Echo",
    "OnRow",
    "Progress",
    "ReverifyOptions",
    "ReverifyOutcome",
    "ReverifyPlan",
    "Routed",
    "Tally",
    "TransportFactory",
    "finish",
    "options_from_config",
    "prepare",
    "record_batch",
    "reverify_key",
    "run_reverify",
    "verify_batch",
]

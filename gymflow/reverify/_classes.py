"""The failure classes gymflow itself assigns to a re-verified row (reverify.md §2.6, §2.9, §4).

Rows also carry classes the resources server or the original collection wrote (``judge_failed``,
``agent_run_error``, ``timeout_exceeded``, ...); those are data and stay strings.
"""

from __future__ import annotations

from typing import Final, Literal

FailureClass = Literal[
    "verify_http_error",  # a non-2xx answer (after the retries for 429 and 5xx)
    "verify_timeout",  # no answer within --verify-timeout, on every attempt
    "verify_connection_error",  # refused, reset or dropped connections, on every attempt
    "verify_invalid_response",  # a 2xx answer that is not a JSON object, or not a scorable row (reward not a
    # finite number, responses_create_params/response not objects, mask_sample not a boolean)
    "unmatched_rollout",  # a rollout row without a materialized input row
    "kill_shaped",  # an answer marked _ng_no_persist (ATIF), or a failure without a class
    "judge_invalid",  # an invalid judge response, with retry_invalid_judge_responses
    "permanent",  # the same, not retryable (_ng_failure_terminal)
]

RECOVERED_CLASSES: Final = frozenset({"judge_failed", "judge_invalid"})
"""What --judge-failed-only re-verifies from the run's sidecar."""

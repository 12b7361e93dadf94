"""``--judge-failed-only --append`` only appends (issue 19 item 4, reverify.md §3.10 point 3): the
lines an output and its sidecar held before the run stay byte for byte at the start of each file,
in their order; the rows this run wrote follow them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gymflow.cli import main
from tests.reverify.server_process import ServerProcess, mcqa_rows


def _line(row: dict[str, object]) -> bytes:
    # Spaced JSON, as another tool writes it: a rewrite by gymflow (compact JSON) would show.
    return json.dumps(row, indent=None, separators=(", ", ": ")).encode() + b"\n"


@pytest.mark.parametrize("mode", [["--direct"], []], ids=["direct", "prefect"])
def test_append_keeps_the_existing_rows_and_adds_the_new_ones_after_them(
    mode: list[str],
    tmp_path: Path,
    resources_server: ServerProcess,
    gym_config_file: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    materialized, rollouts = mcqa_rows(4, 2)
    failed_keys = [(3, 0), (1, 1), (0, 1)]  # judge failures of the original run, not in key order
    (tmp_path / "inputs.jsonl").write_bytes(b"".join(_line(row) for row in materialized))
    stored = [row for row in rollouts if (row["_ng_task_index"], row["_ng_rollout_index"]) not in failed_keys]
    # The user's rollouts file: reverse key order, a blank line, spaced JSON.
    rollouts_bytes = b"".join(_line(row) for row in reversed(stored[2:])) + b"\n" + _line(stored[1])
    rollouts_bytes += _line(stored[0])
    output = tmp_path / "rollouts.jsonl"
    output.write_bytes(rollouts_bytes)
    by_key = {(row["_ng_task_index"], row["_ng_rollout_index"]): row for row in rollouts}
    failures_bytes = b"".join(
        _line({**by_key[k], "reward": 0.0, "_ng_failure_class": "judge_failed"}) for k in failed_keys
    )
    sidecar = tmp_path / "rollouts_failures.jsonl"
    sidecar.write_bytes(failures_bytes)
    config = gym_config_file({"mcqa": resources_server})
    resources_server.set((1, 1), kind="judge_failed")  # still failing: a new sidecar row

    args = [
        "eval", "reverify", "--config", str(config), "--inputs", str(tmp_path / "inputs.jsonl"),
        "--rollouts", str(output), "--output", str(output), "--judge-failed-only", "--append", *mode,
    ]  # fmt: skip
    assert main(args) == 0, capsys.readouterr()
    assert "Recovery mode: seeded 0 successful rollout(s)" in capsys.readouterr().out

    data = output.read_bytes()
    assert data.startswith(rollouts_bytes)
    added = [json.loads(line) for line in data[len(rollouts_bytes) :].splitlines()]
    assert [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in added] == [(0, 1), (3, 0)]  # key order
    assert all(r["reward"] == 1.0 for r in added)

    side = sidecar.read_bytes()
    assert side.startswith(failures_bytes)
    [again] = [json.loads(line) for line in side[len(failures_bytes) :].splitlines()]
    assert (again["_ng_task_index"], again["_ng_rollout_index"], again["_ng_failure_class"]) == (
        1, 1, "judge_failed",
    )  # fmt: skip

    # The judge is back: a rerun appends the recovered (1, 1) after everything, and the sidecar
    # keeps its rows; a third run finds nothing to do and leaves both files as they are.
    resources_server.reset()
    assert main(args) == 0
    capsys.readouterr()
    again_data = output.read_bytes()
    assert again_data.startswith(data)
    [recovered] = [json.loads(line) for line in again_data[len(data) :].splitlines()]
    assert (recovered["_ng_task_index"], recovered["_ng_rollout_index"], recovered["reward"]) == (1, 1, 1.0)
    assert sidecar.read_bytes() == side
    assert main(args) == 0
    assert "WARNING: Nothing to be re-verified." in capsys.readouterr().out
    assert output.read_bytes() == again_data and sidecar.read_bytes() == side

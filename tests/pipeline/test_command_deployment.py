"""The ``gymflow-command`` deployment's flow: a command line that fails ends the run ``Failed``
with the command's own one-line error as its message (not ``Crashed`` with a ``SystemExit``)."""

from __future__ import annotations

from pathlib import Path


def test_a_user_error_ends_the_run_failed_with_its_one_line(tmp_path: Path) -> None:
    from gymflow.flows._runtime import prefect_api
    from gymflow.flows.deployments import gymflow_command

    missing = tmp_path / "no-such-run"
    with prefect_api():
        state = gymflow_command(["eval", "health-check", str(missing), "--direct"], return_state=True)
    assert state.is_failed(), state
    assert "Run directory not found" in (state.message or ""), state.message
    assert str(missing) in (state.message or "")
    assert "Traceback" not in (state.message or "")

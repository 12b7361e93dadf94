"""The core's ATIF handling (reverify.md §3.8, §4 point 4): item 54, provenance stamping, no_persist."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.atif.builders import manifest_row, materialized_row, sha256_file, text_trajectory, write_json
from tests.reverify.cases import Case, case_fixture, read_jsonl, write_jsonl  # noqa: F401

pytestmark = pytest.mark.timeout(60)


def _relay(case: Case, n: int = 2) -> tuple[Path, Path, list[Path]]:
    case.path("relay").mkdir()
    inputs = write_jsonl(
        case.path("run_materialized_inputs.jsonl"),
        [materialized_row(task, 0, expected_answer="AB"[task % 2]) for task in range(n)],
    )
    paths = [
        write_json(
            case.path(f"relay/t{task}.json"),
            text_trajectory(f"\\boxed{{{'AB'[task % 2]}}}", trajectory_id=f"t{task}"),
        )
        for task in range(n)
    ]
    manifest = write_jsonl(
        case.path("relay/manifest.jsonl"),
        [manifest_row(p.name, task, 0, sha256_file(p)) for task, p in enumerate(paths)],
    )
    return inputs, manifest, paths


def _atif(case: Case, inputs: Path, manifest: Path, *extra: str) -> tuple[int, str, str]:
    config = case.config()
    outcome = case.cli(
        "--direct", "--input-format", "atif", "--config", str(config), "--inputs", str(inputs),
        "--atif-manifest", str(manifest), "--output", str(case.output), *extra,
    )  # fmt: skip
    return outcome.code, outcome.out, outcome.err


def test_item_54_atif_resume_and_edited_trajectory(case: Case) -> None:
    inputs, manifest, paths = _relay(case)
    case.server.set((1, 0), kind="status", status=500)
    code, _, err = _atif(case, inputs, manifest, "--max-attempts", "1")
    assert code == 0, err
    [ok] = case.out_rows()
    assert ok["_ng_task_index"] == 0 and set(ok["_ng_atif_provenance"]) == {
        "trajectory_id", "session_id", "source_sha256", "schema_version", "projection_status"
    }  # fmt: skip
    [failed] = read_jsonl(case.path("out_failures.jsonl"))
    assert failed["_ng_failure_class"] == "verify_http_error" and "_ng_atif_provenance" in failed
    # the provenance is stamped back, never sent
    assert all("_ng_atif_provenance" not in e["body"] for e in case.server.log("/verify"))

    case.server.reset()
    code, out, err = _atif(case, inputs, manifest, "--resume")
    assert code == 0, err
    assert [tuple(e["key"]) for e in case.server.log("/verify")] == [(1, 0)]
    assert "- 1 rows already done (in main jsonl)" in out.splitlines()
    assert [r["_ng_task_index"] for r in case.out_rows()] == [0, 1]

    write_json(paths[0], text_trajectory("\\boxed{B}", trajectory_id="t0"))
    write_jsonl(manifest, [manifest_row(p.name, task, 0) for task, p in enumerate(paths)])
    code, _, err = _atif(case, inputs, manifest, "--resume")
    assert code == 1
    assert (
        f"Error: Cannot resume: '{case.output}' holds 1 result(s) computed from different inputs or verifier "
        "configuration (first: task 0, rollout 0). Pass --overwrite or choose another --output."
    ) in err


def test_atif_no_persist_goes_to_sidecar(case: Case) -> None:
    inputs, manifest, _ = _relay(case)
    case.server.set(None, kind="no_persist")
    code, out, err = _atif(case, inputs, manifest)
    assert code == 0, err
    rows = read_jsonl(case.path("out_failures.jsonl"))
    assert [r["_ng_failure_class"] for r in rows] == ["kill_shaped", "kill_shaped"]
    assert all("_ng_atif_provenance" in r for r in rows)
    assert "Metrics cover: 0 of 2 rollouts" in out.splitlines()


def test_atif_unknown_server_refused(case: Case) -> None:
    inputs, manifest, _ = _relay(case)
    case.server.set_mode("unknown")
    code, _, err = _atif(case, inputs, manifest)
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        "Error: ATIF reverification requires stateless verifiers; resource server(s) ['mcqa'] reported "
        "reverify_mode=UNSUPPORTED or UNKNOWN."
    )
    assert not case.output.exists() and not case.path("out_failures.jsonl").exists()

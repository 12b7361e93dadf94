"""``gymflow view RUN`` as a user runs it: a process on 127.0.0.1 that prints its URL, serves
every page of the run, verifies provenance live, refuses what is not its business, and stops
cleanly on Ctrl-C. Plus the re-verified run's pages and a run on S3."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import signal
import socket
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest

from gymflow import storage
from gymflow.cli import main
from gymflow.view import ViewServer, load_run, server_page, view_url

from .conftest import EXAMPLE, viewing


def _get(url: str, host: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_the_command_serves_every_page_and_stops_on_ctrl_c(example_run: Path) -> None:
    with viewing(example_run) as view:
        base, port, query = view.base, view.port, view.query
        assert query == urlencode({"run": example_run.as_uri()})

        status, overview = _get(f"{base}/?{query}")
        assert status == 200
        assert re.search(r">healthy</a></td><td>21<", overview) and re.search(
            r">unhealthy</a></td><td>8<", overview
        )
        assert '<svg class="chart"' in overview and "agent_turn_hollow: 5" in overview
        assert "mean/reward" in overview and "0.6666666666666666" in overview

        status, rollouts = _get(f"{base}/rollouts?{query}&verdict=unhealthy")
        assert (
            status == 200 and "Rollouts 1–8 of 8 matching (verdict = unhealthy); 33 in the run." in rollouts
        )
        found = re.search(r'href="/rollout/(\d+)\?[^"]*">\d+</a></td><td>1</td><td>1<', rollouts)
        assert found, rollouts
        number = int(found.group(1))
        status, rollout = _get(f"{base}/rollout/{number}?{query}")
        assert (
            status == 200
            and "agent_turn_hollow" in rollout
            and "agent turn has no message or tool calls" in rollout
        )
        assert "mc-d78d9dff6be4" in rollout  # its model call, with its tokens
        assert "<td>146</td><td>9</td>" in rollout

        status, metrics = _get(f"{base}/metrics?{query}")
        assert status == 200 and "healthy rollouts only" in metrics
        assert (
            "<tr><td>mean/reward</td><td>0.6666666666666666</td><td>0.7619047619047619</td></tr>" in metrics
        )

        status, reverify = _get(f"{base}/reverify?{query}")
        assert status == 200 and "This run was not re-verified" in reverify

        status, provenance = _get(f"{base}/provenance?{query}")
        digest = hashlib.sha256((example_run / "rollouts.jsonl").read_bytes()).hexdigest()
        assert status == 200 and digest in provenance
        record = (example_run / "quality_summary.provenance.json").as_uri()
        assert (
            json.loads((example_run / "quality_summary.provenance.json").read_text())["code"]["git"]["commit"]
            in provenance
        )
        status, verified = _get(
            f"{base}/provenance/verify?{urlencode({'run': example_run.as_uri(), 'record': record})}"
        )
        assert status == 200 and "all files verify" in verified

        # Live: edit a report and the next verify says so.
        (example_run / "rollout_verdicts.jsonl").write_bytes(
            (example_run / "rollout_verdicts.jsonl").read_bytes() + b"\n"
        )
        status, verified = _get(
            f"{base}/provenance/verify?{urlencode({'run': example_run.as_uri(), 'record': record})}"
        )
        assert "some files do not verify" in verified and re.search(
            r">changed</span></td><td>[^<]*rollout_verdicts", verified
        )

        # Not its business: another run, a record of another run, a non-loopback Host, no such page.
        assert _get(f"{base}/?run={quote('file:///elsewhere')}")[0] == 409
        assert (
            _get(f"{base}/provenance/verify?run={quote(example_run.as_uri())}&record=file:///etc/passwd")[0]
            == 404
        )
        assert _get(f"{base}/?{query}", host="attacker.example:80")[0] == 403
        assert _get(f"{base}/nothing-here")[0] == 404
        view.process.send_signal(signal.SIGINT)  # Ctrl-C
        _, err = view.process.communicate(timeout=20)
    assert view.process.returncode == 0, err
    assert "Stopped gymflow view." in err and "Traceback" not in err
    assert not _listening(port)


def test_a_taken_port_is_one_line_naming_the_flag(
    example_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["view", str(example_run), "--port", str(port)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"Error: cannot listen on 127.0.0.1:{port}") and "--port" in err


def test_a_missing_run_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", str(tmp_path / "nope")]) == 1
    assert capsys.readouterr().err.strip() == f"Error: {(tmp_path / 'nope').as_uri()}: no such run directory"


def test_the_reverified_run_shows_old_by_new_per_task_and_the_sidecar(reverified_run: Path) -> None:
    reports = load_run(str(reverified_run))
    page = server_page(reports, "reverify")
    assert "Rewards that changed (2)" in page
    # task 1: one row 1.0 -> 0.0; task 2: one row 0.0 -> 1.0
    assert re.search(
        r"<h3>task 1</h3><table><thead><tr><th>old \\ new</th><th>new 0.0</th></tr></thead>"
        r"<tbody><tr><td>old 1.0</td><td>1</td>",
        page,
    )
    assert re.search(
        r"<h3>task 2</h3><table><thead><tr><th>old \\ new</th><th>new 1.0</th></tr></thead>"
        r"<tbody><tr><td>old 0.0</td><td>1</td>",
        page,
    )
    assert "Failure sidecar (1)" in page and "judge_failed" in page
    rollouts = server_page(reports, "rollouts")
    assert "not re-verified" in rollouts  # (3, 1) failed: it has no re-verified reward
    overview = server_page(reports, "overview")
    assert "<td>reward changed</td><td>2</td>" in overview and "<td>judge_failed</td><td>1</td>" in overview
    provenance = server_page(reports, "provenance")
    assert "config_sha256" in provenance and "stateless" in provenance  # the verifier's identity
    html = (reverified_run / "report.html").read_text()
    assert "Rewards that changed (2)" in html and "judge_failed" in html


def test_a_run_on_s3_is_viewed_and_gets_its_report(
    s3_bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = f"{s3_bucket}/runs/example"
    for shard in sorted((EXAMPLE / "shards").glob("*.jsonl")):
        storage.write_atomic(f"{run}/shards/{shard.name}", shard.read_bytes())
    assert main(["eval", "post", run, "--direct"]) == 0
    assert f"report: ran (html {run}/report.html)" in capsys.readouterr().out
    with storage.open_read(f"{run}/report.html") as f:
        assert "Showing the first 33 of 33 rollouts" in f.read().decode()
    reports = load_run(run)
    with ViewServer(reports, 0) as server:
        url = view_url(f"{run}/rollout_verdicts.jsonl", server.port)
        assert url == f"http://127.0.0.1:{server.port}/rollouts?{urlencode({'run': run})}"
        status, page = _get(url)
    assert status == 200 and "Rollouts 1–33 of 33 matching; 33 in the run." in page


def test_metrics_over_healthy_rollouts_stand_beside_all_rollouts_once_written(example_run: Path) -> None:
    """The healthy-only metrics file appears while the viewer runs: the next page shows it."""
    run = example_run.parent / "with-healthy"
    shutil.copytree(example_run, run)
    (run / "rollouts_aggregate_metrics.healthy.json").unlink()  # eval post wrote it; not yet here
    with ViewServer(load_run(str(run)), 0) as server:
        metrics = f"http://127.0.0.1:{server.port}/metrics"
        before = _get(metrics)[1]
        assert "<tr><td>mean/reward</td><td>0.6666666666666666</td><td>not computed</td></tr>" in before
        entries = json.loads((run / "rollouts_aggregate_metrics.json").read_text())
        entries[0]["agent_metrics"]["mean/reward"] = 0.8571428571428571
        (run / "rollouts_aggregate_metrics.healthy.json").write_text(json.dumps(entries))
        after = _get(metrics)[1]
    assert "<tr><td>mean/reward</td><td>0.6666666666666666</td><td>0.8571428571428571</td></tr>" in after
    assert "not computed" not in after

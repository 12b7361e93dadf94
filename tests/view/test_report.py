"""``RUN/report.html``: what it holds of a run too large for one file, and an ``eval post`` whose
report cannot be written still writes every other report and says so."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from bench.view import write_synthetic_run
from gymflow.cli import main
from gymflow.view import STATIC_DETAILS, STATIC_ROWS, ReportJob, write_report_html

from .conftest import EXAMPLE


def test_a_large_run_holds_the_first_pages_and_says_how_to_see_the_rest(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_synthetic_run(run, 2_500)
    url = write_report_html(ReportJob(str(run)))
    html = (run / "report.html").read_text()
    assert url == str(run / "report.html")
    assert (
        f"Showing the first {STATIC_ROWS} of 2500 rollouts. {2500 - STATIC_ROWS} more are not in this file: "
        f"run `gymflow view {run.as_uri()}` to page, filter and open every rollout."
    ) in html
    assert len(re.findall(r"<tr data-verdict=", html)) == STATIC_ROWS
    assert len(re.findall(r'<div class="page" id="rollout-\d+">', html)) == STATIC_DETAILS
    # a row the file holds whole links to its section, one it does not to the table
    assert 'href="#rollout-0"' in html and f'href="#rollout-{STATIC_DETAILS}"' not in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing from a network


def test_post_whose_report_cannot_be_written_still_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE / "shards", run / "shards")
    (run / "report.html").mkdir()  # a directory where the file goes
    assert main(["eval", "post", str(run), "--direct"]) == 0
    captured = capsys.readouterr()
    assert re.search(r"^  report: failed \(\w+Error: .*report\.html", captured.out, re.MULTILINE), (
        captured.out
    )
    assert "health-check: ran" in captured.out and (run / "quality_summary.json").is_file()
    assert any(
        r.levelname == "WARNING" and "report.html was not written" in r.message for r in caplog.records
    )

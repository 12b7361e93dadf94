"""``RUN/report.html``: the step of ``eval post`` that writes the self-contained report."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gymflow import storage
from gymflow.executor import Step
from gymflow.view._load import FILES, StepRow, load_run
from gymflow.view._site import STATIC_DETAILS, STATIC_ROWS, static_report

__all__ = ["WRITE_REPORT_HTML", "ReportJob", "write_report_html"]


@dataclass(frozen=True)
class ReportJob:
    """What the report shows beyond the run's files: each step's status this run, and the
    failures by class the pipeline counted."""

    run: str
    steps: tuple[StepRow, ...] = ()
    failures: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, run: str, steps: Iterable[StepRow], failures: Mapping[str, int]) -> ReportJob:
        return cls(run, tuple(steps), tuple(sorted(failures.items())))


def write_report_html(job: ReportJob) -> str:
    """Render ``report.html`` from the run's reports and write it atomically; its URL."""
    reports = load_run(job.run, held=max(STATIC_ROWS, STATIC_DETAILS))
    html = static_report(reports, job.steps or tuple(reports.steps), dict(job.failures))
    url = storage.join(job.run, FILES["report"])
    storage.write_atomic(url, html.encode())
    return url


WRITE_REPORT_HTML: Step[ReportJob, str] = Step("write-report-html", write_report_html, io=True)

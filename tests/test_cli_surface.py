"""What a user meets first: the bare command, the top-level help, ``-v``, path resolution of
``join --output``/``--summary``, warnings printed once, the no-agent aggregate line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gymflow.aggregate import AggregateOptions, run_aggregate
from gymflow.cli import main
from tests.aggregate.rows import mcqa_rows, row, write_jsonl
from tests.join.helpers import jsonl
from tests.join.helpers import row as join_row

REPO = Path(__file__).resolve().parents[1]


def _python(code: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter: real stderr, logging configured from scratch."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_no_arguments_prints_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    captured = capsys.readouterr()
    usage = r"usage: gymflow \[-h\] \[--version\] \{eval,provenance,ui[a-z,]*\} \.\.\.\n"
    assert re.match(usage, captured.out)
    assert "examples:\n  gymflow eval health-check results/run" in captured.out
    assert "required" not in captured.out + captured.err


def test_a_group_alone_prints_its_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval"]) == 2
    out = capsys.readouterr().out
    assert re.match(r"usage: gymflow eval \[-h\] \{health-check,aggregate,join[a-z,-]*\} \.\.\.\n", out)
    assert "Work on the artifacts of an evaluation run." in out


def test_every_group_alone_prints_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["provenance"]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith("usage: gymflow provenance [-h] {show,verify} ...\n")
    assert captured.err == ""


def test_an_abbreviated_flag_is_refused_not_guessed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gymflow.cli import all_parsers, build_parser

    assert all(not parser.allow_abbrev for parser in all_parsers(build_parser()))
    assert len(all_parsers(build_parser())) >= 12  # the top level, its groups and every command
    (tmp_path / "rollouts.jsonl").write_text("")
    cases = [
        (["eval", "health-check", str(tmp_path), "--worker", "2"], "unrecognized arguments: --worker"),
        (["eval", "join", str(tmp_path), "--no-cach"], "unrecognized arguments: --no-cach"),
        (["eval", "aggregate", "-i", "x", "-o", "y", "--worker", "2"], "unrecognized arguments: --worker 2"),
        (["eval", "post", str(tmp_path), "--no-cach"], "unrecognized arguments: --no-cach"),
        (["eval", "reverify", "--input", "m", "-o", "o"], "unrecognized arguments: --input m"),
        (["serve", "--sweep-int", "5"], "unrecognized arguments: --sweep-int"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exited:
            main([*argv, "--direct"] if argv[0] == "eval" else argv)
        assert exited.value.code == 2, argv
        err = capsys.readouterr().err
        assert err.rstrip("\n").endswith(f"error: {message}"), (argv, err)
    assert not list(tmp_path.glob("*.json"))


def test_top_level_help_is_written_for_users(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "\nCheck, join, aggregate and re-verify the rollouts a NeMo Gym evaluation wrote" in out
    assert "parses arguments" not in out and "loads config" not in out
    assert "Run 'gymflow eval COMMAND --help' for a command's options." in out


def test_verbose_logging_shows_gymflow_not_each_http_request(tmp_path: Path) -> None:
    # A real request to a real loopback server: httpx logs "HTTP Request: ..." at INFO.
    done = _python(
        """
        import http.server, logging, threading
        import httpx
        from gymflow.cli.logs import configure_logging

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        configure_logging(verbose=True)
        logging.getLogger("gymflow.demo").info("gymflow says hello")
        for _ in range(3):
            assert httpx.get(f"http://127.0.0.1:{server.server_port}/", timeout=10).text == "ok"
        logging.getLogger("httpx").warning("httpx warns")
        server.shutdown()
        server.server_close()
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["INFO gymflow.demo: gymflow says hello", "WARNING httpx: httpx warns"]


@pytest.fixture
def join_run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "rollouts.jsonl").write_bytes(jsonl(join_row(0, 0), join_row(0, 1)))
    (tmp_path / "elsewhere").mkdir()
    return run_dir


def test_join_output_and_summary_resolve_under_run_dir(
    join_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = join_run.parent / "elsewhere"
    monkeypatch.chdir(elsewhere)
    args = ["eval", "join", str(join_run), "--direct", "--no-capture"]
    assert main([*args, "--output", "out/joined.jsonl", "--summary", "out/summary.json"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == f"Joined rollouts: {join_run}/out/joined.jsonl"
    assert len((join_run / "out" / "joined.jsonl").read_text().splitlines()) == 2
    assert json.loads((join_run / "out" / "summary.json").read_text())["rows"] == 2
    assert os.listdir(elsewhere) == []
    # An absolute --summary is used as given.
    absolute = elsewhere / "abs.json"
    assert main([*args, "--no-cache", "--summary", str(absolute)]) == 0
    assert json.loads(absolute.read_text())["rows"] == 2


def test_missing_capture_dir_is_warned_once(join_run: Path) -> None:
    done = _python(
        f"""
        import sys
        from gymflow.cli import main
        sys.exit(main(["eval", "join", {str(join_run)!r}, "--direct"]))
        """,
        join_run,
    )
    assert done.returncode == 0, done.stderr
    expected = (
        f"warning: capture directory {join_run}/model-calls does not exist; treating it as empty "
        "(every row gets model_call_capture_no_records)"
    )
    assert done.stderr.splitlines() == [expected]


def _aggregate(tmp_path: Path, rows: list[dict[str, object]]) -> tuple[list[str], list[dict[str, object]]]:
    write_jsonl(tmp_path / "s" / "a.jsonl", rows)
    lines: list[str] = []
    options = AggregateOptions(
        input_glob=f"{tmp_path}/s/*.jsonl", output=f"{tmp_path}/o/m.jsonl", health_check=False, workers=1
    )
    run_aggregate(options, echo=lines.append)
    return lines, json.loads((tmp_path / "o" / "m_aggregate_metrics.json").read_text())


def test_rows_without_an_agent_name_are_scored_under_agent_with_one_line(tmp_path: Path) -> None:
    named = mcqa_rows(tasks=1, repeats=1)
    anonymous = [row(1, 0, 1.0), row(1, 1, 0.0), row(2, 0, 1.0, agent_ref={"name": ""})]
    lines, entries = _aggregate(tmp_path, [*named, *anonymous])
    assert "Scored 3 row(s) without an agent name under 'agent'." in lines
    assert [entry["agent_ref"] for entry in entries] == [{"name": "agent"}, {"name": "mcqa_simple_agent"}]
    assert "_ng_environment_server" not in entries[0]
    assert entries[0]["key_metrics"] == {"mean/reward": 2 / 3}


def test_no_agent_line_when_every_row_names_its_agent(tmp_path: Path) -> None:
    lines, entries = _aggregate(tmp_path, mcqa_rows(tasks=2, repeats=1))
    assert not [line for line in lines if "without an agent name" in line]
    assert [entry["agent_ref"] for entry in entries] == [{"name": "mcqa_simple_agent"}]

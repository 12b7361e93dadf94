"""Side by side: ``gymflow eval reverify`` and NeMo Gym 0.7.0's ``gym eval reverify`` on 0.7.0's own
resources servers, over the example rollouts shipped in the ``nemo_gym`` wheel.

Run from the repo root, with 0.7.0 installed in a venv of its own (not needed by the test suite)::

    python bench/reverify_vs_07.py --ng07 /work/ng07 [--servers mcqa,code_gen | --all] [--prefect]

Per server ``S`` (``resources_servers/S`` beside the installed ``nemo_gym``):

1. Inputs: ``S/data/example_rollouts.jsonl`` are the rollouts; each is matched to its dataset row in
   ``S/data/example.jsonl`` by the text of its prompt (else by position when both files have as many
   rows), which becomes the materialized input. Both get ``_ng_task_index`` (the dataset row),
   ``_ng_rollout_index`` (0, 1, ... per task) and ``agent_ref`` (the row's own, else the config's agent).
2. Config: the server's resources-server block from ``S/configs/S.yaml`` (else the first config that
   has one), alone (resources-only: every row routes to it), on 127.0.0.1. 0.7.0 starts it itself
   (``uv_venv_dir`` pointing at venvs that are the 0.7.0 venv, ``skip_venv_if_present``); gymflow starts
   it from the same block with ``python``/``dir`` naming the 0.7.0 interpreter and the server directory.
3. Both tools run with the same flags (with ``--force`` for both when 0.7.0 refuses the server's
   ``unknown``/``unsupported`` reverify mode), each on a port of its own; whatever 0.7.0 leaves
   listening on its ports (the resources server, the head server) is stopped after its run.
4. Compared: verified rows (as parsed JSON, key order included, ``_ng_reverify_key`` removed: gymflow's
   content key; order-insensitive since 0.7.0 writes completion order), failure sidecar (same rule) and
   the metrics file bytes, exactly.

Prints one table row per server: rows of each tool, whether rows / sidecar / metrics are identical,
wall seconds of each tool; ``skipped`` names why a server could not be compared (a server that does
not start offline, no example rollouts, a 0.7.0 crash). Exit status 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

DEFAULT_SERVERS = (
    "mcqa",
    "bunsenbench_chemistry_mcq",
    "gpqa_diamond",
    "hotpotqa_qa",
    "code_gen",
    "structured_outputs",
    "instruction_following",
    "ifbench",
    "format_verification",
    "equivalence_rule",
    "string_match",
    "xlam_fc",
    "single_step_tool_use_with_argument_comparison",
    "circle_count",
    "arc_agi",
    "spartqa",
    "graphwalks",
    "mrcr",
    "lc_niah",
    "citation_if",
    "structeval",
    "math_with_code",
    "example_single_tool_call",
    "math_with_judge",
    "math_with_judge" + "+stub_judge",
)
PORT_07, PORT_GF, HEAD_PORT_07, JUDGE_PORT = 18801, 18802, 11000, 18809
MODEL_PORT_07, MODEL_PORT_GF = 18807, 18808
STUB = "+stub_judge"
RUN_TIMEOUT_S = 600.0


@dataclass
class Row:
    server: str
    rows_07: int | None = None
    rows_gf: int | None = None
    same_rows: bool | None = None
    same_sidecar: bool | None = None
    same_metrics: bool | None = None
    seconds_07: float | None = None
    seconds_gf: float | None = None
    note: str = ""


class _StubJudge(ThreadingHTTPServer):
    """A deterministic LLM judge on ``/v1/responses``: the verdict ``[[A=B]]`` or ``[[A!=B]]``
    depends only on the prompt's bytes (SHA-256 parity); ``calls`` counts the requests."""

    calls = 0


class _JudgeHandler(BaseHTTPRequestHandler):
    server: _StubJudge

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.calls += 1
        request = json.loads(body or b"{}")
        prompt = json.dumps(request.get("input"), sort_keys=True).encode()
        verdict = "[[A=B]]" if hashlib.sha256(prompt).digest()[0] % 2 == 0 else "[[A!=B]]"
        message = {
            "id": "msg_stub_judge",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": f"My final verdict is {verdict}", "annotations": []}],
        }
        answer = {
            "id": "resp_stub_judge",
            "object": "response",
            "created_at": 0.0,
            "model": "stub-judge",
            "output": [message],
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _prompt_text(row: dict[str, Any]) -> str:
    params = row.get("responses_create_params")
    items = params.get("input") if isinstance(params, dict) else None
    if isinstance(items, str):
        return items
    parts: list[str] = []
    for item in items or []:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "\n".join(parts)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def _server_block(server_dir: Path) -> tuple[str, dict[str, Any], str | None] | None:
    """(block name, the resources_servers mapping, an agent block name) from the server's configs."""
    configs = sorted((server_dir / "configs").glob("*.yaml"))
    configs.sort(key=lambda p: p.stem != server_dir.name)
    for path in configs:
        try:
            loaded = yaml.safe_load(path.read_text())
        except yaml.YAMLError:
            continue
        if not isinstance(loaded, dict):
            continue
        agent = next(
            (k for k, v in loaded.items() if isinstance(v, dict) and "responses_api_agents" in v), None
        )
        for name, body in loaded.items():
            impls = body.get("resources_servers") if isinstance(body, dict) else None
            if isinstance(impls, dict) and server_dir.name in impls:
                return str(name), {server_dir.name: dict(impls[server_dir.name])}, agent
    return None


def _inputs(server_dir: Path, agent: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | str:
    data = server_dir / "data"
    rollouts_path, dataset_path = data / "example_rollouts.jsonl", data / "example.jsonl"
    if not rollouts_path.is_file() or not dataset_path.is_file():
        return "no example.jsonl / example_rollouts.jsonl"
    rollouts, dataset = _jsonl(rollouts_path), _jsonl(dataset_path)
    by_text: dict[str, list[int]] = {}
    for index, row in enumerate(dataset):
        by_text.setdefault(_prompt_text(row), []).append(index)
    tasks = [by_text.get(_prompt_text(r), []) for r in rollouts]
    if all(len(t) == 1 for t in tasks):
        indices = [t[0] for t in tasks]
    elif len(rollouts) == len(dataset):
        indices = list(range(len(rollouts)))
    else:
        return "example rollouts do not match example.jsonl"
    materialized: list[dict[str, Any]] = []
    stamped: list[dict[str, Any]] = []
    repeats: Counter[int] = Counter()
    for task, rollout in zip(indices, rollouts, strict=True):
        row = dataset[task]
        ref = row.get("agent_ref") if isinstance(row.get("agent_ref"), dict) else {"name": agent}
        stamp = {"_ng_task_index": task, "_ng_rollout_index": repeats[task], "agent_ref": ref}
        repeats[task] += 1
        materialized.append({**row, **stamp})
        stamped.append({**rollout, **stamp})
    return materialized, stamped


def _listening_pids(port: int) -> set[int]:
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True).stdout
    return {int(pid) for pid in re.findall(r"pid=(\d+)", out)}


def _stop_leftovers(ports: Sequence[int], before: set[int]) -> None:
    """Stop what the 0.7.0 run left listening on its ports (never a process that listened before)."""
    for port in ports:
        for pid in _listening_pids(port) - before:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def _model_block(port: int) -> dict[str, Any]:
    model = {
        "entrypoint": "app.py",
        "openai_base_url": f"http://127.0.0.1:{JUDGE_PORT}/v1",
        "openai_api_key": "stub",
        "openai_model": "stub-judge",
        "openai_default_headers": {},
        "host": "127.0.0.1",
        "port": port,
    }
    return {"responses_api_models": {"openai_model": model}}


def _start_model(
    ng07: Path, site: Path, config: dict[str, Any], name: str, here: Path
) -> subprocess.Popen[bytes]:
    """Start the judge's model server as Gym starts a child server (its config in
    ``NEMO_GYM_CONFIG_DICT``, its name in ``NEMO_GYM_CONFIG_PATH``) and wait until it listens."""
    full = {**config, "head_server": {"host": "127.0.0.1", "port": HEAD_PORT_07}, "dry_run": False}
    env = dict(os.environ, NEMO_GYM_CONFIG_DICT=yaml.safe_dump(full), NEMO_GYM_CONFIG_PATH=name)
    log = open(here / "model_server.log", "wb")  # noqa: SIM115 (kept open for the child's life)
    proc = subprocess.Popen(
        [str(ng07 / "bin" / "python"), "app.py"],
        cwd=site / "responses_api_models" / "openai_model",
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", MODEL_PORT_GF)) == 0:
                break
        time.sleep(0.2)
    return proc


def _run_07(ng07: Path, here: Path, work: Path, flags: Sequence[str]) -> tuple[int, float]:
    shutil.rmtree(here / "r07", ignore_errors=True)
    ports = (PORT_07, HEAD_PORT_07, MODEL_PORT_07)
    before = {pid for port in ports for pid in _listening_pids(port)}
    argv = [str(ng07 / "bin" / "gym"), "eval", "reverify", "--config", "c07.yaml", *flags]
    argv += [
        "--output",
        "r07/rollouts.jsonl",
        f"+uv_venv_dir={work / '_venvs'}",
        "+skip_venv_if_present=true",
    ]
    try:
        return _run(argv, here, "ng07")
    finally:
        _stop_leftovers(ports, before)


def _run(argv: list[str], cwd: Path, label: str) -> tuple[int, float]:
    started = time.monotonic()
    with open(cwd / f"{label}.stdout", "w") as out, open(cwd / f"{label}.stderr", "w") as err:
        try:
            code = subprocess.run(
                argv, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, timeout=RUN_TIMEOUT_S
            ).returncode
        except subprocess.TimeoutExpired:
            code = -1
    return code, time.monotonic() - started


def _reason(here: Path, label: str) -> str:
    """Why a run failed: the last ``...Error: ...`` line of its output (a server that does not
    start names its missing module), else its last stderr line."""
    text = (here / f"{label}.stdout").read_text(errors="replace") + (here / f"{label}.stderr").read_text(
        errors="replace"
    )
    found = re.findall(r"(\w*Error: .*)$", text, re.MULTILINE)
    if found:
        return str(found[-1])[:100]
    lines = text.strip().splitlines()
    return lines[-1][:100] if lines else ""


def _lines(path: Path) -> Counter[bytes] | None:
    """A file's rows as canonical-in-order JSON without gymflow's content key (a multiset)."""
    if not path.is_file():
        return None
    rows: Counter[bytes] = Counter()
    for line in path.read_bytes().splitlines():
        if line.strip():
            row = json.loads(line)
            if isinstance(row, dict):
                row.pop("_ng_reverify_key", None)
            rows[json.dumps(row, ensure_ascii=False).encode()] += 1
    return rows


def _differing_fields(a: Path, b: Path) -> list[str]:
    """Top-level fields whose values differ between rows of the same key (``key order`` when only
    the order of the keys differs)."""

    def by_key(path: Path) -> dict[tuple[Any, Any], dict[str, Any]]:
        rows = (json.loads(line) for line in path.read_bytes().splitlines() if line.strip())
        return {(r.get("_ng_task_index"), r.get("_ng_rollout_index")): r for r in rows if isinstance(r, dict)}

    left, right = by_key(a), by_key(b)
    fields: set[str] = set()
    for key in left.keys() & right.keys():
        x, y = left[key], right[key]
        y.pop("_ng_reverify_key", None)
        fields |= {f for f in x.keys() | y.keys() if x.get(f) != y.get(f)}
        if not fields and list(x) != list(y):
            fields.add("key order")
    return sorted(fields)


def compare(label: str, ng07: Path, work: Path, gymflow: list[str], judge: _StubJudge | None = None) -> Row:
    """One table row; ``label`` is a server name, or ``<server>+stub_judge``: the server with
    ``should_use_judge: true`` and its ``judge_model_server`` answered by the stub judge (a block
    with only an address, which 0.7.0 does not start with ``error_on_almost_servers=false``)."""
    server = label.removesuffix(STUB)
    site = next((ng07 / "lib").glob("python3*/site-packages"))
    server_dir = site / "resources_servers" / server
    result = Row(label)
    found = _server_block(server_dir)
    if found is None:
        result.note = "no resources-server block in its configs"
        return result
    block_name, impls, agent = found
    inputs = _inputs(server_dir, agent or f"{server}_simple_agent")
    if isinstance(inputs, str):
        result.note = inputs
        return result
    here = work / label
    shutil.rmtree(here, ignore_errors=True)
    here.mkdir(parents=True)
    _write_jsonl(here / "inputs.jsonl", inputs[0])
    _write_jsonl(here / "rollouts.jsonl", inputs[1])
    flags = ["--inputs", "inputs.jsonl", "--rollouts", "rollouts.jsonl"]
    for kind, name in (("resources_servers", server), ("responses_api_models", "openai_model")):
        venvs = work / "_venvs" / kind / name
        venvs.mkdir(parents=True, exist_ok=True)
        if not (venvs / ".venv").exists():
            (venvs / ".venv").symlink_to(ng07)
    impl = {**impls[server], "host": "127.0.0.1"}
    judge_ref = impl.get("judge_model_server")
    judge_name = judge_ref.get("name") if isinstance(judge_ref, dict) else None
    if label.endswith(STUB):
        if not judge_name:
            result.note = "no judge_model_server to stub"
            return result
        impl["should_use_judge"] = True
    block_07: dict[str, Any] = {block_name: {"resources_servers": {server: {**impl, "port": PORT_07}}}}
    launch = {"python": str(ng07 / "bin" / "python"), "dir": str(server_dir)}
    block_gf: dict[str, Any] = {
        block_name: {"resources_servers": {server: {**impl, "port": PORT_GF, **launch}}}
    }
    if judge_name:
        # The judge model block the server names: 0.7.0's openai_model server pointed at the stub
        # judge. 0.7.0 starts it; for gymflow (which starts resources servers only) this script does.
        block_07[judge_name] = _model_block(MODEL_PORT_07)
        block_gf[judge_name] = _model_block(MODEL_PORT_GF)
    (here / "c07.yaml").write_text(yaml.safe_dump(block_07, sort_keys=False))
    (here / "cgf.yaml").write_text(yaml.safe_dump(block_gf, sort_keys=False))
    calls = judge.calls if judge is not None else 0
    code, result.seconds_07 = _run_07(ng07, here, work, flags)
    if code != 0 and "++force=true" in (here / "ng07.stdout").read_text(errors="replace"):
        flags.append("--force")  # an unknown/unsupported server: 0.7.0 needs --force, gymflow too
        calls = judge.calls if judge is not None else 0
        code, result.seconds_07 = _run_07(ng07, here, work, flags)
    judged_07 = judge.calls - calls if judge is not None else 0
    model = _start_model(ng07, site, block_gf, judge_name, here) if judge_name else None
    try:
        code_gf, result.seconds_gf = _run(
            [*gymflow, "--config", "cgf.yaml", *flags, "--output", "rgf/rollouts.jsonl"], here, "gymflow"
        )
    finally:
        if model is not None:
            model.terminate()
            model.wait(timeout=30)
    if label.endswith(STUB) and judge is not None:
        result.note = f"judge calls 0.7.0 {judged_07}, gymflow {judge.calls - calls - judged_07}"
    prefix = "unsafe_" if "--force" in flags else ""
    out07, outgf = here / "r07" / f"{prefix}rollouts.jsonl", here / "rgf" / f"{prefix}rollouts.jsonl"
    if code != 0:
        result.note += f"{'; ' if result.note else ''}0.7.0 exit {code}: {_reason(here, 'ng07')}"
    if code_gf != 0:
        result.note += f"{'; ' if result.note else ''}gymflow exit {code_gf}: {_reason(here, 'gymflow')}"
    rows07, rowsgf = _lines(out07), _lines(outgf)
    result.rows_07 = sum(rows07.values()) if rows07 is not None else None
    result.rows_gf = sum(rowsgf.values()) if rowsgf is not None else None
    if rows07 is not None and rowsgf is not None:
        result.same_rows = rows07 == rowsgf
        if not result.same_rows:
            fields = _differing_fields(out07, outgf)
            result.note += (
                f"{'; ' if result.note else ''}rows differ in: {', '.join(fields) or 'order/count'}"
            )
        result.same_sidecar = _lines(out07.with_name(f"{out07.stem}_failures.jsonl")) == _lines(
            outgf.with_name(f"{outgf.stem}_failures.jsonl")
        )
        metrics07 = out07.with_name(f"{out07.stem}_aggregate_metrics.json")
        metricsgf = outgf.with_name(f"{outgf.stem}_aggregate_metrics.json")
        if metrics07.is_file() and metricsgf.is_file():
            result.same_metrics = metrics07.read_bytes() == metricsgf.read_bytes()
    return result


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "same" if value else "DIFFERS"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ng07", type=Path, default=Path("/work/ng07"), help="venv with nemo-gym 0.7.0")
    parser.add_argument("--servers", help="comma-separated resources servers (default: a set of 23)")
    parser.add_argument("--all", action="store_true", help="every server of the wheel with example rollouts")
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()) / "gymflow-reverify-vs-07",
        help="scratch dir",
    )
    parser.add_argument("--prefect", action="store_true", help="gymflow orchestrated (default: --direct)")
    args = parser.parse_args(argv)
    site = next((args.ng07 / "lib").glob("python3*/site-packages"))
    if args.all:
        servers = sorted(
            p.parent.parent.name for p in (site / "resources_servers").glob("*/data/example_rollouts.jsonl")
        )
    elif args.servers:
        servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    else:
        servers = list(DEFAULT_SERVERS)
    executable = shutil.which("gymflow", path=str(Path(sys.executable).parent)) or shutil.which("gymflow")
    if executable is None:
        parser.error("gymflow is not installed beside this python")
    gymflow = [executable, "eval", "reverify", *([] if args.prefect else ["--direct"])]
    args.work.mkdir(parents=True, exist_ok=True)
    header = (
        "| server | rows 0.7.0 | rows gymflow | rows | sidecar | metrics bytes | 0.7.0 s | gymflow s | note |"
    )
    print(header)
    print("|" + "---|" * 9)
    judge = _StubJudge(("127.0.0.1", JUDGE_PORT), _JudgeHandler)
    threading.Thread(target=judge.serve_forever, daemon=True).start()
    for server in servers:
        row = compare(server, args.ng07, args.work, gymflow, judge)
        cells = [
            row.server,
            row.rows_07,
            row.rows_gf,
            row.same_rows,
            row.same_sidecar,
            row.same_metrics,
            row.seconds_07,
            row.seconds_gf,
            row.note,
        ]
        print("| " + " | ".join(_cell(c) for c in cells) + " |", flush=True)
    judge.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The reverify example's grader: a small stateless multiple-choice resources server.

It is started the NeMo Gym way, from a block that has only ``entrypoint: app.py``: ``gymflow eval
reverify`` (like ``gym``) runs ``python app.py`` in this directory with the resolved config as YAML in
``NEMO_GYM_CONFIG_DICT`` and the block's name in ``NEMO_GYM_CONFIG_PATH``; the block's ``host`` and
``port`` say where to listen. Standard library plus PyYAML (a gymflow dependency).

``grading_mode`` (a key of the block; when it is null, the row's ``grading_mode``; else ``boxed``):

* ``boxed``: the answer is the last ``\\boxed{X}`` in the reply;
* ``lenient``: without a ``\\boxed{X}``, also the last ``Answer: X`` (or ``answer is X``), else the
  reply's last standalone capital letter.

Endpoints: ``GET /reverify_mode`` (``"stateless"``: a reward depends only on the request and this
config), ``POST /verify`` (reward 1.0 when the extracted letter is ``expected_answer``, with
``extracted_answer`` and the ``grading_mode`` used), ``POST /aggregate_metrics`` (the mean reward and
the row count). It is an example, written for gymflow; it is not one of NeMo Gym's servers.
"""

from __future__ import annotations

import json
import os
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml

MODES = ("boxed", "lenient")
BOXED = re.compile(r"\\boxed\{\s*([A-Za-z])\s*\}")
ANSWER = re.compile(r"(?i:answer)(?:\s+is)?\s*[:=]?\s*\(?([A-Z])\b")
LETTER = re.compile(r"\b([A-Z])\b")


def reply_text(response: dict[str, Any]) -> str:
    """The text of the assistant messages of a Responses-API response."""
    texts = []
    for item in response.get("output") or []:
        if isinstance(item, dict) and item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    texts.append(part["text"])
    return "\n".join(texts)


def extract(text: str, mode: str) -> str | None:
    for pattern in (BOXED, ANSWER, LETTER) if mode == "lenient" else (BOXED,):
        found = pattern.findall(text)
        if found:
            return str(found[-1]).upper()
    return None


def verify(body: dict[str, Any], configured: str | None) -> tuple[int, dict[str, Any]]:
    if not all(isinstance(body.get(name), dict) for name in ("response", "responses_create_params")):
        return 422, {"detail": "the body needs responses_create_params and response objects"}
    mode = configured or body.get("grading_mode") or "boxed"
    if mode not in MODES:
        return 422, {"detail": f"grading_mode must be one of {list(MODES)}, not {mode!r}"}
    extracted = extract(reply_text(body["response"]), mode)
    expected = body.get("expected_answer")
    return 200, {
        "responses_create_params": body["responses_create_params"],
        "response": body["response"],
        "reward": 1.0 if extracted is not None and extracted == expected else 0.0,
        "mask_sample": False,
        "failure_kind": None,
        "failure_reason": None,
        "expected_answer": expected,
        "extracted_answer": extracted,
        "grading_mode": mode,
    }


def aggregate(body: dict[str, Any]) -> dict[str, Any]:
    rows = [row for row in body.get("verify_responses") or [] if isinstance(row, dict)]
    rewards = [float(row.get("reward") or 0.0) for row in rows]
    mean = sum(rewards) / len(rewards) if rewards else 0.0
    return {
        "agent_metrics": {"mean/reward": mean, "rows": len(rows)},
        "key_metrics": {"mean/reward": mean},
        "group_level_metrics": [],
        "repeat_level_metrics": [],
        "perf_summary": None,
    }


def handler(configured: str | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per request is noise
            pass

        def _answer(self, status: int, value: Any) -> None:
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if self.path == "/reverify_mode":
                self._answer(200, "stateless")
            else:
                self._answer(404, {"detail": "Not Found"})

        def do_POST(self) -> None:  # noqa: N802
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            if not isinstance(body, dict):
                self._answer(422, {"detail": "the body must be a JSON object"})
            elif self.path == "/verify":
                self._answer(*verify(body, configured))
            elif self.path == "/aggregate_metrics":
                self._answer(200, aggregate(body))
            else:
                self._answer(404, {"detail": "Not Found"})

    return Handler


def main() -> int:
    config = yaml.safe_load(os.environ["NEMO_GYM_CONFIG_DICT"])
    name = os.environ["NEMO_GYM_CONFIG_PATH"]
    block = next(iter(config[name]["resources_servers"].values()))
    configured = block.get("grading_mode")
    if configured is not None and configured not in MODES:
        print(f"{name}: grading_mode must be one of {list(MODES)} or null, not {configured!r}", flush=True)
        return 2
    server = ThreadingHTTPServer((block.get("host") or "127.0.0.1", int(block["port"])), handler(configured))
    mode = configured or "per row (default boxed)"
    print(f"{name}: grading with mode {mode} on port {block['port']}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

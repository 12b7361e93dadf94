"""A tiny stateless mcqa-style resources server for the ATIF example (standard library only).

``GET /reverify_mode`` answers ``"stateless"``; ``POST /verify`` grades the last ``\\boxed{X}`` of the
response's message text against ``expected_answer``. Run: ``python mcqa_server.py --host H --port P``.
It is an example, not NeMo Gym's mcqa server; point the config at that one for real grading.
"""

from __future__ import annotations

import argparse
import json
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BOXED = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")


def output_text(response: dict[str, Any]) -> str:
    texts = []
    for item in response.get("output") or []:
        if item.get("type") == "message":
            texts.extend(part.get("text", "") for part in item.get("content") or [])
    return "".join(texts)


def grade(body: dict[str, Any]) -> dict[str, Any]:
    found = BOXED.findall(output_text(body["response"]))
    extracted = found[-1] if found else None
    expected = body.get("expected_answer")
    return {
        "responses_create_params": body["responses_create_params"],
        "response": body["response"],
        "reward": 1.0 if extracted is not None and extracted == expected else 0.0,
        "expected_answer": expected,
        "extracted_answer": extracted,
    }


class Handler(BaseHTTPRequestHandler):
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
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
        if self.path != "/verify":
            self._answer(404, {"detail": "Not Found"})
        elif not isinstance(body, dict) or not isinstance(body.get("response"), dict):
            self._answer(422, {"detail": "body needs responses_create_params and response objects"})
        else:
            self._answer(200, grade(body))

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()

"""A local server speaking OpenAI's chat-completions protocol, for testing the real ChatOpenAI
HTTP path: it answers, fails with an HTTP status, or never answers, as told.

It binds 127.0.0.1 on a free port and runs in a thread; a request it holds (``hang``) is held
at most ``hang_seconds``, and every held request is let go when the server stops.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TITLE_LINE = re.compile(r"^Title: (.+)$", re.M)


class OpenAIStub:
    """``POST /v1/chat/completions`` on ``127.0.0.1:<free port>``.

    ``mode``: ``ok`` answers with one bullet per context title (the paper's format, citing
    each title), ``fail`` answers ``status`` with OpenAI's error body, ``hang`` never answers.
    ``fail_after=n``: the first ``n`` requests are answered, later ones get ``mode``.
    Every request body is kept in :attr:`requests` (its headers, lowercased, in :attr:`headers`).
    """

    def __init__(
        self,
        mode: str = "ok",
        *,
        status: int = 500,
        fail_after: int = 0,
        hang_seconds: float = 30.0,
    ) -> None:
        if mode not in ("ok", "fail", "hang"):
            raise ValueError(f"mode must be ok, fail or hang, got {mode!r}")
        self.mode, self.status, self.fail_after = mode, status, fail_after
        self.hang_seconds = hang_seconds
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The ``base_url`` to give the client (``http://127.0.0.1:<port>/v1``)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> OpenAIStub:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopping.set()  # releases held requests
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def _reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        """``(status, payload)``; ``payload`` None: hold the request, answer nothing."""
        with self._lock:
            self.requests.append(body)
            number = len(self.requests)
        if self.mode != "ok" and number > self.fail_after:
            if self.mode == "hang":
                return 0, None
            error = {"message": "the stub failed on purpose", "type": "server_error"}
            return self.status, {"error": error}
        prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        titles = TITLE_LINE.findall(prompt)
        bullets = "\n".join(f"- {title} (DocTitle: {title})" for title in titles[:3])
        return 200, {
            "id": f"chatcmpl-stub-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": bullets},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with stub._lock:
                    stub.headers.append({k.lower(): v for k, v in self.headers.items()})
                status, payload = stub._reply(body)
                if payload is None:
                    stub._stopping.wait(stub.hang_seconds)
                    return
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the test asserts on what it needs

        return Handler

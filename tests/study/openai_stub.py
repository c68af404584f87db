"""A local server speaking OpenAI's chat-completions protocol, for testing the real ChatOpenAI
HTTP path: it answers (whole, or streamed as server-sent events), fails with an HTTP status
(with ``Retry-After`` if asked), never answers, or sends a malformed body, as told.

It binds 127.0.0.1 on a free port and runs in a thread; a request it holds (``hang``) is held
at most ``hang_seconds``, and every held request is let go when the server stops.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TITLE_LINE = re.compile(r"^Title: (.+)$", re.M)
MODES = ("ok", "fail", "hang", "invalid_json", "no_choices")
STYLES = ("doctitle", "numbered", "bracketed", "names", "rotate")
"""How ``ok`` answers cite: the paper's ``- T (DocTitle: T)``, context entry numbers ``- T [i]``,
``- T [T]``, names alone ``- T``, or the last three in turn, request by request."""
ROTATION = ("numbered", "bracketed", "names")


def styled_bullets(titles: list[str], style: str) -> str:
    """One bullet per title (the first three) in ``style``."""
    lines = []
    for number, title in enumerate(titles[:3], start=1):
        if style == "numbered":
            lines.append(f"- {title} [{number}]")
        elif style == "bracketed":
            lines.append(f"- {title} [{title}]")
        elif style == "names":
            lines.append(f"{number}. {title}: a notable person in this field")
        else:
            lines.append(f"- {title} (DocTitle: {title})")
    return "\n".join(lines)


class OpenAIStub:
    """``POST /v1/chat/completions`` on ``127.0.0.1:<free port>``.

    ``mode``: ``ok`` answers with one bullet per context title (the paper's format, citing
    each title; as server-sent events when the request asks to stream), ``fail`` answers
    ``status`` with OpenAI's error body (and a ``Retry-After: <retry_after>`` header when
    given), ``hang`` never answers, ``invalid_json`` answers 200 with a body that is not JSON,
    ``no_choices`` answers 200 with a completion lacking ``choices``.
    ``fail_after=n``: the first ``n`` requests are answered, later ones get ``mode``;
    ``fail_times=m``: only ``m`` of them, the rest are answered again (a passing fault).
    ``style`` (:data:`STYLES`) is how an ``ok`` answer cites.
    ``mode`` may be changed while the server runs (a server that recovers keeps its address).
    ``on_request(number)`` is called as each request arrives (1-based), before any reply.
    Every request body is kept in :attr:`requests` (its headers, lowercased, in :attr:`headers`).
    """

    def __init__(
        self,
        mode: str = "ok",
        *,
        status: int = 500,
        fail_after: int = 0,
        fail_times: int | None = None,
        retry_after: str | None = None,
        hang_seconds: float = 30.0,
        on_request: Callable[[int], None] | None = None,
        style: str = "doctitle",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if style not in STYLES:
            raise ValueError(f"style must be one of {STYLES}, got {style!r}")
        self.style = style
        self.mode, self.status, self.fail_after = mode, status, fail_after
        self.fail_times, self.retry_after, self.on_request = fail_times, retry_after, on_request
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

    def _reply(self, body: dict[str, Any]) -> tuple[int, Any]:
        """``(status, payload)``; ``payload`` None: hold the request, answer nothing; bytes:
        send as they are."""
        with self._lock:
            self.requests.append(body)
            number = len(self.requests)
        if self.on_request is not None:
            self.on_request(number)
        failing = number > self.fail_after and (
            self.fail_times is None or number <= self.fail_after + self.fail_times
        )
        if self.mode != "ok" and failing:
            if self.mode == "hang":
                return 0, None
            if self.mode == "invalid_json":
                return 200, b'{"id": "chatcmpl-stub", "choices": [{'
            if self.mode == "no_choices":
                return 200, {"id": f"chatcmpl-stub-{number}", "object": "chat.completion"}
            error = {"message": "the stub failed on purpose", "type": "server_error"}
            return self.status, {"error": error}
        prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        titles = TITLE_LINE.findall(prompt)
        style = ROTATION[(number - 1) % 3] if self.style == "rotate" else self.style
        bullets = styled_bullets(titles, style)
        if body.get("stream"):
            return 200, [self._chunk(number, body, {"role": "assistant", "content": ""})] + [
                self._chunk(number, body, {"content": line + "\n"}) for line in bullets.splitlines()
            ]
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

    @staticmethod
    def _chunk(number: int, body: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-stub-{number}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
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
                if isinstance(payload, list):  # server-sent events, then [DONE]
                    events = [f"data: {json.dumps(chunk)}\n\n" for chunk in payload]
                    data = "".join([*events, "data: [DONE]\n\n"]).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                if status != 200 and stub.retry_after is not None:
                    self.send_header("Retry-After", stub.retry_after)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the test asserts on what it needs

        return Handler

"""A local server speaking the MediaWiki Action API's TextExtracts query, for testing the real
HTTP path of ``fairrag_study.wikipedia``.

``GET /w/api.php?action=query&prop=extracts&explaintext=1&exintro=1&redirects=1&format=json
&formatversion=2&titles=A|B`` is answered as Wikipedia answers it (formatversion 2): the
``normalized`` titles (underscores to spaces, first letter upper-cased), the ``redirects``
followed, ``pages`` with their ``extract``, ``missing`` or ``invalid`` (listed in reverse title
order, so that a client cannot map them back by position), and ``continue`` when it is told to
send only a few extracts per response. It can fail as told: ``maxlag`` errors with
``Retry-After``, HTTP 429/503 with ``Retry-After``, HTTP 500, or every request after the first
``n``. Like Wikimedia's servers it gzips its answers for clients that accept gzip. It binds
127.0.0.1 on a free port, runs in a thread, and counts requests.

It can also answer as a hostile server would (:meth:`MediaWikiStub.misbehave`): trickling a
valid answer a byte at a time, a gzip bomb, a body of any size; each bounded, so a client
without defences ends too (late, or with the whole body in memory).
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections import deque
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

INVALID_CHARACTERS = "<>[]{}"
REQUIRED = {
    "action": "query",
    "prop": "extracts",
    "explaintext": "1",
    "exintro": "1",
    "redirects": "1",
    "format": "json",
    "formatversion": "2",
}


def normalize(title: str) -> str:
    """MediaWiki's title normalisation, as far as the tests need it."""
    name = " ".join(title.replace("_", " ").split())
    return name[:1].upper() + name[1:]


class MediaWikiStub:
    """``/w/api.php`` on ``127.0.0.1:<free port>``.

    ``articles``: page title -> plain-text extract; ``redirects``: page title -> target title.
    ``batch_limit``: more titles in one request get the API's ``toomanyvalues`` error.
    ``per_response``: at most that many extracts per response, the rest through ``continue``.
    :meth:`fail` queues failures for the next requests; ``fail_after=n`` answers the first
    ``n`` requests and fails every later one with HTTP ``fail_status`` (until
    ``fail_after`` is set to None). Every request's query (:attr:`requests`) and lowercased
    headers (:attr:`headers`) are kept.
    """

    def __init__(
        self,
        articles: Mapping[str, str],
        redirects: Mapping[str, str] | None = None,
        *,
        batch_limit: int = 20,
        per_response: int | None = None,
        fail_after: int | None = None,
        fail_status: int = 500,
    ) -> None:
        self.articles = dict(articles)
        self.redirects = dict(redirects or {})
        self.batch_limit, self.per_response = batch_limit, per_response
        self.fail_after, self.fail_status = fail_after, fail_status
        self.requests: list[dict[str, str]] = []
        self.headers: list[dict[str, str]] = []
        self.hostile: tuple[str, dict[str, Any]] | None = None
        self.sent: list[int] = []
        """Bytes of each hostile answer written before it ended or the client hung up."""
        self._failures: deque[tuple[str, int | str | None]] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/w/api.php"

    def fail(self, kind: str, times: int = 1, retry_after: int | str | None = None) -> None:
        """The next ``times`` requests fail: ``maxlag`` (HTTP 200, the API's error), ``429``,
        ``503`` or ``500`` (HTTP status), with ``Retry-After: retry_after`` when given; ``ok``
        answers them normally (to place later failures further along)."""
        if kind not in ("maxlag", "429", "503", "500", "ok"):
            raise ValueError(f"kind must be maxlag, 429, 503, 500 or ok, got {kind!r}")
        with self._lock:
            self._failures.extend([(kind, retry_after)] * times)

    def misbehave(self, kind: str | None, **how: Any) -> None:
        """Every later request gets a hostile answer (``kind=None``: normal answers again):

        - ``trickle``: the normal answer (not gzipped), one byte every ``interval`` seconds
          (0.2) for its first ``limit`` bytes (40), then the rest at once; from the status
          line on with ``where="headers"``, else from the body's first byte;
        - ``gzip-bomb``: HTTP 200, ``Content-Encoding: gzip``, ``members`` gzip members each
          inflating to 1 MiB of zeros (about 1 KiB each on the wire), with its length;
        - ``huge``: HTTP 200, JSON content type, a body of ``size`` bytes sent in 64 KiB writes,
          ended by closing the connection, or with ``Content-Length`` when ``declare=True``.
        """
        if kind not in ("trickle", "gzip-bomb", "huge", None):
            raise ValueError(f"kind must be trickle, gzip-bomb, huge or None, got {kind!r}")
        self.hostile = None if kind is None else (kind, how)

    def hostile_sent(self, answers: int, within: float = 10.0) -> list[int]:
        """:attr:`sent` once ``answers`` hostile answers have ended (a handler notices that the
        client hung up at its next write), waiting at most ``within`` seconds."""
        waited = 0.0
        while len(self.sent) < answers and waited < within:
            time.sleep(0.05)
            waited += 0.05
        return list(self.sent)

    def titles_asked(self) -> list[str]:
        """Every title requested, in order (a title asked twice appears twice)."""
        return [t for r in self.requests if "excontinue" not in r for t in r["titles"].split("|")]

    def __enter__(self) -> MediaWikiStub:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def _reply(self, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        """``(status, headers, JSON payload or text)``."""
        with self._lock:
            self.requests.append(query)
            number = len(self.requests)
            failure = self._failures.popleft() if self._failures else None
            if failure is None and self.fail_after is not None and number > self.fail_after:
                failure = (str(self.fail_status), None)
        if failure is not None and failure[0] != "ok":
            kind, wait = failure
            headers = {} if wait is None else {"Retry-After": str(wait)}
            if kind == "maxlag":
                headers["X-Database-Lag"] = "7"
                info = "Waiting for 10.64.16.8: 7 seconds lagged."
                return 200, headers, {"error": {"code": "maxlag", "info": info, "lag": 7}}
            return int(kind), headers, "<html><body>stub failure</body></html>"
        for key, value in REQUIRED.items():
            if query.get(key) != value:
                info = f"the stub needs {key}={value}, got {query.get(key)!r}"
                return 200, {}, {"error": {"code": "badvalue", "info": info}}
        titles = query.get("titles", "").split("|")
        if len(titles) > self.batch_limit:
            limit = self.batch_limit
            info = f'Too many values supplied for parameter "titles". The limit is {limit}.'
            return 200, {}, {"error": {"code": "toomanyvalues", "info": info}}
        return 200, {}, self._answer(titles, int(query.get("excontinue", "0")))

    def _answer(self, titles: list[str], offset: int) -> dict[str, Any]:
        normalized, redirects, pages = [], [], {}
        for title in titles:
            if not title.strip() or any(c in title for c in INVALID_CHARACTERS):
                reason = f'The requested page title contains invalid characters: "{title}".'
                pages[title] = {"title": title, "invalidreason": reason, "invalid": True}
                continue
            name = normalize(title)
            if name != title:
                normalized.append({"fromencoded": False, "from": title, "to": name})
            if name in self.redirects:
                redirects.append({"from": name, "to": self.redirects[name]})
                name = self.redirects[name]
            if name in self.articles:
                pages[name] = {"pageid": 1000 + len(pages), "ns": 0, "title": name}
            else:
                pages[name] = {"ns": 0, "title": name, "missing": True}
        present = sorted(name for name, page in pages.items() if "pageid" in page)
        limit = len(present) if self.per_response is None else self.per_response
        for name in present[offset : offset + limit]:
            pages[name]["extract"] = self.articles[name]
        payload: dict[str, Any] = {"batchcomplete": True}
        if offset + limit < len(present):
            payload = {"continue": {"excontinue": offset + limit, "continue": "||"}}
        query: dict[str, Any] = {}
        if normalized:
            query["normalized"] = normalized
        if redirects:
            query["redirects"] = redirects
        query["pages"] = [pages[name] for name in sorted(pages, reverse=True)]
        payload["query"] = query
        return payload

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlparse(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
                with stub._lock:
                    stub.headers.append({k.lower(): v for k, v in self.headers.items()})
                if stub.hostile is not None:
                    written = [0]
                    try:
                        self._hostile(query, *stub.hostile, written)
                    except OSError:
                        pass  # the client hung up: what it refused to wait for or to hold
                    finally:
                        self.close_connection = True
                        with stub._lock:
                            stub.sent.append(written[0])
                    return
                if parts.path != "/w/api.php":
                    status, headers, payload = 404, {}, "no such page"
                else:
                    status, headers, payload = stub._reply(query)
                if isinstance(payload, str):
                    data, kind = payload.encode(), "text/html; charset=utf-8"
                else:
                    data, kind = json.dumps(payload).encode(), "application/json; charset=utf-8"
                if "gzip" in self.headers.get("Accept-Encoding", ""):
                    data = gzip.compress(data)
                    headers = {**headers, "Content-Encoding": "gzip"}
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _write(self, data: bytes, written: list[int]) -> None:
                self.wfile.write(data)
                self.wfile.flush()
                written[0] += len(data)

            def _hostile(
                self, query: dict[str, str], kind: str, how: dict[str, Any], written: list[int]
            ) -> None:
                if kind == "trickle":
                    _, _, payload = stub._reply(query)
                    body = json.dumps(payload).encode()
                    head = (
                        "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n"
                    ).encode()
                    slow = head + body if how.get("where") == "headers" else body
                    if how.get("where") != "headers":
                        self._write(head, written)
                    limit, interval = how.get("limit", 40), how.get("interval", 0.2)
                    for i in range(min(limit, len(slow))):
                        self._write(slow[i : i + 1], written)
                        time.sleep(interval)
                    self._write(slow[limit:], written)
                    return
                with stub._lock:
                    stub.requests.append(query)
                if kind == "gzip-bomb":
                    member = gzip.compress(bytes(2**20), compresslevel=9)
                    members = int(how.get("members", 2048))
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json; charset=utf-8")
                    self.send_header("Content-Encoding", "gzip")
                    self.send_header("Content-Length", str(len(member) * members))
                    self.end_headers()
                    for _ in range(members):
                        self._write(member, written)
                    return
                size = int(how.get("size", 2**20))
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                if how.get("declare"):
                    self.send_header("Content-Length", str(size))
                self.end_headers()
                self._write(b'{"batchcomplete": true, "padding": "', written)
                chunk = b"x" * 65536
                while written[0] < size:
                    self._write(chunk[: size - written[0]], written)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the tests assert on what they need

        return Handler

"""Wikipedia article text for the study (``fairrag study --text wikipedia``; docs/SPEC.md,
"Document text from Wikipedia").

The paper embedded the first 100 words of each person's cleaned Wikipedia article. This module
fetches each title's plain-text lead section through the MediaWiki Action API (TextExtracts:
``action=query&prop=extracts&explaintext=1&exintro=1``), at most :data:`BATCH_LIMIT` titles per
request, following ``continue`` and mapping the answer back to the requested titles through the
API's ``normalized``, ``converted`` and ``redirects`` lists. Every answer is appended to an
on-disk cache (one JSON-lines file per API address, one line per title) as each batch arrives:
an interrupted fetch resumes where it stopped and a second run sends no request. Missing pages
and invalid titles are cached as such; transport errors and refusals are not (retried on the
next run).

Requests are serial, carry a descriptive User-Agent (Wikimedia's User-Agent policy),
``maxlag=5``, and honour ``maxlag`` errors and HTTP 429/503 ``Retry-After``, with bounded
retries and a bounded total wait; an API that stays unavailable raises
:class:`~fairrag_study.errors.WikipediaUnavailableError` naming the address and what to do.

Whatever a server sends is read in bounded time and memory: each request has one deadline for
connecting, the headers and the whole body (:data:`DEADLINE`), the body is capped on the wire
(:data:`MAX_BODY`) and, gzip-decoded as it arrives, once decoded (:data:`MAX_DECODED`); an
extract is cut to :data:`MAX_EXTRACT` characters before it is cached, and a cache line longer
than :data:`MAX_CACHE_LINE` is skipped without being read whole.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import email.utils
import fcntl
import functools
import hashlib
import json
import os
import re
import time
import zlib
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

from .data import CorpusDocument
from .errors import WikipediaError, WikipediaUnavailableError

__all__ = [
    "BATCH_LIMIT",
    "DEADLINE",
    "DEFAULT_API",
    "MAX_BODY",
    "MAX_CACHE_LINE",
    "MAX_DECODED",
    "MAX_EXTRACT",
    "TEXT_SOURCES",
    "WORDS",
    "Article",
    "ArticleCache",
    "Fetched",
    "article_text",
    "cache_path",
    "clean_extract",
    "default_user_agent",
    "fetch_articles",
    "first_words",
    "with_article_text",
]

DEFAULT_API = "https://en.wikipedia.org/w/api.php"
"""The English Wikipedia's Action API (``--wikipedia-api`` replaces it, e.g. with a mirror)."""
TEXT_SOURCES = ("csv", "wikipedia")
"""Where a document's text comes from: the CSV's text column, or the person's article."""
BATCH_LIMIT = 20
"""Titles per request: TextExtracts returns at most 20 extracts per request (``exlimit``, 1 to
20, and more than one only with ``exintro``)."""
WORDS = 100
"""Words of the cleaned article kept as the document's text (the paper's first 100 words)."""
MAXLAG = 5
"""Seconds of database replication lag above which Wikimedia asks clients to wait (``maxlag``)."""
PROJECT_URL = "https://pypi.org/project/fairrag/"
"""Where the User-Agent points Wikimedia's operators (the package's index page)."""
CONTACT_ENV = "FAIRRAG_CONTACT"
"""An e-mail address or user page added to the User-Agent, as Wikimedia's policy asks."""
STATUSES = ("ok", "missing", "invalid")
DEADLINE = 30.0
"""Seconds one request may take in all: connecting, the headers and the whole body (a server
sending a byte now and then is cut off then, not waited for byte by byte)."""
MAX_BODY = 8 * 2**20
"""Bytes of one answer's body on the wire (8 MiB). An answer of 20 lead sections is some tens of
KiB: a larger body is not the TextExtracts API's, and is refused."""
MAX_DECODED = 32 * 2**20
"""Bytes of one answer's body once gzip-decoded (32 MiB), checked as it is decoded: a small
body inflating to gigabytes (a gzip bomb) is refused when it passes this."""
MAX_EXTRACT = 1_000_000
"""Characters of an extract kept (and cached): a longer one is cut to its first 1,000,000. The
longest lead sections are some tens of thousands; the document keeps 100 words."""
MAX_CACHE_LINE = 8 * 2**20
"""Bytes of one cache line read (8 MiB: an extract of :data:`MAX_EXTRACT` characters, escaped,
fits); a longer line is skipped without being read whole, and its title fetched again."""
_GZIP = 16 + zlib.MAX_WBITS

_SEPARATORS = " ;,"
"""What is tidied away just inside a pair of parentheses (with the spaces)."""


def clean_extract(text: str) -> str:
    """An extract cleaned by docs/SPEC.md's rule ("Document text from Wikipedia", Cleaning).

    1. Blank lines and section heading lines (``== Career ==``: a stripped line that starts and
       ends with ``=``) are dropped.
    2. The remaining lines are joined, every run of whitespace (no-break spaces included)
       becomes one space, and the ends are stripped.
    3. Parentheses left behind by removed pronunciations are tidied, until nothing changes:
       separators right after ``(`` or right before ``)`` go (``( ; born 1950)`` ->
       ``(born 1950)``), as do spaces inside the parentheses, and an empty pair goes with the
       spaces before it (``Curie () was`` -> ``Curie was``).

    Step 3 runs in one pass, in time linear in the text however deep the parentheses nest
    (:func:`_tidy_parentheses`).
    """
    lines = (line.strip() for line in text.splitlines())
    kept = " ".join(line for line in lines if line and not _is_heading(line))
    cleaned = " ".join(kept.split())  # str.split: every Unicode space, no-break ones included
    if "(" in cleaned:
        cleaned = _tidy_parentheses(cleaned)
    return " ".join(cleaned.split())


def _is_heading(line: str) -> bool:
    return line.startswith("=") and line.endswith("=")


def _tidy_parentheses(text: str) -> str:
    """Step 3 of :func:`clean_extract` on ``text`` (its spaces collapsed), to its fixed point.

    The fixed point of "tidy every innermost pair ``(...)`` (no parenthesis inside), again and
    again" is reached in one left-to-right pass with a stack of the open pairs: a ``)`` closes
    the latest open ``(``; a pair holding a pair that stays is never innermost, so it is kept
    as it is (and so is every pair around it); any other pair is tidied: ``(; born 1950)`` ->
    ``(born 1950)``, and an emptied pair goes with the space before it. Each character is
    copied at most twice, so the time is linear (the repeated passes took time quadratic in
    the depth: 5.6 s at depth 16,000).
    """
    out: list[str] = []  # single characters, and the tidied pairs as one string each
    opened: list[list[Any]] = []  # per open pair: [its place in out, holds a pair that stays]
    for char in text:
        if char == "(":
            opened.append([len(out), False])
            out.append(char)
        elif char == ")" and opened:
            start, holds_pair = opened.pop()
            if holds_pair:  # never innermost: kept as it is
                out.append(char)
                kept = True
            else:
                inner = "".join(out[start + 1 :]).strip(_SEPARATORS)
                del out[start:]
                kept = bool(inner)
                if kept:
                    out.append(f"({inner})")
                elif out and out[-1] == " ":
                    out.pop()
            if kept and opened:
                opened[-1][1] = True
        else:
            out.append(char)
    return "".join(out)


def first_words(text: str, n: int = WORDS) -> str:
    """The first ``n`` words of ``text`` (maximal runs of non-whitespace), one space apart."""
    return " ".join(text.split()[:n])


def article_text(extract: str, n: int = WORDS) -> str:
    """A document's text from its article: the first ``n`` words of :func:`clean_extract`."""
    return first_words(clean_extract(extract), n)


@dataclass(frozen=True)
class Article:
    """What the API said about one requested title (one line of the cache)."""

    title: str
    """The title as requested (the CSV's)."""
    status: str
    """``ok`` (a page with an extract, possibly empty), ``missing`` or ``invalid``."""
    page: str | None = None
    """The page's own title, after normalisation and redirects (``ok`` only)."""
    extract: str = ""
    """The API's plain-text extract of the page's lead section, as sent (uncleaned)."""
    reason: str | None = None
    """Why the title is invalid, in the API's words."""

    @functools.cached_property
    def text(self) -> str:
        """The document's text: :func:`article_text` of the extract (empty without one)."""
        return article_text(self.extract) if self.status == "ok" else ""

    def problem(self) -> str | None:
        """Why this title gives no document text (``missing page``...), or ``None``."""
        if self.status == "missing":
            return "missing page"
        if self.status == "invalid":
            return f"invalid title ({self.reason})" if self.reason else "invalid title"
        if not self.text:
            return "empty article"
        return None

    def line(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"title": self.title, "status": self.status}
        if self.status == "ok":
            payload.update(page=self.page, extract=self.extract)
        if self.reason:
            payload["reason"] = self.reason
        return payload


def cache_path(cache_dir: Path, api_url: str) -> Path:
    """``<cache>/wikipedia/<host>-<digest of the address>.jsonl``: one file per API address."""
    host = re.sub(r"[^A-Za-z0-9.-]+", "_", urlparse(api_url).netloc) or "api"
    digest = hashlib.sha256(api_url.encode()).hexdigest()[:12]
    return Path(cache_dir) / "wikipedia" / f"{host}-{digest}.jsonl"


class ArticleCache:
    """The articles of one API address on disk: an append-only JSON-lines file.

    Each fetched batch is appended in one write under an exclusive ``flock`` and synced to disk,
    so a crash loses at most the batch in flight; a line torn by a crash is ignored when read
    (its title is fetched again) and the next append starts on a fresh line. A title's last line
    wins.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, Article]:
        """Every title's last readable line. Read a line at a time, each at most
        :data:`MAX_CACHE_LINE` bytes: a longer line (no article is that long) is skipped
        without being held whole, as a torn one is, and its title is fetched again."""
        articles: dict[str, Article] = {}
        try:
            handle = open(self.path, "rb")
        except FileNotFoundError:
            return articles
        with handle:
            while line := handle.readline(MAX_CACHE_LINE + 1):
                if len(line) > MAX_CACHE_LINE:
                    while line and not line.endswith(b"\n"):  # the rest, a MiB at a time
                        line = handle.readline(2**20)
                    continue
                try:
                    payload = json.loads(line)
                except ValueError:
                    continue  # torn by a crash mid-write: fetched again
                article = _article_from_line(payload)
                if article is not None:
                    articles[article.title] = article
        return articles

    def append(self, articles: Sequence[Article]) -> None:
        if not articles:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(
            json.dumps(a.line(), ensure_ascii=False, separators=(",", ":")) + "\n" for a in articles
        ).encode("utf-8")
        with open(self.path, "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                end = handle.seek(0, os.SEEK_END)
                if end:
                    handle.seek(end - 1)
                    if handle.read(1) != b"\n":
                        data = b"\n" + data  # after a torn line
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _article_from_line(payload: object) -> Article | None:
    if not isinstance(payload, dict):
        return None
    title, status = payload.get("title"), payload.get("status")
    if not isinstance(title, str) or status not in STATUSES:
        return None
    extract = payload.get("extract", "")
    page, reason = payload.get("page"), payload.get("reason")
    if not isinstance(extract, str) or (status == "ok" and not isinstance(page, str)):
        return None
    return Article(
        title,
        str(status),
        page if isinstance(page, str) else None,
        extract[:MAX_EXTRACT],
        reason if isinstance(reason, str) else None,
    )


def default_user_agent() -> str:
    """``FairRAG/<version> (<project URL>[; $FAIRRAG_CONTACT]) python-httpx/<version>``.

    Wikimedia's User-Agent policy asks every client for a descriptive agent with a way to
    contact its operator; set ``FAIRRAG_CONTACT`` (an e-mail address or a user page) to add yours.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("fairrag")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree never installed
        ours = "unknown"
    contact = os.environ.get(CONTACT_ENV, "").strip()
    about = f"{PROJECT_URL}; {contact}" if contact else PROJECT_URL
    try:
        client = version("httpx")
    except PackageNotFoundError:  # pragma: no cover - the study extra installs it
        client = "unknown"
    return f"FairRAG/{ours} ({about}) python-httpx/{client}"


@dataclass
class Fetched:
    """The outcome of :func:`fetch_articles`."""

    articles: dict[str, Article]
    """Every requested title's article (cached or fetched now)."""
    cache: Path
    from_cache: int = 0
    """Titles answered by the cache, without a request."""
    fetched: int = 0
    """Titles fetched now (and appended to the cache)."""
    requests: int = 0
    """HTTP requests sent, retries included."""
    waited: float = 0.0
    """Seconds slept before retries (``Retry-After`` and back-off)."""


class _Retry(Exception):
    """A failed attempt that may succeed later: ``wait`` seconds asked by the server, or None."""

    def __init__(self, what: str, wait: float | None) -> None:
        super().__init__(what)
        self.what, self.wait = what, wait


_RETRY_STATUSES = {429, 500, 502, 503, 504}
_RETRY_CODES = {"maxlag", "ratelimited", "readonly"}


class _Client:
    """Serial requests to one Action API (httpx) with bounded retries and a bounded total wait."""

    def __init__(
        self,
        api_url: str,
        *,
        user_agent: str,
        timeout: float,
        max_retries: int,
        max_wait: float,
        sleep: Callable[[float], None],
    ) -> None:
        self.api_url, self.user_agent, self.timeout = api_url, user_agent, timeout
        self.max_retries, self.max_wait, self.sleep = max_retries, max_wait, sleep
        self.requests = 0
        self.waited = 0.0

    def query(self, params: Mapping[str, str], describe: Callable[[str], str]) -> dict[str, Any]:
        """The API's JSON answer, retried on transient failures; ``describe(what)`` words the
        error when the API stays unavailable."""
        last = _Retry("was not asked", None)
        for attempt in range(self.max_retries + 1):
            try:
                return self._answer(*self._attempt(params))
            except _Retry as failure:
                last = failure
            if attempt == self.max_retries:
                break
            wait = last.wait if last.wait is not None else min(2.0**attempt, 60.0)
            if self.waited + wait > self.max_wait:
                raise WikipediaUnavailableError(
                    describe(
                        f"{last.what}; it asked to wait {wait:g} s more, beyond the total wait "
                        f"of {self.max_wait:g} s ({self.waited:g} s waited so far)"
                    )
                )
            self.sleep(wait)
            self.waited += wait
        raise WikipediaUnavailableError(
            describe(
                f"{last.what}, {self.max_retries + 1} attempt{'s' if self.max_retries else ''} "
                f"({self.waited:g} s waited)"
            )
        )

    def _attempt(self, params: Mapping[str, str]) -> tuple[int, Mapping[str, str], bytes]:
        """``(status, headers, body)`` of one request within its deadline; a transport failure
        or a late answer as :class:`_Retry`."""
        import httpx

        self.requests += 1
        late = f"did not send its whole answer within {self.timeout:g} s (one request's deadline)"
        try:
            return _run(self._exchange(params))
        except _TooLarge as exc:
            raise WikipediaError(
                f"the MediaWiki API at {self.api_url} sent {exc}; an answer of "
                f"{BATCH_LIMIT} lead sections is far smaller, so it is not answering as the "
                "TextExtracts API does (refused, and not read further)"
            ) from None
        except _BrokenGzip as exc:
            raise _Retry(f"sent a broken gzip body (HTTP {exc})", None) from None
        except (asyncio.TimeoutError, httpx.TimeoutException):
            raise _Retry(late, None) from None
        except (httpx.TransportError, OSError) as exc:
            raise _Retry(f"could not be reached ({type(exc).__name__}: {exc})", None) from exc

    async def _exchange(self, params: Mapping[str, str]) -> tuple[int, Mapping[str, str], bytes]:
        """One GET, connecting, the headers and the whole body within :attr:`timeout` (the
        request is cancelled then, wherever it is); httpx's proxies and TLS settings."""
        import httpx

        headers = {
            "User-Agent": self.user_agent,
            "Accept": "application/json",
            "Accept-Encoding": "gzip",
        }

        async def exchange() -> tuple[int, Mapping[str, str], bytes]:
            async with httpx.AsyncClient(
                headers=headers, timeout=self.timeout, follow_redirects=True
            ) as client:
                async with client.stream("GET", self.api_url, params=params) as response:
                    status = response.status_code
                    return status, response.headers, await _read_body(response, status)

        return await asyncio.wait_for(exchange(), self.timeout)

    def _answer(self, status: int, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        """The API's JSON answer; a retryable refusal as :class:`_Retry`, any other answer
        that is not the API's as :class:`WikipediaError`."""
        retry_after = _retry_after(headers.get("Retry-After"))
        payload: Any = None
        try:
            payload = json.loads(body)
        except ValueError:
            pass
        error = payload.get("error") if isinstance(payload, dict) else None
        if isinstance(error, dict) and str(error.get("code", "")) in _RETRY_CODES:
            what = f"answered {error.get('code')}: {str(error.get('info', ''))[:200]}"
            raise _Retry(what, retry_after if retry_after is not None else float(MAXLAG))
        if status in _RETRY_STATUSES:
            raise _Retry(f"answered HTTP {status}", retry_after)
        if status != 200:
            hint = (
                " (Wikimedia refuses clients whose User-Agent breaks its policy; set "
                f"{CONTACT_ENV} to your e-mail address)"
                if status == 403
                else ""
            )
            raise WikipediaError(
                f"the MediaWiki API at {self.api_url} answered HTTP {status}{hint}: "
                f"{body[:200].decode('utf-8', 'replace')}"
            )
        if not isinstance(payload, dict):
            raise WikipediaError(
                f"{self.api_url} did not answer with MediaWiki API JSON (content type "
                f"{headers.get('Content-Type')!r}); --wikipedia-api must be an Action API "
                "endpoint such as https://en.wikipedia.org/w/api.php"
            )
        if isinstance(error, dict):
            raise WikipediaError(
                f"the MediaWiki API at {self.api_url} refused the request: "
                f"{error.get('code')}: {str(error.get('info', ''))[:300]}"
            )
        return payload


_T = TypeVar("_T")


def _run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coroutine`` to its end from synchronous code, in a thread of its own when this
    one already runs an event loop (a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(1) as worker:
        return worker.submit(asyncio.run, coroutine).result()


class _TooLarge(Exception):
    """An answer past :data:`MAX_BODY` on the wire or :data:`MAX_DECODED` decoded."""


class _BrokenGzip(Exception):
    """A gzip body that does not decode (its HTTP status is the message)."""


async def _read_body(response: Any, status: int) -> bytes:
    """The body, read as it arrives on the wire (``aiter_raw``) and gzip-decoded by
    :class:`_Inflater` when the server says it is gzip: at most :data:`MAX_BODY` bytes are read
    and :data:`MAX_DECODED` decoded, else :class:`_TooLarge` (before reading anything when
    ``Content-Length`` is over the cap). httpx's own decoder is not used: it inflates a whole
    network read at once and stops at a gzip file's first member."""
    declared = (response.headers.get("Content-Length") or "").strip()
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise _TooLarge(f"a body of {int(declared):,} bytes (more than {MAX_BODY:,})")
    gzipped = (response.headers.get("Content-Encoding") or "").strip().lower() == "gzip"
    inflate = _Inflater() if gzipped else None
    parts: list[bytes] = []
    received = 0
    async for chunk in response.aiter_raw(65536):
        received += len(chunk)
        if received > MAX_BODY:
            raise _TooLarge(f"a body of more than {MAX_BODY:,} bytes")
        if inflate is None:
            parts.append(chunk)
        else:
            try:
                inflate.feed(chunk)
            except zlib.error:
                raise _BrokenGzip(str(status)) from None
    if inflate is None:
        return b"".join(parts)
    if not inflate.complete():
        raise _BrokenGzip(str(status))
    return b"".join(inflate.parts)


class _Inflater:
    """gzip members decoded as their bytes arrive, a KiB of input at a time (deflate grows a
    KiB into at most about a MiB), so no more than :data:`MAX_DECODED` and one such step is
    ever held."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self._member = zlib.decompressobj(_GZIP)
        self._started = False

    def feed(self, data: bytes) -> None:
        for at in range(0, len(data), 1024):
            piece = data[at : at + 1024]
            while piece:
                if self._member.eof:  # another member (or zero padding) follows the last
                    piece = piece.lstrip(b"\0")
                    if not piece:
                        break
                    self._member = zlib.decompressobj(_GZIP)
                self._started = True
                out = self._member.decompress(piece)
                self.size += len(out)
                if self.size > MAX_DECODED:
                    raise _TooLarge(f"a body decoding to more than {MAX_DECODED:,} bytes (gzip)")
                self.parts.append(out)
                piece = self._member.unused_data if self._member.eof else b""

    def complete(self) -> bool:
        """Whether every member ended (an empty body counts as none, as ``gzip.decompress``)."""
        return self._member.eof or not self._started


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:  # pragma: no cover - older Pythons
        return None
    return max(0.0, when.timestamp() - time.time())


def _sendable(title: str) -> str | None:
    """Why ``title`` cannot be asked for at all (empty, or holding the ``|`` separator)."""
    if not title.strip():
        return "empty title"
    if "|" in title or "\x1f" in title:
        return "the title contains '|'"
    return None


def fetch_articles(
    titles: Iterable[str],
    *,
    cache_dir: Path,
    api_url: str = DEFAULT_API,
    batch_size: int = BATCH_LIMIT,
    timeout: float = DEADLINE,
    max_retries: int = 5,
    max_wait: float = 600.0,
    sleep: Callable[[float], None] = time.sleep,
    user_agent: str | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> Fetched:
    """Every title's :class:`Article`, from the cache or from the API (docs/SPEC.md, "Document
    text from Wikipedia": Fetching, Cache, Requests).

    Titles not in the cache are asked for ``batch_size`` (at most :data:`BATCH_LIMIT`) at a
    time, in the order given, each batch appended to the cache as it arrives. ``on_batch(n)``
    (a progress bar's ``update``) is called first with the titles settled without a request,
    then after each batch with the titles it settled. A failed request is retried up to
    ``max_retries`` times, after the server's ``Retry-After`` (``maxlag`` errors, HTTP 429 and
    503) or a back-off of 1, 2, 4... s (at most 60 s; HTTP 500, 502, 504, transport errors);
    ``max_wait`` bounds the seconds slept over the whole fetch. Then
    :class:`WikipediaUnavailableError` names the address, the failure and how much is cached;
    an answer that is not the API's (another HTTP status, another error code, not JSON, a body
    past :data:`MAX_BODY` or :data:`MAX_DECODED`) raises :class:`WikipediaError` at once.
    ``timeout`` is each request's deadline (:data:`DEADLINE`): connecting, the headers and the
    whole body together; a request past it counts as a failed attempt (a transport error).
    """
    _check_fetch_arguments(api_url, batch_size, timeout, max_retries, max_wait)
    wanted = list(dict.fromkeys(titles))
    cache = ArticleCache(cache_path(cache_dir, api_url))
    result = Fetched({}, cache.path)
    todo = _settle_without_request(wanted, cache.load(), result)
    if on_batch is not None and len(wanted) > len(todo):
        on_batch(len(wanted) - len(todo))
    client = _Client(
        api_url,
        user_agent=user_agent or default_user_agent(),
        timeout=timeout,
        max_retries=max_retries,
        max_wait=max_wait,
        sleep=sleep,
    )
    try:
        for start in range(0, len(todo), batch_size):
            describe = functools.partial(
                _unavailable, api_url, result.from_cache + start, wanted, cache
            )
            articles = _fetch_batch(client, todo[start : start + batch_size], describe)
            cache.append(articles)
            result.articles.update((article.title, article) for article in articles)
            result.fetched += len(articles)
            if on_batch is not None:
                on_batch(len(articles))
    finally:
        result.requests, result.waited = client.requests, client.waited
    return result


def _check_fetch_arguments(
    api_url: str, batch_size: int, timeout: float, max_retries: int, max_wait: float
) -> None:
    """A ``ValueError`` naming the first argument of :func:`fetch_articles` out of range."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise ValueError(f"batch_size must be an integer 1 to {BATCH_LIMIT}, got {batch_size!r}")
    if not 1 <= batch_size <= BATCH_LIMIT:
        raise ValueError(f"batch_size must be an integer 1 to {BATCH_LIMIT}, got {batch_size!r}")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
    if not (timeout > 0 and max_wait >= 0):
        raise ValueError(
            f"timeout must be > 0 and max_wait >= 0 seconds, got {timeout!r} and {max_wait!r}"
        )
    parts = urlparse(api_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"api_url {api_url!r} is not accepted; expected an http:// or https:// address of "
            f"a MediaWiki Action API such as {DEFAULT_API}"
        )


def _settle_without_request(
    wanted: Sequence[str], cached: Mapping[str, Article], result: Fetched
) -> list[str]:
    """Put into ``result`` the titles the cache answers and those no request could (invalid);
    the others, in order, to fetch."""
    todo: list[str] = []
    for title in wanted:
        if title in cached:
            result.articles[title] = cached[title]
            result.from_cache += 1
        elif (reason := _sendable(title)) is not None:
            result.articles[title] = Article(title, "invalid", reason=reason)
        else:
            todo.append(title)
    return todo


def _unavailable(
    api_url: str, cached: int, wanted: Sequence[str], cache: ArticleCache, what: str
) -> str:
    """The error of an API that stays unavailable, with ``cached`` titles already cached."""
    return (
        f"the MediaWiki API at {api_url} is unavailable: it {what}. "
        f"{cached} of {len(wanted)} titles are cached in "
        f"{cache.path}; run again later to fetch only the rest, or pass "
        "--wikipedia-api with another Action API address (--text csv needs no "
        "network)"
    )


def _fetch_batch(
    client: _Client, batch: Sequence[str], describe: Callable[[str], str]
) -> list[Article]:
    """One batch's articles, following ``continue`` until the API has sent every extract."""
    params = {
        "action": "query",
        "format": "json",
        "formatversion": "2",
        "prop": "extracts",
        "exintro": "1",
        "explaintext": "1",
        "exsectionformat": "wiki",
        "exlimit": str(BATCH_LIMIT),
        "redirects": "1",
        "maxlag": str(MAXLAG),
        "titles": "|".join(batch),
    }
    maps: dict[str, dict[str, str]] = {"normalized": {}, "converted": {}, "redirects": {}}
    interwiki: set[str] = set()
    pages: dict[str, dict[str, Any]] = {}
    more: dict[str, str] = {}
    for _ in range(2 * len(batch) + 2):  # each round sends at least one extract
        payload = client.query({**params, **more}, describe)
        query = payload.get("query")
        if not isinstance(query, dict):
            query = {}
        for key, mapping in maps.items():
            for entry in query.get(key) or ():
                if isinstance(entry, dict) and "from" in entry and "to" in entry:
                    mapping[str(entry["from"])] = str(entry["to"])
        for entry in query.get("interwiki") or ():
            if isinstance(entry, dict) and "title" in entry:
                interwiki.add(str(entry["title"]))
        for page in query.get("pages") or ():
            if isinstance(page, dict) and "title" in page:
                merged = pages.setdefault(str(page["title"]), {})
                merged.update(page)
        go_on = payload.get("continue")
        if not isinstance(go_on, dict):
            break
        more = {str(k): str(v) for k, v in go_on.items()}
    else:
        raise WikipediaError(
            f"the MediaWiki API at {client.api_url} kept asking to continue one batch of "
            f"{len(batch)} titles ({2 * len(batch) + 2} requests): it is not answering as the "
            "TextExtracts API does"
        )
    return [_resolve(title, maps, interwiki, pages) for title in batch]


def _resolve(
    title: str,
    maps: Mapping[str, Mapping[str, str]],
    interwiki: set[str],
    pages: Mapping[str, Mapping[str, Any]],
) -> Article:
    """The article of a requested title: normalised, converted, redirected, then looked up."""
    name = maps["normalized"].get(title, title)
    if title in interwiki or name in interwiki:
        return Article(title, "invalid", reason="interwiki title")
    name = maps["converted"].get(name, name)
    seen = {name}
    while name in maps["redirects"]:
        name = maps["redirects"][name]
        if name in seen:
            break  # a redirect loop: the page below is whatever the API listed
        seen.add(name)
    page = pages.get(name) or pages.get(title)
    if page is None or page.get("missing") or page.get("special"):
        return Article(title, "missing")
    if page.get("invalid"):
        reason = page.get("invalidreason")
        return Article(title, "invalid", reason=str(reason) if reason else None)
    extract = page.get("extract")
    extract = extract[:MAX_EXTRACT] if isinstance(extract, str) else ""
    return Article(title, "ok", page=name, extract=extract)


def with_article_text(
    documents: Sequence[CorpusDocument], articles: Mapping[str, Article]
) -> tuple[list[CorpusDocument], list[tuple[str, str]]]:
    """``(documents with their article's text, (title, problem) of those dropped)``.

    A document keeps its place and metadata and takes :attr:`Article.text` (the first
    :data:`WORDS` words of the cleaned extract) as its text, so it is indexed as
    ``Title: <title>\\n<first 100 words>``. A document whose title has no article (a missing
    page, an invalid title, an article with no text) is dropped, as rows with empty text are.
    """
    kept: list[CorpusDocument] = []
    dropped: list[tuple[str, str]] = []
    for doc in documents:
        article = articles.get(doc.title)
        problem = "not fetched" if article is None else article.problem()
        if article is None or problem is not None:
            dropped.append((doc.title, problem or "not fetched"))
            continue
        kept.append(dataclasses.replace(doc, text=article.text))
    return kept, dropped

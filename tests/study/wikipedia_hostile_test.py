"""The Wikipedia client against a hostile or unlucky server and cache (issue 25): every answer is
read in bounded time and memory, and cleaning is linear in the text however deep its
parentheses nest. The server is the loopback stub (tests/study/mediawiki_stub.py), each hostile
answer bounded so that a client without defences ends too (late, or holding it all)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairrag_study.errors import WikipediaError, WikipediaUnavailableError
from fairrag_study.wikipedia import (
    MAX_BODY,
    MAX_CACHE_LINE,
    MAX_DECODED,
    MAX_EXTRACT,
    ArticleCache,
    cache_path,
    clean_extract,
    fetch_articles,
)
from tests.study.mediawiki_stub import MediaWikiStub

ROOT = Path(__file__).resolve().parents[2]
ARTICLES = {"Ada": "Ada Lovelace (; born 1815) was a mathematician.", "Bo": "Bo sang."}


def _fetch(stub: MediaWikiStub, titles, cache: Path, **kwargs):
    kwargs.setdefault("sleep", lambda seconds: None)
    return fetch_articles(titles, cache_dir=cache, api_url=stub.url, **kwargs)


# --- one deadline per request ---


@pytest.mark.parametrize("where", ["body", "headers"])
def test_a_server_trickling_its_answer_is_cut_off_at_the_requests_deadline(tmp_path, where):
    """A byte every 0.2 s never trips a per-read timeout of 1 s; the request's deadline of 1 s
    (connect, headers and body together) does. The stub trickles 40 bytes (8 s), then sends
    the rest: a client bounding each read only gets the whole answer, late."""
    with MediaWikiStub(ARTICLES) as stub:
        stub.misbehave("trickle", interval=0.2, limit=40, where=where)
        with pytest.raises(WikipediaUnavailableError) as failed:
            _fetch(stub, ["Ada"], tmp_path, timeout=1.0, max_retries=0)
        assert "did not send its whole answer within 1 s (one request's deadline)" in str(
            failed.value
        )
        (written,) = stub.hostile_sent(1)
        assert written < 40 + (0 if where == "headers" else 80)  # hung up mid-trickle

        stub.misbehave(None)  # the next attempt of the same fetch: a retry, then the answer
        got = _fetch(stub, ["Ada"], tmp_path, timeout=1.0)
    assert got.articles["Ada"].extract == ARTICLES["Ada"]


def test_a_timed_out_request_is_retried_like_any_transport_error(tmp_path):
    with MediaWikiStub(ARTICLES) as stub:
        stub.misbehave("trickle", interval=0.2, limit=40)
        with pytest.raises(WikipediaUnavailableError, match=r"2 attempts"):
            _fetch(stub, ["Ada"], tmp_path, timeout=0.5, max_retries=1)
        assert len(stub.hostile_sent(2)) == 2


# --- caps on the body, on the wire and decoded ---


def test_a_body_past_the_cap_is_refused_without_being_read_whole(tmp_path):
    size = 8 * MAX_BODY  # 64 MiB
    with MediaWikiStub(ARTICLES) as stub:
        stub.misbehave("huge", size=size)  # no Content-Length: ends when the server closes
        with pytest.raises(WikipediaError, match=f"sent a body of more than {MAX_BODY:,} bytes"):
            _fetch(stub, ["Ada"], tmp_path)
        stub.misbehave("huge", size=size, declare=True)  # refused from its Content-Length
        with pytest.raises(WikipediaError, match=f"sent a body of {size:,} bytes"):
            _fetch(stub, ["Ada"], tmp_path)
        assert len(stub.requests) == 2  # refused at once, not retried
        sent = stub.hostile_sent(2)
    assert all(written < size / 2 for written in sent), sent  # the client hung up


BOMB = """
import json, resource, sys, tempfile
from pathlib import Path
from fairrag_study.wikipedia import fetch_articles
from tests.study.mediawiki_stub import MediaWikiStub

with open("/proc/self/status") as status:
    used = next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmSize:"))
limit = used + 512 * 2**20  # room for the stub's threads and a few MiB; not for 2 GiB
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
with tempfile.TemporaryDirectory() as cache, MediaWikiStub({"Ada": "Ada."}) as stub:
    stub.misbehave("gzip-bomb", members=2048)  # 2 MiB on the wire, 2 GiB inflated
    try:
        fetch_articles(["Ada"], cache_dir=Path(cache), api_url=stub.url, max_retries=0)
        outcome = "fetched"
    except BaseException as exc:
        outcome = f"{type(exc).__name__}: {exc}"
print(json.dumps({"outcome": outcome, "sent": stub.sent}))
"""


def test_a_gzip_bomb_is_refused_in_bounded_memory():
    """2 MiB of gzip inflating to 2 GiB, fetched by a process allowed 512 MiB more address space
    than it had: decoded as it arrives and refused past the decoded cap (it was inflated whole:
    6.2 GB, or a MemoryError under this limit)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MALLOC_ARENA_MAX": "2"}
    child = subprocess.run(
        [sys.executable, "-c", BOMB], capture_output=True, text=True, timeout=300, env=env
    )
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout.strip().splitlines()[-1])
    assert report["outcome"].startswith("WikipediaError: "), report
    assert f"sent a body decoding to more than {MAX_DECODED:,} bytes (gzip)" in report["outcome"]


# --- caps on an article and on a cache line ---


def test_an_extract_is_cut_before_it_is_cached(tmp_path):
    long = "word " * (MAX_EXTRACT // 4)  # 1.25 million characters
    with MediaWikiStub({"Long": long}) as stub:
        got = _fetch(stub, ["Long"], tmp_path)
    assert got.articles["Long"].extract == long[:MAX_EXTRACT]
    assert len(got.articles["Long"].text.split()) == 100
    line = got.cache.read_bytes()
    assert len(line) < MAX_CACHE_LINE and json.loads(line)["extract"] == long[:MAX_EXTRACT]


def test_a_huge_cache_line_is_skipped_unread_and_its_title_fetched_again(tmp_path):
    """A 40 MiB line (what a bomb left in the cache) is not held whole by a later run: the load
    reads at most MAX_CACHE_LINE bytes of it, skips it, and fetches the title again."""
    with MediaWikiStub(ARTICLES) as stub:
        path = cache_path(tmp_path, stub.url)
        path.parent.mkdir(parents=True)
        huge = {"title": "Ada", "status": "ok", "page": "Ada", "extract": "x" * 5 * MAX_CACHE_LINE}
        bo = {"title": "Bo", "status": "ok", "page": "Bo", "extract": "Bo sang."}
        path.write_text(json.dumps(huge) + "\n" + json.dumps(bo) + "\n", encoding="utf-8")

        tracemalloc.start()
        try:
            cached = ArticleCache(path).load()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert sorted(cached) == ["Bo"]
        assert peak < 3 * MAX_CACHE_LINE  # the whole line (40 MiB) was read, split and parsed

        got = _fetch(stub, ["Ada", "Bo"], tmp_path)
        assert stub.titles_asked() == ["Ada"]
    assert got.articles["Ada"].extract == ARTICLES["Ada"] and got.from_cache == 1
    assert sorted(ArticleCache(path).load()) == ["Ada", "Bo"]  # the fresh line is read next time


# --- cleaning: linear, and the same rule as the repeated passes ---


def _tidied_by_passes(text: str) -> str:
    """The SPEC's rule as written (the code before issue 25): tidy every innermost pair, again
    and again until nothing changes. Quadratic in the depth; the reference here."""
    import re

    innermost = re.compile(r"\(([^()]*)\)")
    lines = (line.strip() for line in text.splitlines())
    kept = " ".join(line for line in lines if line and not (line[0] == line[-1] == "="))
    cleaned, previous = " ".join(kept.split()), None
    while cleaned != previous and "(" in cleaned:
        previous, out, end = cleaned, [], 0
        for match in innermost.finditer(cleaned):
            out.append(cleaned[end : match.start()])
            end = match.end()
            inner = match.group(1).strip(" ;,")
            if inner:
                out.append(f"({inner})")
            elif out[-1].endswith(" "):
                out[-1] = out[-1][:-1]
        out.append(cleaned[end:])
        cleaned = "".join(out)
    return " ".join(cleaned.split())


@given(st.text(alphabet="(( ));,ab\n=", max_size=60))
def _cleans_as_the_repeated_passes(text):
    assert clean_extract(text) == _tidied_by_passes(text)


CLEAN = """
import resource
resource.setrlimit(resource.RLIMIT_CPU, (10, 10))  # seconds of CPU, then SIGXCPU
from fairrag_study.wikipedia import clean_extract
for depth in (50_000, 50_000, 50_000):
    text = "Name " + "( ;" * depth + " " + "; )" * depth + " was a person."
    assert clean_extract(text) == "Name was a person."
    text = "Name " + "( ;" * depth + " x " + "; )" * depth
    assert clean_extract(text) == "Name " + "( ;" * (depth - 1) + "(x)" + "; )" * (depth - 1)
print("cleaned")
"""


def test_deeply_nested_parentheses_clean_in_linear_time():
    """Three extracts nested 50,000 deep, in a process allowed 10 s of CPU: 0.2 s here (the
    repeated passes took 62 s for one, 5.6 s at depth 16,000: quadratic). The one pass gives
    what the repeated passes gave, on any text of parentheses, separators and headings."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.run(
        [sys.executable, "-c", CLEAN], capture_output=True, text=True, timeout=300, env=env
    )
    assert child.returncode == 0 and child.stdout.strip() == "cleaned", (
        child.returncode,
        child.stderr[-500:],
    )
    _cleans_as_the_repeated_passes()  # and the one pass gives what the passes gave

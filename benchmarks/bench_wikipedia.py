"""The Wikipedia text path's own cost, without the network: fetch, re-run from the cache, clean.

Run: ``.venv/bin/python benchmarks/bench_wikipedia.py [--titles N] [--words W]``. The API is the
tests' loopback stub (tests/study/mediawiki_stub.py), so the figures are this code's overhead
(request building, JSON, the append-only cache, cleaning), not Wikipedia's latency: a real
fetch is bounded by the API's answers, one request of 20 titles at a time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' MediaWiki stub (tests/study/mediawiki_stub.py)

from fairrag_study.wikipedia import fetch_articles  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--titles", type=int, default=19466, help="the natural corpus: 19,466")
    parser.add_argument("--words", type=int, default=300, help="words per synthetic lead")
    args = parser.parse_args()
    from tests.study.mediawiki_stub import MediaWikiStub

    titles = [f"Person {i}" for i in range(args.titles)]
    filler = " ".join(f"word{i}" for i in range(args.words))
    articles = {title: f"{title}  (; born 1950) {filler}" for title in titles}
    with tempfile.TemporaryDirectory() as cache, MediaWikiStub(articles) as stub:
        start = time.perf_counter()
        first = fetch_articles(titles, cache_dir=Path(cache), api_url=stub.url)
        fetched = time.perf_counter() - start
        start = time.perf_counter()
        again = fetch_articles(titles, cache_dir=Path(cache), api_url=stub.url)
        rerun = time.perf_counter() - start
        start = time.perf_counter()
        texts = [article.text for article in again.articles.values()]
        cleaned = time.perf_counter() - start
        size = first.cache.stat().st_size / 2**20
    print(f"titles {len(titles)}, {args.words} words each")
    print(f"fetch from the loopback stub: {first.requests} requests, {fetched:.1f} s")
    print(f"re-run from the cache: {again.requests} requests, {rerun:.2f} s ({size:.1f} MiB)")
    print(f"clean and cut to 100 words: {cleaned:.2f} s ({len(texts)} texts)")


if __name__ == "__main__":
    main()

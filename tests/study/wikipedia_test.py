"""``fairrag study --text wikipedia``: article text fetched through the MediaWiki Action API
(against a local stub speaking its protocol), cleaned, truncated, cached and resumable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fairrag_study.data import CorpusDocument
from fairrag_study.errors import WikipediaError, WikipediaUnavailableError
from fairrag_study.wikipedia import (
    BATCH_LIMIT,
    PROJECT_URL,
    WORDS,
    Article,
    ArticleCache,
    article_text,
    cache_path,
    clean_extract,
    fetch_articles,
    first_words,
    with_article_text,
)
from tests.study.mediawiki_stub import MediaWikiStub


def _bio(name: str, words: int = 130) -> str:
    """A lead section: a heading-free opening with a removed pronunciation, then filler."""
    filler = " ".join(f"w{i}" for i in range(words))
    return f"{name}  (; born 1950) was a person.\n\n{filler}"


PEOPLE = [f"Person {i:03d}" for i in range(45)]
ARTICLES = {name: _bio(name) for name in PEOPLE}
ARTICLES["Marie Curie"] = "Marie Salomea Skłodowska-Curie ( ; ) was a physicist and chemist."
REDIRECTS = {"Marie Sklodowska": "Marie Curie", "Old Name": "Nobody Yet"}


class Sleeps(list):
    """An injected ``sleep`` that records instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def _fetch(stub: MediaWikiStub, titles, cache: Path, **kwargs):
    kwargs.setdefault("sleep", Sleeps())
    return fetch_articles(titles, cache_dir=cache, api_url=stub.url, **kwargs)


# --- cleaning and truncation (docs/SPEC.md, "Document text") ---


def test_cleaning_drops_headings_collapses_space_and_tidies_emptied_parentheses():
    extract = (
        "John Edward Masefield  (; 1 June 1878 – 12 May 1967) was an English poet.\n"
        "\n== Early life ==\n"
        "He was born\u00a0in   Ledbury;\tE = mc2 is not a heading.\n"
        "=== Works ===\n"
    )
    assert clean_extract(extract) == (
        "John Edward Masefield (1 June 1878 – 12 May 1967) was an English poet. "
        "He was born in Ledbury; E = mc2 is not a heading."
    )
    assert clean_extract("Marie Curie ( ; ) was a physicist") == "Marie Curie was a physicist"
    assert clean_extract("Ada ( , ; ), a writer") == "Ada, a writer"
    assert clean_extract("Bo (born 1950; ) sang ( listen )") == "Bo (born 1950) sang (listen)"
    assert clean_extract("Al ((;)) ran") == "Al ran"  # nested, emptied: tidied until stable
    assert clean_extract("== Only a heading ==\n\n") == ""


def test_truncation_keeps_the_first_100_words():
    long = " ".join(f"w{i}" for i in range(150))
    assert first_words(long) == " ".join(f"w{i}" for i in range(WORDS))
    assert len(first_words(long).split()) == WORDS == 100
    assert first_words("a  b\nc") == "a b c"  # shorter texts are kept whole
    # Truncation counts the cleaned words: the emptied parentheses are not a word.
    text = article_text("Kim ( ; ) " + " ".join(["x"] * 120))
    assert text.split()[:2] == ["Kim", "x"] and len(text.split()) == 100


def test_documents_take_the_article_text_and_titleless_ones_are_dropped():
    docs = [
        CorpusDocument("1", "Person 001", "csv sentence", "female", ("T",)),
        CorpusDocument("2", "Gone", "csv sentence", "male", ("T",)),
        CorpusDocument("3", "Blank", "csv sentence", "male", ("T",)),
        CorpusDocument("4", "Never asked", "csv sentence", "male", ("T",)),
    ]
    articles = {
        "Person 001": Article("Person 001", "ok", "Person 001", _bio("Person 001")),
        "Gone": Article("Gone", "missing"),
        "Blank": Article("Blank", "ok", "Blank", "== Heading ==\n"),
    }
    kept, dropped = with_article_text(docs, articles)
    assert [d.doc_id for d in kept] == ["1"]
    assert kept[0].page_content.startswith("Title: Person 001\nPerson 001 (born 1950) was")
    assert len(kept[0].page_content.split("\n", 1)[1].split()) == 100
    assert kept[0].metadata() == docs[0].metadata()
    assert dropped == [
        ("Gone", "missing page"),
        ("Blank", "empty article"),
        ("Never asked", "not fetched"),
    ]


# --- the API protocol: batches, normalized titles, redirects, missing and invalid ---


def test_titles_are_fetched_in_batches_and_mapped_back_through_normalized_and_redirects(
    tmp_path,
):
    asked = [
        *PEOPLE,
        "marie_Curie",  # normalized
        "Marie Sklodowska",  # redirected
        "marie_Sklodowska",  # normalized, then redirected
        "Old Name",  # redirected to a missing page
        "Nobody Here",  # missing
        "Bad[title]",  # invalid
    ]
    with MediaWikiStub(ARTICLES, REDIRECTS) as stub:
        got = _fetch(stub, asked, tmp_path)
    assert got.requests == len(stub.requests) == 3  # 51 titles, 20 per request
    sizes = [len(r["titles"].split("|")) for r in stub.requests]
    assert sizes == [20, 20, 11] and max(sizes) <= BATCH_LIMIT
    assert stub.titles_asked() == asked
    a = got.articles
    assert set(a) == set(asked)
    for name in PEOPLE:
        assert (a[name].status, a[name].page, a[name].extract) == ("ok", name, ARTICLES[name])
    for title in ("marie_Curie", "Marie Sklodowska", "marie_Sklodowska"):
        assert (a[title].page, a[title].text) == (
            "Marie Curie",
            "Marie Salomea Skłodowska-Curie was a physicist and chemist.",
        )
    assert a["Old Name"].status == a["Nobody Here"].status == "missing"
    assert a["Bad[title]"].status == "invalid"
    assert "invalid characters" in a["Bad[title]"].problem()
    assert (got.fetched, got.from_cache, got.waited) == (51, 0, 0)


def test_continue_is_followed_until_every_extract_arrived(tmp_path):
    with MediaWikiStub(ARTICLES, per_response=3) as stub:
        got = _fetch(stub, PEOPLE[:10], tmp_path)
    assert len(stub.requests) == 4  # one batch of 10: 3 + 3 + 3 + 1 extracts
    assert [r.get("excontinue") for r in stub.requests] == [None, "3", "6", "9"]
    assert all(got.articles[name].extract == ARTICLES[name] for name in PEOPLE[:10])


def test_requests_carry_a_descriptive_user_agent(tmp_path, monkeypatch):
    monkeypatch.delenv("FAIRRAG_CONTACT", raising=False)
    with MediaWikiStub(ARTICLES) as stub:
        _fetch(stub, PEOPLE[:2], tmp_path / "a")
        monkeypatch.setenv("FAIRRAG_CONTACT", "someone@example.org")
        _fetch(stub, PEOPLE[2:4], tmp_path / "b")
    first, second = (h["user-agent"] for h in stub.headers)
    assert first.startswith(f"FairRAG/0.1.0 ({PROJECT_URL}) Python-urllib/")
    assert second.startswith(f"FairRAG/0.1.0 ({PROJECT_URL}; someone@example.org) ")
    assert all(r["maxlag"] == "5" for r in stub.requests)


# --- throttling: maxlag, 429, 503, 500, bounded ---


def test_maxlag_and_429_waits_follow_retry_after(tmp_path):
    sleeps = Sleeps()
    with MediaWikiStub(ARTICLES) as stub:
        stub.fail("maxlag", 1, retry_after=3)
        stub.fail("429", 2, retry_after=7)
        got = _fetch(stub, PEOPLE[:5], tmp_path, sleep=sleeps)
    assert sleeps == [3, 7, 7]
    assert (got.requests, got.waited) == (4, 17)
    assert all(got.articles[name].status == "ok" for name in PEOPLE[:5])


def test_failures_without_retry_after_back_off_exponentially(tmp_path):
    sleeps = Sleeps()
    with MediaWikiStub(ARTICLES) as stub:
        stub.fail("500", 1)
        stub.fail("503", 2)
        stub.fail("maxlag", 1)  # maxlag without Retry-After: the maxlag itself, 5 s
        got = _fetch(stub, PEOPLE[:5], tmp_path, sleep=sleeps)
    assert sleeps == [1, 2, 4, 5]
    assert got.articles[PEOPLE[0]].status == "ok"


def test_retries_are_bounded_and_the_error_names_the_api_and_what_to_do(tmp_path):
    sleeps = Sleeps()
    with MediaWikiStub(ARTICLES) as stub:
        stub.fail("503", 10, retry_after=2)
        with pytest.raises(WikipediaUnavailableError) as caught:
            _fetch(stub, PEOPLE[:5], tmp_path, sleep=sleeps, max_retries=3)
        assert len(stub.requests) == 4
    assert sleeps == [2, 2, 2]
    message = str(caught.value)
    assert stub.url in message and "HTTP 503" in message and "4 attempts" in message
    assert "0 of 5 titles are cached" in message and "run again later" in message
    assert not cache_path(tmp_path, stub.url).exists()  # nothing failed is cached


def test_the_total_wait_is_bounded_across_the_whole_fetch(tmp_path):
    sleeps = Sleeps()
    with MediaWikiStub(ARTICLES) as stub:
        stub.fail("429", 1, retry_after=1000)  # more than the whole budget: no wait at all
        with pytest.raises(WikipediaUnavailableError, match="beyond the total wait of 60 s"):
            _fetch(stub, PEOPLE[:5], tmp_path, sleep=sleeps, max_wait=60)
        assert sleeps == [] and len(stub.requests) == 1
        stub.fail("429", 1, retry_after=4)  # batch 1: waits 4
        stub.fail("ok")  # batch 1 arrives
        stub.fail("maxlag", 1, retry_after=4)  # batch 2: waits 4 (8 s in all)
        stub.fail("503", 1, retry_after=4)  # batch 2 again: 12 s > 10 s, gives up
        with pytest.raises(WikipediaUnavailableError) as caught:
            _fetch(stub, PEOPLE[:40], tmp_path, sleep=sleeps, max_wait=10)
    assert sleeps == [4, 4]
    assert "20 of 40 titles are cached" in str(caught.value)


def test_an_unreachable_api_is_retried_then_a_typed_error(tmp_path):
    with MediaWikiStub(ARTICLES) as stub:
        url = stub.url  # the port is closed once the stub stops
    sleeps = Sleeps()
    with pytest.raises(WikipediaUnavailableError, match="could not be reached") as caught:
        fetch_articles(PEOPLE[:3], cache_dir=tmp_path, api_url=url, sleep=sleeps, max_retries=2)
    assert sleeps == [1, 2] and url in str(caught.value)


def test_answers_that_are_not_the_apis_fail_at_once(tmp_path):
    with MediaWikiStub(ARTICLES) as stub:
        not_api = stub.url.replace("/w/api.php", "/wiki/Main_Page")
        with pytest.raises(WikipediaError, match="answered HTTP 404") as caught:
            fetch_articles(PEOPLE[:3], cache_dir=tmp_path, api_url=not_api, sleep=Sleeps())
        assert not isinstance(caught.value, WikipediaUnavailableError)
        assert len(stub.requests) == 0  # refused before the API's handler: nothing retried
        stub.batch_limit = 10  # an API error other than a wait: not retried
        with pytest.raises(WikipediaError, match="refused the request: toomanyvalues"):
            _fetch(stub, PEOPLE[:30], tmp_path)
        assert len(stub.requests) == 1
    with pytest.raises(ValueError, match="batch_size must be an integer 1 to 20"):
        fetch_articles(["A"], cache_dir=tmp_path, batch_size=21)
    with pytest.raises(ValueError, match="api_url 'ftp://x' is not accepted"):
        fetch_articles(["A"], cache_dir=tmp_path, api_url="ftp://x")


# --- the cache: append-only, resumable, a re-run fetches nothing ---


def test_an_interrupted_fetch_resumes_without_refetching_and_a_rerun_sends_nothing(tmp_path):
    titles = [*PEOPLE, *(f"Missing {i}" for i in range(55))]  # 100 titles: 5 batches
    with MediaWikiStub(ARTICLES, fail_after=2) as stub:
        with pytest.raises(WikipediaUnavailableError, match="40 of 100 titles are cached"):
            _fetch(stub, titles, tmp_path, max_retries=1)
        first = stub.titles_asked()
        assert first[:40] == titles[:40] and len(stub.requests) == 4  # batch 3 tried twice
        cached = ArticleCache(cache_path(tmp_path, stub.url)).load()
        assert sorted(cached) == sorted(titles[:40])  # the failed batch is not cached

        stub.fail_after = None
        stub.requests.clear()
        progress: list[int] = []
        resumed = _fetch(stub, titles, tmp_path, on_batch=progress.append)
        assert stub.titles_asked() == titles[40:]  # only what was not cached
        assert (resumed.from_cache, resumed.fetched, resumed.requests) == (40, 60, 3)
        assert progress == [40, 20, 20, 20]  # the cache first, then each batch

        stub.requests.clear()
        progress.clear()
        again = _fetch(stub, titles, tmp_path, on_batch=progress.append)
        assert stub.requests == [] and again.requests == 0  # a re-run fetches nothing
        assert progress == [100]
    assert (again.from_cache, again.fetched) == (100, 0)
    assert again.articles == resumed.articles
    assert again.articles["Missing 3"].status == "missing"  # cached as missing, not refetched


def test_the_cache_is_keyed_by_api_address(tmp_path):
    with MediaWikiStub(ARTICLES) as one, MediaWikiStub({"Person 000": "Other text."}) as two:
        _fetch(one, ["Person 000"], tmp_path)
        got = _fetch(two, ["Person 000"], tmp_path)
        assert len(two.requests) == 1  # another API: its own cache
    assert got.articles["Person 000"].extract == "Other text."
    assert cache_path(tmp_path, one.url) != cache_path(tmp_path, two.url)


def test_a_line_torn_by_a_crash_is_ignored_and_its_title_fetched_again(tmp_path):
    with MediaWikiStub(ARTICLES) as stub:
        _fetch(stub, PEOPLE[:3], tmp_path)
        path = cache_path(tmp_path, stub.url)
        lines = path.read_bytes().splitlines(keepends=True)
        assert len(lines) == 3 and all(json.loads(line)["status"] == "ok" for line in lines)
        path.write_bytes(b"".join(lines[:2]) + lines[2][:25])  # the last write cut short
        stub.requests.clear()
        got = _fetch(stub, PEOPLE[:3], tmp_path)
        assert stub.titles_asked() == [PEOPLE[2]]
    assert got.articles[PEOPLE[2]].extract == ARTICLES[PEOPLE[2]]
    reread = ArticleCache(path).load()  # the append started on a fresh line
    assert sorted(reread) == PEOPLE[:3]

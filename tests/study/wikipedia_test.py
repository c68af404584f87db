"""``fairrag study --text wikipedia``: article text fetched through the MediaWiki Action API
(against a local stub speaking its protocol), cleaned, truncated, cached and resumable."""

from __future__ import annotations

import asyncio
import json
import re
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
    assert first.startswith(f"FairRAG/0.1.0 ({PROJECT_URL}) python-httpx/")
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


def test_retry_after_may_be_an_http_date(tmp_path):
    sleeps = Sleeps()
    with MediaWikiStub(ARTICLES) as stub:
        stub.fail("503", 1, retry_after="Wed, 21 Oct 2015 07:28:00 GMT")  # past: no wait
        _fetch(stub, PEOPLE[:2], tmp_path, sleep=sleeps)
        stub.fail("429", 1, retry_after="Fri, 01 Jan 2100 00:00:00 GMT")  # far beyond any bound
        with pytest.raises(WikipediaUnavailableError, match="beyond the total wait of 600 s"):
            _fetch(stub, PEOPLE[2:4], tmp_path, sleep=sleeps)
    assert sleeps == [0]
    assert all(h["accept-encoding"] == "gzip" for h in stub.headers)  # answers came gzipped


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


def test_a_fetch_called_inside_a_running_event_loop_completes(tmp_path):
    """The requests run on an event loop of their own (httpx's AsyncClient under one deadline):
    called from code already on a loop (a notebook cell), they run in a thread beside it."""

    async def from_a_notebook_cell(stub: MediaWikiStub):
        return _fetch(stub, PEOPLE[:3], tmp_path)

    with MediaWikiStub(ARTICLES) as stub:
        got = asyncio.run(from_a_notebook_cell(stub))
    assert [got.articles[name].extract for name in PEOPLE[:3]] == [ARTICLES[n] for n in PEOPLE[:3]]


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


# --- the study with --text wikipedia, against the stub ---

TOPIC = "Tennis"


def _tennis_articles():
    """The stub's Wikipedia for the Tennis topic: an article per title, three titles without
    one, and one reached through a redirect."""
    from fairrag_study.data import load_documents
    from tests.chroma_pool import data_path_or_skip

    docs = [d for d in load_documents(data_path_or_skip()) if TOPIC in d.topics]
    women = sorted(d.title for d in docs if d.group == "female")
    missing = women[:3]
    articles = {
        d.title: f"== Lead ==\n{d.title} (; born 1950) STUB-ARTICLE {' '.join(['tennis'] * 150)}"
        for d in docs
        if d.title not in missing
    }
    renamed = women[3]
    articles[f"{renamed} (player)"] = articles.pop(renamed)
    return articles, {renamed: f"{renamed} (player)"}, missing


@pytest.fixture(scope="module")
def wiki_runs(tmp_path_factory):
    """The same small study twice with --text wikipedia, then once with --text csv, one cache."""
    from fairrag_study.study import StudyConfig, run_study
    from tests.chroma_pool import data_path_or_skip

    root = tmp_path_factory.mktemp("wiki-study")
    articles, redirects, missing = _tennis_articles()
    said: list[str] = []
    base = dict(
        data=data_path_or_skip(), topics=(TOPIC,), per_group=4, trials=4,
        rankers=("standard", "representative_stochastic"), llm="none", progress=False,
        cache_dir=root / "cache",
    )  # fmt: skip
    with MediaWikiStub(articles, redirects) as stub:
        wiki = StudyConfig(**base, out=root / "wiki", text="wikipedia", wikipedia_api=stub.url)
        first = run_study(wiki, said.append)
        first_requests = len(stub.requests)
        stub.requests.clear()
        second = run_study(wiki, said.append)
        second_requests = len(stub.requests)
    csv_run = run_study(StudyConfig(**base, out=root / "csv"), said.append)
    return {
        "root": root, "articles": articles, "missing": missing, "said": said,
        "runs": (first, second, csv_run), "requests": (first_requests, second_requests),
    }  # fmt: skip


def _index_documents(folder: Path) -> list[str]:
    import chromadb

    from fairrag_study.phases.index import COLLECTION

    client = chromadb.PersistentClient(path=str(folder))
    try:
        return client.get_collection(COLLECTION).get(include=["documents"])["documents"]
    finally:
        client.close()


def test_the_study_indexes_the_stubs_article_text_in_its_own_folder(wiki_runs):
    folders = sorted((wiki_runs["root"] / "cache" / "index").iterdir())
    wiki = [f for f in folders if "-wikipedia-" in f.name]
    csv = [f for f in folders if "-wikipedia-" not in f.name]
    assert len(wiki) == len(csv) == 1 and wiki[0].name.startswith("balanced-wikipedia-")
    texts = _index_documents(wiki[0])
    assert len(texts) == 8  # 4 per group
    for text in texts:
        title, body = text.split("\n", 1)
        assert title.startswith("Title: ") and title[7:] not in wiki_runs["missing"]
        assert body.startswith(f"{title[7:]} (born 1950) STUB-ARTICLE tennis")
        assert len(body.split()) == 100
    assert not any("STUB-ARTICLE" in text for text in _index_documents(csv[0]))


def test_titles_without_an_article_are_dropped_listed_and_counted(wiki_runs):
    out = wiki_runs["root"] / "wiki"
    listed = (out / "wikipedia_missing.txt").read_text(encoding="utf-8").splitlines()
    assert listed == [f"{title}\tmissing page" for title in wiki_runs["missing"]]
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "- titles without a Wikipedia article (dropped): `3 (wikipedia_missing.txt)`" in report
    assert "- document text: `wikipedia: the first 100 words" in report
    csv_report = (wiki_runs["root"] / "csv" / "report.md").read_text(encoding="utf-8")
    assert "- document text: `csv: 'first sentence'`" in csv_report
    assert "titles without a Wikipedia article" not in csv_report
    # The report's "Differences from the paper" reads the same config line.
    assert "the paper's source" in report and "the paper's source" not in csv_report
    assert not (wiki_runs["root"] / "csv" / "wikipedia_missing.txt").exists()
    said = "\n".join(wiki_runs["said"])
    assert "wikipedia: 498 of 501 documents have an article (501 fetched now in 26 requests" in said
    assert "3 without one dropped" in said
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "complete" and run["config"]["text"] == "wikipedia"


def test_a_second_run_fetches_and_embeds_nothing(wiki_runs):
    first, second, _ = wiki_runs["runs"]
    assert wiki_runs["requests"] == (26, 0)  # 501 titles, 20 per request; then none
    assert (first.index_added, second.index_added) == (8, 0)
    assert [r["doc_ids"] for r in first.records] == [r["doc_ids"] for r in second.records]
    said = "\n".join(wiki_runs["said"])
    assert "(0 fetched now in 0 requests, 501 from the cache" in said


def _tennis_csv(path: Path, title=lambda row: row["doc_title"]) -> Path:
    """The Tennis rows relabelled into three regions (the data set seam's own CSV)."""
    import csv
    import hashlib

    from tests.chroma_pool import data_path_or_skip

    with open(data_path_or_skip(), newline="", encoding="utf-8") as source:
        rows = [row for row in csv.DictReader(source) if row["q_text"] == TOPIC]
    with open(path, "w", newline="", encoding="utf-8") as target:
        columns = ["q_text", "doc_id", "region", "doc_title", "first sentence"]
        writer = csv.DictWriter(target, columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            region = "abc"[hashlib.sha256(row["doc_id"].encode()).digest()[0] % 3]
            writer.writerow({**row, "region": region, "doc_title": title(row)})
    return path


def test_another_data_set_takes_article_text_by_its_title_column(tmp_path):
    from fairrag_study.dataset import custom_dataset
    from fairrag_study.study import StudyConfig, run_study

    articles, redirects, _ = _tennis_articles()
    dataset = custom_dataset({"a": 0.4, "b": 0.3, "c": 0.3}, group_key="region")
    base = dict(
        data=_tennis_csv(tmp_path / "mine.csv"), dataset=dataset, per_group=3, trials=4,
        rankers=("standard",), llm="none", progress=False, cache_dir=tmp_path / "cache",
        text="wikipedia",
    )  # fmt: skip
    with MediaWikiStub(articles, redirects) as stub:
        run_study(StudyConfig(**base, out=tmp_path / "out", wikipedia_api=stub.url), print)
    (folder,) = (tmp_path / "cache" / "index").iterdir()
    assert folder.name.startswith("balanced-custom-") and "-wikipedia-" in folder.name
    texts = _index_documents(folder)
    assert len(texts) == 9 and all("STUB-ARTICLE" in text for text in texts)

    # A title column holding no titles cannot name articles: refused, saying why.
    blank = _tennis_csv(tmp_path / "blank.csv", title=lambda row: "")
    with pytest.raises(ValueError, match="title column 'doc_title' is empty for every document"):
        run_study(StudyConfig(**{**base, "data": blank}, out=tmp_path / "blank-out"), print)


def test_the_flags_and_the_configuration_are_checked_before_any_work(tmp_path, capsys):
    from fairrag_study.cli import build_parser, main
    from fairrag_study.study import StudyConfig, run_study
    from fairrag_study.wikipedia import DEFAULT_API

    out = ["--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")]
    cases = [
        (["--text", "html"], "argument --text: invalid choice: 'html'"),
        (["--wikipedia-api", "http://127.0.0.1:9/w/api.php"], "only used with --text wikipedia"),
        (["--text", "wikipedia", "--wikipedia-api", "ftp://x"], "expected an http:// or https://"),
    ]
    for flags, words in cases:
        with pytest.raises(SystemExit) as exited:
            main(["study", *flags, *out])
        assert exited.value.code == 2
        assert words in capsys.readouterr().err
    parsed = build_parser().parse_args(["study"])
    assert (parsed.text, parsed.wikipedia_api) == ("csv", None)
    assert (StudyConfig().text, StudyConfig().wikipedia_api) == ("csv", DEFAULT_API)
    for field, value, words in [
        ("text", "html", "text must be one of ['csv', 'wikipedia'], got 'html'"),
        ("wikipedia_api", "en.wikipedia.org", "wikipedia_api must be an http:// or https://"),
    ]:
        with pytest.raises(ValueError, match=re.escape(words)):  # when the config is made
            run_study(
                StudyConfig(out=tmp_path / "out", cache_dir=tmp_path / "cache", **{field: value})
            )
    assert not (tmp_path / "out").exists()


def test_an_api_that_fails_ends_the_study_with_exit_2_and_the_reason(tmp_path, capsys):
    from fairrag_study.cli import main
    from tests.chroma_pool import data_path_or_skip

    args = [
        "study", "--data", str(data_path_or_skip()), "--topics", TOPIC, "--per-group", "2",
        "--trials", "2", "--llm", "none", "--text", "wikipedia", "--no-progress",
        "--cache-dir", str(tmp_path / "cache"),
    ]  # fmt: skip
    with MediaWikiStub({}) as stub:
        stub.fail("503", 10, retry_after=0)  # no wait, so the test does not sleep
        code = main([*args, "--out", str(tmp_path / "a"), "--wikipedia-api", stub.url])
        assert code == 2 and len(stub.requests) == 6  # 1 + 5 retries
        err = capsys.readouterr().err
        assert f"the MediaWiki API at {stub.url} is unavailable: it answered HTTP 503" in err
        not_api = stub.url.replace("/w/api.php", "/nope")
        assert main([*args, "--out", str(tmp_path / "b"), "--wikipedia-api", not_api]) == 2
        assert "answered HTTP 404" in capsys.readouterr().err
    run = json.loads((tmp_path / "a" / "run.json").read_text())
    assert run["status"] == "failed" and "WikipediaUnavailableError" in run["error"]


def test_the_sweep_refuses_wikipedia_text_instead_of_mislabelling_a_csv_index():
    from fairrag_study.study import StudyConfig
    from fairrag_study.sweep import load_pools

    with pytest.raises(ValueError, match="text='wikipedia' is not supported there"):
        load_pools(StudyConfig(text="wikipedia", llm="none"), print)


def test_the_index_key_names_the_text_source_and_keeps_the_csv_key_it_had():
    import hashlib

    from fairrag_study.index import collection_name, corpus_fingerprint, index_folder

    docs = [CorpusDocument("1", "Ada Lovelace", "A mathematician.", "female", ("T",))]
    model = "sentence-transformers/all-MiniLM-L6-v2"
    before = hashlib.sha256(model.encode())  # the key of indexes cached before --text existed
    before.update(b"\0" + b"1" + b"\0" + docs[0].page_content.encode())
    csv_key = corpus_fingerprint(docs, model)
    assert csv_key == corpus_fingerprint(docs, model, "csv") == before.hexdigest()[:16]
    wiki_key = corpus_fingerprint(docs, model, "wikipedia")
    assert wiki_key != csv_key  # even for the same texts
    root = Path("/cache")
    assert index_folder(root, "balanced", model, csv_key).name == (
        f"balanced-all-MiniLM-L6-v2-{csv_key}"
    )
    assert index_folder(root, "balanced", model, wiki_key, "wikipedia").name == (
        f"balanced-wikipedia-all-MiniLM-L6-v2-{wiki_key}"
    )
    assert collection_name("natural", model, wiki_key, "wikipedia") == (
        f"fairrag-natural-wikipedia-all-MiniLM-L6-v2-{wiki_key}"
    )
    assert (
        collection_name("natural", model, csv_key) == f"fairrag-natural-all-MiniLM-L6-v2-{csv_key}"
    )


def test_the_benchmark_prints_its_figures():
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "benchmarks/bench_wikipedia.py", "--titles", "50", "--words", "20"],
        cwd=root, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert "fetch from the loopback stub: 3 requests" in done.stdout
    assert "re-run from the cache: 0 requests" in done.stdout
    assert "clean and cut to 100 words" in done.stdout and "(50 texts)" in done.stdout

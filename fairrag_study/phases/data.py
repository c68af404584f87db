"""The data phase: the data set's documents (with their Wikipedia article's text if asked),
the corpus built from them and the trials planned on it (docs/SPEC.md, "The study")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data import (
    CorpusDocument,
    build_corpus,
    default_cache_dir,
    load_documents,
    locate_data,
    study_topics,
)
from ..dataset import StudyDataset
from ..plan import Trial, plan_trials
from ..progress import progress_bar
from ..settings import CorpusSettings
from ..wikipedia import WORDS, fetch_articles, with_article_text


@dataclass(frozen=True)
class StudyCorpus:
    """What the data phase hands on: the data file, the data set's documents, the corpus
    indexed, the trials planned, the report's lines on the documents' text, and the corpus's
    composition (``3071 female``)."""

    path: Path
    documents: list[CorpusDocument]
    corpus: list[CorpusDocument]
    trials: list[Trial]
    text_lines: dict[str, Any]
    composition: str


def load_corpus(settings: CorpusSettings, out: Path, log: Callable[[str], None]) -> StudyCorpus:
    """The data phase's entry: the data found and read, each document's text (the CSV's, or
    its Wikipedia article's: :func:`article_documents`), the corpus built and the trials
    planned (:func:`corpus_and_trials`)."""
    dataset = settings.dataset
    path = locate_data(settings.data, cache_dir=settings.cache_dir)
    documents = load_documents(path, dataset)
    text_lines: dict[str, Any] = {"document text": f"csv: {dataset.text_column!r}"}
    if settings.text == "wikipedia":
        documents, text_lines = article_documents(settings, documents, out, log)
    corpus, trials = corpus_and_trials(settings, documents)
    made = composition(corpus, dataset)
    log(f"corpus {settings.corpus}: {len(corpus)} documents, {made} ({path})")
    return StudyCorpus(path, list(documents), corpus, trials, text_lines, made)


def composition(corpus: Sequence[CorpusDocument], dataset: StudyDataset) -> str:
    """``3071 female`` (one protected group) or ``120 a, 118 b, 95 c`` (several groups)."""
    counts = Counter(doc.group for doc in corpus)
    if dataset.target is None and dataset.protected is not None:
        return f"{counts[dataset.protected]} {dataset.protected}"
    return ", ".join(f"{counts[group]} {group}" for group in dataset.groups)


def corpus_and_trials(
    settings: CorpusSettings, documents: Sequence[CorpusDocument]
) -> tuple[list[CorpusDocument], list[Trial]]:
    """The corpus ``settings`` indexes and the trials it plans, from the data set's documents:
    the study's and the sweep's, so both rank the same pools (docs/SPEC.md, "The study")."""
    dataset = settings.dataset
    corpus = build_corpus(
        documents,
        settings.corpus,
        seed=settings.corpus_seed,
        topics=settings.topics,
        per_group=settings.per_group,
        groups=dataset.groups,
    )
    trials = plan_trials(
        study_topics(documents, settings.topics, dataset.groups),
        settings.trials,
        settings.seed,
        dataset.question_templates,
    )
    return corpus, trials


def article_documents(
    settings: CorpusSettings,
    documents: Sequence[CorpusDocument],
    out: Path,
    log: Callable[[str], None],
) -> tuple[list[CorpusDocument], dict[str, Any]]:
    """``--text wikipedia``: the documents the corpus may draw from, with their article's text
    (docs/SPEC.md, "Document text from Wikipedia"), and the report's lines about it.

    Those are the documents of the study's topics (every document for a natural corpus of all
    topics). Each title's article is fetched once and cached under the cache folder
    (:func:`~fairrag_study.wikipedia.fetch_articles`); a document without one (missing page,
    invalid title, empty article) is dropped before the corpus is built, and its title and why
    are written to ``wikipedia_missing.txt`` in ``out``.
    """
    dataset = settings.dataset
    if not dataset.title_column:
        raise ValueError(
            f"text='wikipedia' fetches each document's article by its title, but the data set "
            f"{dataset.name!r} has no title column; use text='csv'"
        )
    if settings.corpus == "natural" and settings.topics is None:
        wanted = list(documents)
    else:
        chosen = set(study_topics(documents, settings.topics, dataset.groups))
        wanted = [doc for doc in documents if chosen.intersection(doc.topics)]
    if wanted and not any(doc.title.strip() for doc in wanted):
        raise ValueError(
            f"text='wikipedia' fetches each document's article by its title, but the title "
            f"column {dataset.title_column!r} is empty for every document; use text='csv'"
        )
    titles = list(dict.fromkeys(doc.title for doc in wanted))
    bar = progress_bar(settings.progress, len(titles), "wikipedia articles", "article")
    try:
        fetched = fetch_articles(
            titles,
            cache_dir=settings.cache_dir or default_cache_dir(),
            api_url=settings.wikipedia_api,
            on_batch=bar.update,
        )
    finally:
        bar.close()
    kept, dropped = with_article_text(wanted, fetched.articles)
    missing = out / "wikipedia_missing.txt"
    lines = sorted(f"{title}\t{why}\n" for title, why in dropped)
    missing.write_text("".join(lines), encoding="utf-8")
    log(
        f"wikipedia: {len(kept)} of {len(wanted)} documents have an article ({fetched.fetched} "
        f"fetched now in {fetched.requests} requests, {fetched.from_cache} from the cache "
        f"{fetched.cache}); {len(dropped)} without one dropped, listed in {missing}"
    )
    return kept, {
        "document text": f"wikipedia: the first {WORDS} words of each article's lead "
        f"({settings.wikipedia_api})",
        "titles without a Wikipedia article (dropped)": f"{len(dropped)} (wikipedia_missing.txt)",
    }

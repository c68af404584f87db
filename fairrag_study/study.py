"""The study: reproduce the paper's experiment end to end (docs/SPEC.md, "The study")."""

from __future__ import annotations

import json
import os
import resource
import socket
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from uuid import UUID

from fairrag_core import JsonLinesLog, available_rankers
from fairrag_core.exposure import make_exposure_model
from fairrag_core.metrics import ndcg_at_k, precision_at_k
from fairrag_core.validation import check_alpha, check_n_samples

from .data import (
    DEFAULT_CORPUS_SEED,
    CorpusDocument,
    build_corpus,
    default_cache_dir,
    load_documents,
    locate_data,
    sha256_of,
    study_topics,
)
from .dataset import PAPER_RANKERS, TREC_GENDER, StudyDataset
from .embedding import (
    DEFAULT_BACKEND,
    DEFAULT_MODEL,
    EMBEDDING_BACKENDS,
    embedding_backend,
    load_embedding_model,
)
from .errors import (
    AnswerStoreError,
    GeneratorUnavailableError,
    IndexDamagedError,
    OutputFolderError,
    StudyError,
)
from .frontier import amortized_frontier
from .index import (
    DEFAULT_TIMEOUT,
    EF_SEARCH,
    collection_name,
    connect_chroma_server,
    corpus_fingerprint,
    embed_missing,
    index_folder,
    open_collection,
    open_embedded_index,
    verify_collection,
)
from .many_rankings import ManyRankings, describe_rankers, measure, ranker_fields, study_rankers
from .options import (
    CONCURRENCY_LIMIT,
    LLM_RETRIES_LIMIT,
    MAX_TOKENS_LIMIT,
    SECONDS,
    SEED_LIMIT,
    THREADS_LIMIT,
    seconds_problem,
)
from .outputs import DISK_FULL, OutputFolder, study_files
from .plan import Trial, plan_trials
from .pools import NotInPoolError, QuestionPool, query_pools
from .position_curve import POSITION_CURVE_FILES, run_position_curve
from .progress import progress_bar
from .report import RunFacts, full_topics, output_files, write_outputs
from .wikipedia import DEFAULT_API, TEXT_SOURCES, WORDS, fetch_articles, with_article_text

__all__ = ["PAPER_RANKERS", "StudyConfig", "StudyResult", "run_study"]

COLLECTION = "fairrag-corpus"
"""The collection's name in the study's own embedded index folder (one folder per corpus)."""


@dataclass
class StudyConfig:
    """Every knob of a study run; the defaults are the paper's setting."""

    data: Path | None = None
    dataset: StudyDataset = TREC_GENDER
    """What the data is: columns, groups, target, questions, the paper's numbers if any."""
    corpus: str = "balanced"
    rankers: tuple[str, ...] | None = None
    """The rankers compared (any of ``available_rankers()``; :data:`PAPER_RANKERS`: the paper's
    four); ``None``: every registered ranker that takes the data set's target (TREC: all six)."""
    trials: int = 80
    seed: int = 2026
    pool_size: int = 50
    k: int = 5
    alpha: float = 4.0
    samples: int = 100
    """Rankings drawn per question and ranker for expected exposure (docs/SPEC.md, "The
    study" → Over many rankings)."""
    llm: str = "auto"
    """``auto`` (OpenAI when OPENAI_API_KEY is set, else none), ``none``, ``openai:<model>``,
    ``local`` or ``local:<name>`` (a packaged model run in-process, offline:
    :data:`~fairrag_study.local_llm.LOCAL_MODELS`, default ``smollm2``), or ``fake`` (the
    offline test double that cites from its context; not a real model)."""
    base_url: str | None = None
    max_tokens: int | None = None
    """New tokens one answer may take; ``None``: no cap for ``openai:`` (the server's),
    :data:`~fairrag_study.local_llm.LOCAL_MAX_TOKENS` (160) for ``local``."""
    llm_timeout: float | None = None
    """Seconds one chat model request may take; ``None``: ``default_chat_model``'s (60), or
    :data:`LOOPBACK_TIMEOUT` (600) for a server on this machine (``--base-url`` on loopback)."""
    llm_retries: int | None = None
    """Retries of a failed chat model request; ``None``: ``default_chat_model``'s (2). A 429
    or 5xx answer is retried after the server's ``Retry-After`` when it gives one of at most
    120 s (the ``openai`` client's rule), else after the client's back-off (0.5 s doubling to
    at most 8 s)."""
    concurrency: int = 1
    """Trials whose answers are asked for at once (1 to 64; 1: one after the other). The
    records, their order and the answer store are the sequential run's (docs/SPEC.md, "The
    study", concurrency)."""
    threads: int | None = None
    """Torch CPU threads of ``llm="local"``; ``None``:
    :func:`~fairrag_study.local_llm.default_threads`."""
    answers: Path | None = None
    """The answer store (SQLite file) of the OpenAI generator's answers; ``None``:
    ``answers.sqlite`` in the cache folder (docs/SPEC.md, "The study", answer store)."""
    answer_cache: bool = True
    """Reuse and store answers (False: every run pays for every answer)."""
    out: Path = Path("fairrag-output")
    cache_dir: Path | None = None
    model: str = DEFAULT_MODEL
    embedding_backend: str = DEFAULT_BACKEND
    """``onnx`` (ONNX Runtime on an fp32 export, no torch import) or ``torch``; docs/SPEC.md."""
    topics: tuple[str, ...] | None = None
    """Restrict the corpus to these topics (small runs and tests)."""
    per_group: int | None = None
    """Balanced corpus: documents per group per topic; ``None``: the data set's (TREC: 50)."""
    corpus_seed: int = DEFAULT_CORPUS_SEED
    text: str = "csv"
    """Each document's text: ``csv`` (the data set's text column) or ``wikipedia`` (the first
    100 words of the person's article, fetched by title and cached; docs/SPEC.md)."""
    wikipedia_api: str = DEFAULT_API
    """The MediaWiki Action API ``text="wikipedia"`` fetches from."""
    chroma_host: str | None = None
    """A Chroma server (``chroma run``) to use instead of the embedded, persistent index."""
    chroma_port: int = 8000
    chroma_timeout: float = DEFAULT_TIMEOUT
    """Seconds a Chroma server request may take before it fails (no hang on a stuck server)."""
    progress: bool = True
    exposure: str | None = None
    """The rankers' exposure model (``dcg`` default, ``rbp(p)``, ``uniform``,
    ``fitted:<file>``; docs/SPEC.md, "Exposure model")."""
    position_curve: int = 0
    """Questions of the position-curve phase (0: no phase; :mod:`fairrag_study.position_curve`)."""


@dataclass
class StudyResult:
    out: Path
    records: list[dict[str, Any]]
    timings: dict[str, float] = field(default_factory=dict)
    peak_memory_mib: float = 0.0
    generation_note: str | None = None
    index_added: int = 0


def _peak_rss_mib() -> float:
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def run_study(config: StudyConfig, log: Callable[[str], None] = print) -> StudyResult:
    """Run the whole study and write its outputs to ``config.out`` (see the README)."""
    _check_config(config)
    rankers, left_out = study_rankers(config.rankers, alpha=config.alpha, dataset=config.dataset)
    for name, reason in left_out.items():
        log(f"ranker {name} left out: {reason}")
    config = replace(config, rankers=rankers)
    server = None
    if config.chroma_host:  # an unreachable server fails now, before any slow work
        server = connect_chroma_server(
            config.chroma_host, config.chroma_port, timeout=config.chroma_timeout
        )
    out = Path(config.out)
    files = (*output_files(config.dataset), *POSITION_CURVE_FILES)
    folder = OutputFolder(out, log, study_files(files))
    folder.claim()  # refuses a folder of other files, or one another study is writing
    try:
        return _run_claimed(config, server, out, log, _previous_run(out, folder.previous_run))
    except OSError as exc:
        if exc.errno not in DISK_FULL:
            raise
        raise OutputFolderError(
            f"--out {str(out)!r} took no more bytes: {exc} (a full disk, a quota or a file "
            "size limit). Free space there, or choose another --out with room; the study's "
            "outputs (records, tables, figures) take a few MB"
        ) from exc
    finally:
        folder.release()  # never raises over the error above: a full disk is noted, not raised


def _check_config(config: StudyConfig) -> None:
    """The configuration's values, checked before any work (the CLI checks its flags the same
    way; this is for callers of :func:`run_study`): a ``ValueError`` naming the field."""
    for name, low in (("trials", 1), ("pool_size", 1), ("k", 1), ("per_group", 1), ("seed", 0)):
        value = getattr(config, name)
        if name == "per_group" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    check_alpha(config.alpha)
    _check_curve_options(config)
    try:
        check_n_samples(config.samples)
    except (TypeError, ValueError):
        raise ValueError(
            f"samples (rankings drawn per question) must be an integer >= 1, got {config.samples!r}"
        ) from None
    if config.embedding_backend not in EMBEDDING_BACKENDS:
        raise ValueError(
            f"embedding_backend must be one of {', '.join(EMBEDDING_BACKENDS)}, got "
            f"{config.embedding_backend!r}"
        )
    if not isinstance(config.dataset, StudyDataset):
        raise ValueError(f"dataset must be a StudyDataset, got {config.dataset!r}")
    if config.rankers is not None:
        known = available_rankers()
        unknown = sorted(set(config.rankers) - set(known))
        if unknown:
            raise ValueError(f"unknown rankers {unknown}; known rankers: {known}")
        if not config.rankers or len(set(config.rankers)) != len(config.rankers):
            raise ValueError(f"rankers must name each ranker once, got {config.rankers!r}")
        try:
            study_rankers(config.rankers, alpha=config.alpha, dataset=config.dataset)
        except ValueError as exc:
            raise ValueError(f"rankers: {exc}") from None
    for name in ("chroma_timeout", "llm_timeout"):
        value = getattr(config, name)
        if value is None and name == "llm_timeout":
            continue
        problem = (
            "not a number"
            if isinstance(value, bool) or not isinstance(value, (int, float))
            else seconds_problem(float(value))
        )
        if problem is not None:  # 1e300 passed "> 0" and overflowed in the HTTP client
            raise ValueError(
                f"{name} must be a finite number of seconds from {SECONDS[0]:g} to "
                f"{SECONDS[1]:g}, got {value!r} ({problem})"
            )
    if config.seed >= SEED_LIMIT:
        raise ValueError(f"seed must be an integer from 0 to 2**64 - 1, got {config.seed!r}")
    if config.k > config.pool_size:
        raise ValueError(
            f"k ({config.k}) must be at most pool_size ({config.pool_size}): the k documents "
            "shown are taken from the pool"
        )
    for name, low, high in (
        ("llm_retries", 0, LLM_RETRIES_LIMIT),
        ("max_tokens", 1, MAX_TOKENS_LIMIT),
        ("concurrency", 1, CONCURRENCY_LIMIT),
        ("threads", 1, THREADS_LIMIT),
    ):
        value = getattr(config, name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high
        ):
            raise ValueError(f"{name} must be an integer from {low} to {high:,}, got {value!r}")
    if config.base_url is not None and not (
        config.llm == "auto" or config.llm.startswith("openai:")
    ):
        raise ValueError(
            f"base_url is only used with llm 'openai:<model>' or 'auto', got llm {config.llm!r}"
        )
    if config.text not in TEXT_SOURCES:
        raise ValueError(f"text must be one of {list(TEXT_SOURCES)}, got {config.text!r}")
    api = urlparse(str(config.wikipedia_api))
    if api.scheme not in ("http", "https") or not api.netloc:
        raise ValueError(
            f"wikipedia_api must be an http:// or https:// address of a MediaWiki Action API "
            f"(default {DEFAULT_API}), got {config.wikipedia_api!r}"
        )
    if config.answers is not None and not isinstance(config.answers, (str, Path)):
        raise ValueError(f"answers must be a file path or None, got {config.answers!r}")
    if not isinstance(config.answer_cache, bool):
        raise ValueError(f"answer_cache must be True or False, got {config.answer_cache!r}")


def _check_curve_options(config: StudyConfig) -> None:
    """``position_curve`` (an integer >= 0, not 1) and ``exposure`` (a model every ranker can
    weigh ``k`` positions with), each a ``ValueError`` naming the field."""
    n = config.position_curve
    if isinstance(n, bool) or not isinstance(n, int) or n < 0 or n == 1:
        raise ValueError(
            f"position_curve must be 0 (no phase) or an integer >= 2 (questions, two halves), "
            f"got {n!r}"
        )
    if config.exposure is not None:
        try:
            make_exposure_model(config.exposure).weights(config.k)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"exposure: {exc}") from None


def _run_claimed(
    config: StudyConfig,
    server: Any,
    out: Path,
    log: Callable[[str], None],
    previous: str | None,
) -> StudyResult:
    assert config.rankers is not None  # resolved by run_study
    timings: dict[str, float] = {}
    run_info: dict[str, Any] = {
        "status": "running",
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": _jsonable(asdict(config)),
    }
    if previous is not None:
        log(previous)
        run_info["previous_run"] = previous
    _write_json(out / "run.json", run_info)

    phase = phase_timer(timings, log)
    client = None
    answers = None
    dataset = config.dataset
    try:
        with phase("load"):
            # The generator is built first, and the trials planned before the model and index
            # load: a missing API key fails in seconds (not after a Wikipedia fetch), a bad
            # --trials before the embedding.
            llm, generation_note = _chat_model(config, answers=True)
            answers = _store_of(llm)
            run_info["answers"] = _answer_counts(answers)
            data_path = locate_data(config.data, cache_dir=config.cache_dir)
            documents = load_documents(data_path, dataset)
            text_config: dict[str, Any] = {"document text": f"csv: {dataset.text_column!r}"}
            if config.text == "wikipedia":
                documents, text_config = _article_documents(config, documents, out, log)
            corpus, trials = corpus_and_trials(config, documents)
            composition = _composition(corpus, dataset)
            log(f"corpus {config.corpus}: {len(corpus)} documents, {composition} ({data_path})")
        with phase("embed"):
            model = load_embedding_model(
                config.model, config.embedding_backend, cache_dir=config.cache_dir, log=log
            )
            log(f"embedding with {config.model} on {embedding_backend(model)}")
            client, index_path, name, added = _open_index(config, corpus, model, server, log)
            collection_size = len(corpus)
            log(f"index {index_path}: {collection_size} documents ({added} embedded now)")
        records_log = JsonLinesLog(out / "records.jsonl")
        with phase("trials"):
            records = _run_trials(
                config,
                client,
                name,
                model,
                corpus,
                trials,
                llm,
                records_log,
                out,
                log,
                index_path,
            )
        run_info["answers"] = _answer_counts(answers)
        with phase("many rankings"):
            many, pools = _many_rankings(
                config, client, name, model, corpus, trials, records, index_path
            )
        if "amortized" in config.rankers:
            with phase("amortized frontier"):
                frontier = amortized_frontier(
                    pools,
                    config.k,
                    dataset=dataset,
                    samples=config.samples,
                    seed=config.seed,
                    alpha=config.alpha,
                )
                many = replace(many, frontier=frontier)
        if config.position_curve and llm is not None:
            with phase("position curve"):
                run_position_curve(
                    config.position_curve,
                    pools,
                    corpus,
                    llm,
                    dataset=dataset,
                    k=config.k,
                    seed=config.seed,
                    model_name=_generator_name(config, llm),
                    out=out,
                    log=log,
                )
        if llm is not None:
            log("[generation] inside the trials phase (one retrieve-then-generate run per trial)")
            if _pays(config):
                log(f"answers: {_answers_line(answers)}")
        else:
            log(f"generation skipped: {generation_note}")
        with phase("report"):
            report_config = {
                "data": f"{data_path} (sha256 {sha256_of(data_path)[:12]}...)",
                "corpus": f"{config.corpus}: {len(corpus)} documents, {composition}",
                **text_config,
                "trials per ranker": len(trials),
                "rankers": describe_rankers(config.rankers, alpha=config.alpha, dataset=dataset),
                "pool size / k / alpha": f"{config.pool_size} / {config.k} / {config.alpha}",
                "rankings sampled per question (expected exposure)": config.samples,
                "seed": config.seed,
                **(
                    {}
                    if dataset.paper is not None
                    else {
                        "group key": dataset.group_key,
                        "target": dataset.target_label(),
                    }
                ),
                "embedding model": f"{config.model} ({embedding_backend(model)})",
                "generator": config.llm if llm is not None else "none",
                **(
                    {"answers": _answers_line(answers)} if llm is not None and _pays(config) else {}
                ),
            }
            corpus_topics = study_topics(documents, config.topics, dataset.groups)
            per_group = config.per_group or dataset.per_group
            facts = RunFacts(
                corpus_kind=config.corpus,
                documents=len(corpus),
                topics=len(corpus_topics),
                full_topics=full_topics(documents, corpus_topics, per_group, dataset.groups),
                per_group=per_group,
                seed=config.seed,
                trials=len(trials),
                pool_size=config.pool_size,
                k=config.k,
                ef_search=EF_SEARCH,
                generator=_generator_name(config, llm),
                temperature=getattr(llm, "temperature", None),
            )
            write_outputs(
                out,
                records,
                list(config.rankers),
                dataset=dataset,
                config=report_config,
                generation_note=generation_note,
                many=many,
                facts=facts,
            )
    except KeyboardInterrupt:
        run_info.update(status="interrupted", timings=timings, answers=_answer_counts(answers))
        _record_end(out, run_info, log)
        log(f"interrupted: {_records_kept(out)}{_answers_kept(answers, config)}")
        raise
    except Exception as exc:  # e.g. the Chroma server went away: say so in run.json too
        run_info.update(status="failed", error=f"{type(exc).__name__}: {exc}", timings=timings)
        run_info["answers"] = _answer_counts(answers)
        _record_end(out, run_info, log)
        log(f"failed: {_records_kept(out)}{_answers_kept(answers, config)}")
        raise
    finally:
        if client is not None and server is None:
            client.close()  # the embedded index's files are released (a later run may rebuild)
        if answers is not None:
            answers.close()
    peak = _peak_rss_mib()
    run_info.update(status="complete", timings=timings, peak_memory_mib=round(peak, 1))
    _write_json(out / "run.json", run_info)
    total = sum(timings.values())
    phases = ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
    generation = "in trials" if llm is not None else "skipped"
    log(f"wall time per phase: {phases} (generation: {generation})")
    log(f"total {total:.1f} s; peak memory {peak:.0f} MiB; outputs in {out}")
    return StudyResult(out, records, timings, peak, generation_note, added)


def _composition(corpus: Sequence[CorpusDocument], dataset: StudyDataset) -> str:
    """``3071 female`` (one protected group) or ``120 a, 118 b, 95 c`` (several groups)."""
    counts = Counter(doc.group for doc in corpus)
    if dataset.target is None and dataset.protected is not None:
        return f"{counts[dataset.protected]} {dataset.protected}"
    return ", ".join(f"{counts[group]} {group}" for group in dataset.groups)


def _previous_run(out: Path, previous: dict[str, Any] | None) -> str | None:
    """What to say about the previous run in ``out`` (its ``run.json``) if it never recorded
    its end.

    Read with the folder's lock held, so a ``run.json`` still saying "running" belongs to a
    process that is gone: it crashed (a native library's segfault, the out-of-memory killer) or
    was killed before it could record anything.
    """
    if previous is None or previous.get("status") != "running":
        return None
    who = f"pid {previous.get('pid', '?')}, started {previous.get('started', '?')}"
    return (
        f"the previous study in {out} ({who}) stopped while running without recording why: it "
        "crashed (e.g. a segfault in a native library) or was killed. Its partial outputs are "
        "replaced by this run"
    )


def _records_kept(out: Path) -> str:
    """What the failure message says of ``records.jsonl``: kept if it was written at all."""
    path = out / "records.jsonl"
    if path.is_file() and path.stat().st_size > 0:
        return f"the records written so far stay in {path}"
    return "no record was written"


def _record_end(out: Path, run_info: dict[str, Any], log: Callable[[str], None]) -> None:
    """Write ``run.json`` on the way out of a failed or interrupted run, without masking the
    error that ended it: a ``run.json`` that cannot be written (a full disk) is logged."""
    try:
        _write_json(out / "run.json", run_info)
    except OSError as exc:
        log(f"{out / 'run.json'} could not record the run's end ({exc})")


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    """Replace ``path`` atomically (written beside, renamed); no temporary file is left.

    On a full disk, an existing file is overwritten in place instead: the blocks it holds are
    reused, so a run's ``run.json`` can still say "failed" when the disk filled during the run.
    """
    text = json.dumps(payload, indent=2, default=str)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno not in DISK_FULL or not path.is_file():
            raise
        with open(path, "r+", encoding="utf-8") as handle:
            handle.write(text)
            handle.truncate()


def corpus_and_trials(
    config: StudyConfig, documents: Sequence[CorpusDocument]
) -> tuple[list[CorpusDocument], list[Trial]]:
    """The corpus ``config`` indexes and the trials it plans, from the data set's documents:
    the study's and the sweep's, so both rank the same pools (docs/SPEC.md, "The study")."""
    dataset = config.dataset
    corpus = build_corpus(
        documents,
        config.corpus,
        seed=config.corpus_seed,
        topics=config.topics,
        per_group=config.per_group or dataset.per_group,
        groups=dataset.groups,
    )
    trials = plan_trials(
        study_topics(documents, config.topics, dataset.groups),
        config.trials,
        config.seed,
        dataset.question_templates,
    )
    return corpus, trials


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _article_documents(
    config: StudyConfig,
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
    dataset = config.dataset
    if not dataset.title_column:
        raise ValueError(
            f"text='wikipedia' fetches each document's article by its title, but the data set "
            f"{dataset.name!r} has no title column; use text='csv'"
        )
    if config.corpus == "natural" and config.topics is None:
        wanted = list(documents)
    else:
        chosen = set(study_topics(documents, config.topics, dataset.groups))
        wanted = [doc for doc in documents if chosen.intersection(doc.topics)]
    if wanted and not any(doc.title.strip() for doc in wanted):
        raise ValueError(
            f"text='wikipedia' fetches each document's article by its title, but the title "
            f"column {dataset.title_column!r} is empty for every document; use text='csv'"
        )
    titles = list(dict.fromkeys(doc.title for doc in wanted))
    bar = progress_bar(config.progress, len(titles), "wikipedia articles", "article")
    try:
        fetched = fetch_articles(
            titles,
            cache_dir=config.cache_dir or default_cache_dir(),
            api_url=config.wikipedia_api,
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
        f"({config.wikipedia_api})",
        "titles without a Wikipedia article (dropped)": f"{len(dropped)} (wikipedia_missing.txt)",
    }


def _open_index(
    config: StudyConfig,
    corpus: Sequence[CorpusDocument],
    model: Any,
    server: Any,
    log: Callable[[str], None],
) -> tuple[Any, Path | str, str, int]:
    """``(client, where, collection name, documents embedded now)``, the index verified.

    On a server, the corpus's collection (:func:`collection_name`); embedded, the persistent
    index folder of this corpus and model (:func:`open_embedded_index` checks it, rebuilding a
    damaged one).
    """
    fingerprint = corpus_fingerprint(corpus, config.model, config.text)
    if server is not None:
        where = f"http://{config.chroma_host}:{config.chroma_port}"
        kind = config.dataset.index_kind(config.corpus, ((d.doc_id, d.group) for d in corpus))
        name = collection_name(kind, config.model, fingerprint, config.text)
        collection = open_collection(server, name)
        added = embed_missing(collection, corpus, model, progress=config.progress)
        verify_collection(collection, corpus, model, where=f"{where} (collection {name})")
        return server, where, name, added
    cache = config.cache_dir or default_cache_dir()
    kind = config.dataset.index_kind(config.corpus, ((d.doc_id, d.group) for d in corpus))
    folder = index_folder(cache, kind, config.model, fingerprint, config.text)
    client, _, added = open_embedded_index(
        folder, COLLECTION, corpus, model, progress=config.progress, log=log
    )
    return client, folder, COLLECTION, added


def _chat_model(config: StudyConfig, answers: bool = False) -> tuple[Any, str | None]:
    """The generator, or ``(None, why not)``.

    An OpenAI generator names its server (``--base-url``, else ``OPENAI_API_BASE`` or
    ``OPENAI_BASE_URL``, else OpenAI's), which is part of its answers' key. With ``answers``
    and ``config.answer_cache`` it gets the answer store as its LangChain ``cache``
    (:func:`answer_store_path`; docs/SPEC.md, "The study", answer store).
    """
    choice = config.llm
    if choice == "none":
        return None, "--llm none: retrieval only, as asked."
    if choice == "fake":
        from fairrag_langchain.fakes import FakeCitingChatModel

        return FakeCitingChatModel(seed=config.seed), None
    if choice == "local" or choice.startswith("local:"):
        from .local_llm import (
            DEFAULT_LOCAL_MODEL,
            LOCAL_MAX_TOKENS,
            LOCAL_MODELS,
            LocalChatModel,
            default_threads,
            local_model_file,
        )

        name = choice.partition(":")[2] or DEFAULT_LOCAL_MODEL
        if name not in LOCAL_MODELS:
            raise ValueError(
                f"--llm {choice!r}: unknown local model {name!r}; known: {sorted(LOCAL_MODELS)}"
            )
        local_model_file(name)  # a missing package fails now, saying how to install it
        local = LocalChatModel(
            model_name=name,
            max_tokens=config.max_tokens or LOCAL_MAX_TOKENS,
            threads=config.threads or default_threads(),
        )
        if answers and config.answer_cache:
            from .answers import AnswerStore

            local.cache = AnswerStore(answer_store_path(config))
        return local, None
    if choice == "auto":
        if not os.environ.get("OPENAI_API_KEY"):
            return None, (
                "no chat model: OPENAI_API_KEY is not set. Set it (and --base-url for any "
                "OpenAI-compatible server) or pass --llm openai:<model>; generation parity, "
                "fairness gap and utility need a generator."
            )
        choice = "openai:gpt-4o-mini"
    if choice.startswith("openai:"):
        from fairrag_langchain.chains import default_chat_model

        if not os.environ.get("OPENAI_API_KEY"):
            raise ValueError(
                f"--llm {choice} needs OPENAI_API_KEY (any value for an OpenAI-compatible "
                "server that takes none, with --base-url); or use --llm none (retrieval only) "
                "or --llm fake (the offline test double)"
            )

        bounds: dict[str, Any] = {"timeout": _llm_timeout(config)}
        if config.llm_retries is not None:
            bounds["max_retries"] = config.llm_retries
        if config.max_tokens is not None:
            bounds["max_tokens"] = config.max_tokens
        model = choice.split(":", 1)[1]
        llm = default_chat_model(_named_endpoint(config), model=model, **bounds)
        if answers and config.answer_cache:
            from .answers import AnswerStore

            llm.cache = AnswerStore(answer_store_path(config))
        return llm, None
    raise ValueError(
        f"--llm {choice!r} is unknown; use auto, none, fake, local[:<name>] or openai:<model>"
    )


LOOPBACK_TIMEOUT = 600.0
"""``--llm-timeout``'s default for a server on this machine (``--base-url`` on 127.0.0.0/8,
``localhost`` or ``[::1]``): a CPU-served model's first answer took 277 s of wall time under
load (SmolLM2-135M on 2 shared cores, issue 22), far past the 60 s meant for a hosted API, after
which the client re-sends the request and pays again."""


def _llm_timeout(config: StudyConfig) -> float:
    """Seconds one request may take: ``--llm-timeout``, else :data:`LOOPBACK_TIMEOUT` for a
    server on this machine, else ``default_chat_model``'s 60."""
    from fairrag_langchain.chains import DEFAULT_TIMEOUT as CHAT_TIMEOUT

    if config.llm_timeout is not None:
        return float(config.llm_timeout)
    host = urlparse(_named_endpoint(config) or "").hostname or ""
    if host == "localhost" or host == "::1" or host.startswith("127."):
        return LOOPBACK_TIMEOUT
    return CHAT_TIMEOUT


def answer_store_path(config: StudyConfig) -> Path:
    """Where the study's answer store is: ``config.answers``, else ``answers.sqlite`` in the
    cache folder (``config.cache_dir``, else :func:`~fairrag_study.data.default_cache_dir`),
    never in ``--out``, which a re-run replaces."""
    if config.answers is not None:
        return Path(config.answers).expanduser()
    return Path(config.cache_dir or default_cache_dir()).expanduser() / "answers.sqlite"


def _named_endpoint(config: StudyConfig) -> str | None:
    """The OpenAI-compatible server the study names: ``--base-url``, else ``OPENAI_API_BASE``,
    else ``OPENAI_BASE_URL`` (``ChatOpenAI``'s and the ``openai`` client's order), else None
    (OpenAI's own)."""
    return (
        config.base_url
        or os.environ.get("OPENAI_API_BASE")
        or os.environ.get("OPENAI_BASE_URL")
        or None
    )


def _store_of(llm: Any) -> Any:
    """The chat model's answer store, or None (no generator, another model, or turned off)."""
    if llm is None:
        return None
    from .answers import AnswerStore

    cache = getattr(llm, "cache", None)
    return cache if isinstance(cache, AnswerStore) else None


def _answer_counts(store: Any) -> dict[str, Any] | None:
    """``run.json``'s ``answers``: the store, answers reused and paid (stored) in this run."""
    if store is None:
        return None
    return {"store": str(store.path), "reused": store.reused, "paid": store.stored}


def _pays(config: StudyConfig) -> bool:
    """Whether the study's generator's answers cost (a server's: ``openai:<model>``, or
    ``auto`` with a key; or CPU time: ``local``), so the answer store keeps them."""
    return config.llm.startswith(("openai:", "local")) or (
        config.llm == "auto" and bool(os.environ.get("OPENAI_API_KEY"))
    )


def _answers_line(store: Any) -> str:
    """The log's and the report's line on answers, e.g. ``4 paid, 12 reused (store ...)``."""
    if store is None:
        return "every answer paid for (answer store off: --no-answer-cache)"
    return f"{store.stored} paid, {store.reused} reused (answer store {store.path})"


def _answers_kept(store: Any, config: StudyConfig) -> str:
    """What a stopped run says about the answers it paid for (appended to its message)."""
    if store is None:
        if not _pays(config):
            return ""
        return "; the answer store is off (--no-answer-cache): a re-run pays for them again"
    try:
        total = f" ({len(store)} in all)"
    except AnswerStoreError:  # the store itself failed: say what is known
        total = ""
    return (
        f"; the {store.stored} answers paid in this run are kept in {store.path}{total}, "
        "and a re-run reuses them"
    )


def _chat_model_errors() -> Any:
    """A LangChain callback handler keeping every error a chat model run raised (``errors``),
    so the study can tell a server's unreadable reply from a failure of its own code."""
    from langchain_core.callbacks import BaseCallbackHandler

    class ChatModelErrors(BaseCallbackHandler):
        def __init__(self) -> None:
            self.errors: list[BaseException] = []

        def on_llm_error(self, error: BaseException, **kwargs: Any) -> None:
            self.errors.append(error)

    return ChatModelErrors()


@lru_cache(maxsize=4)
def _query_embeddings(model: Any) -> Any:
    """LangChain embeddings over the loaded model; each distinct query is embedded once.

    ``prefill`` embeds all of the study's questions in one batch; every later ``embed_query``
    for them is a dictionary lookup. One object per model (cached, as the models are), so the
    trials and the many-rankings phase share it: the questions are embedded once per run.
    """
    from langchain_core.embeddings import Embeddings

    class CachedQueryEmbeddings(Embeddings):
        def __init__(self) -> None:
            self.cache: dict[str, list[float]] = {}

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return model.encode(texts, normalize_embeddings=True, batch_size=64).tolist()

        def embed_query(self, text: str) -> list[float]:
            if text not in self.cache:
                self.cache[text] = self.embed_documents([text])[0]
            return self.cache[text]

        def prefill(self, queries: Sequence[str]) -> None:
            todo = sorted(set(queries) - set(self.cache))
            self.cache.update(zip(todo, self.embed_documents(todo), strict=True))

    return CachedQueryEmbeddings()


def _checked_store(
    client: Any, collection: str, embeddings: Any, expected: int, where: object
) -> Any:
    """The study's LangChain Chroma store, refusing a short pool.

    A query for ``n`` candidates must return ``min(n, expected)`` of them (``expected``: the
    documents the index holds); fewer means a damaged index (e.g. its HNSW files lost), whose
    report would look right and be wrong, so the study stops with :class:`IndexDamagedError`.
    The check sits on the Chroma collection's ``query``, which every search of the store
    (LangChain's methods, or a retriever reading the collection directly) goes through.
    """
    from langchain_chroma import Chroma

    store = Chroma(client=client, collection_name=collection, embedding_function=embeddings)
    checked: Any = _PoolCheckedCollection(store._collection, expected, where)
    store._chroma_collection = checked
    return store


class _PoolCheckedCollection:
    """A Chroma collection whose unfiltered queries must return full pools (else
    :class:`IndexDamagedError`); every other attribute is the collection's own."""

    def __init__(self, collection: Any, expected: int, where: object) -> None:
        self._wrapped, self._expected, self._where = collection, expected, where

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)

    def query(self, *args: Any, **kwargs: Any) -> Any:
        result = self._wrapped.query(*args, **kwargs)
        if kwargs.get("where") or kwargs.get("where_document"):
            return result  # a filtered pool may legitimately be short
        wanted = min(int(kwargs.get("n_results", 10)), self._expected)
        for ids in result["ids"]:
            if len(ids) != wanted:
                raise IndexDamagedError(
                    f"the index at {self._where} returned {len(ids)} candidates for a pool of "
                    f"{wanted} (it holds {self._expected} documents): it is damaged. Delete it "
                    "and run again to rebuild it"
                )
        return result


def _generator_error(
    exc: BaseException, config: StudyConfig, where: str, from_chat_model: bool = False
) -> str | None:
    """The message for a chat model server's failure (HTTP status, refused, timeout, a reply
    the client could not read), or None when ``exc`` is not one.

    ``from_chat_model``: the chat model's own run raised ``exc`` (LangChain's ``on_llm_error``),
    so an error that is not the ``openai`` client's (a ``TypeError`` on a completion without
    ``choices``, a ``JSONDecodeError``) is the server's malformed reply.
    """
    try:
        import openai
    except ImportError:  # pragma: no cover - langchain-openai depends on it
        return None
    if isinstance(exc, StudyError) or not (isinstance(exc, openai.APIError) or from_chat_model):
        return None
    server = _named_endpoint(config) or "api.openai.com"
    if not isinstance(exc, openai.APIError):
        what = f"sent a reply the client could not read ({type(exc).__name__}: {str(exc)[:300]})"
    elif isinstance(exc, openai.APITimeoutError):
        what = f"did not answer within --llm-timeout {_llm_timeout(config):g} s"
    elif isinstance(exc, openai.APIStatusError):
        what = f"answered HTTP {exc.status_code}: {str(exc)[:300]}"
    elif isinstance(exc, openai.APIConnectionError):
        root: BaseException = (
            exc  # the transport error under the client's wrappers (e.g. httpx.ConnectError)
        )
        for _ in range(10):
            under = root.__cause__ or root.__context__
            if under is None:
                break
            root = under
        what = f"could not be reached ({type(root).__name__})"
    else:
        what = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
    retries = config.llm_retries if config.llm_retries is not None else 2
    return f"the chat model server {server} {what} ({where}, after {retries} retries)"


def _run_trials(
    config: StudyConfig,
    client: Any,
    collection: str,
    model: Any,
    corpus: Sequence[CorpusDocument],
    trials: Sequence[Trial],
    llm: Any,
    records_log: JsonLinesLog,
    out: Path,
    log: Callable[[str], None],
    where: object,
) -> list[dict[str, Any]]:

    # docs/SPEC.md's cosine relevance 1 - d is negative for d > 1; LangChain warns about any score
    # outside [0, 1], once per query with the whole pool in the message. Expected here.
    warnings.filterwarnings(
        "ignore", message="Relevance scores must be between 0 and 1", category=UserWarning
    )

    from fairrag_langchain import FairnessCallbackHandler, FairRetriever
    from fairrag_langchain.chains import make_fair_rag_chain

    assert config.rankers is not None  # resolved by run_study
    embeddings = _query_embeddings(model)
    embeddings.prefill([trial.question for trial in trials])
    store = _checked_store(client, collection, embeddings, len(corpus), where)
    dataset = config.dataset

    def trial_handler() -> FairnessCallbackHandler:
        # One handler per trial: its record is that trial's, whatever order the answers
        # arrive in; the callback log is written below, in trial order.
        return FairnessCallbackHandler(
            group_key=dataset.group_key,
            **dataset.target_arguments(),
            exposure=config.exposure,
            max_records=None,
        )

    callback_log = JsonLinesLog(out / "callback_log.jsonl")
    topic_size = Counter(topic for doc in corpus for topic in doc.topics)
    chat_errors = _chat_model_errors()
    records: list[dict[str, Any]] = []
    unit = "trial" if llm is None else "answer"
    bar = progress_bar(config.progress, len(trials) * len(config.rankers), f"{unit}s", unit)
    started = time.perf_counter()
    jobs: list[tuple[str, Any, Any, Trial]] = []  # ranker, retriever, chain, trial: in order
    for ranker in config.rankers:
        retriever = FairRetriever(
            vectorstore=store,
            ranker=ranker,
            # fair: p = the target share, alpha 0.1; amortized: a fresh in-memory ledger
            **ranker_fields(ranker, alpha=config.alpha, dataset=dataset, exposure=config.exposure),
            group_key=dataset.group_key,
            **dataset.target_arguments(),
            pool_size=config.pool_size,
            k=config.k,
            seed=config.seed,
        )
        chain = None if llm is None else make_fair_rag_chain(retriever, llm)
        jobs.extend((ranker, retriever, chain, trial) for trial in trials)
    done: Generator[_TrialDone, None, None]
    if llm is None:
        done = (_retrieved(retriever, trial, trial_handler()) for _, retriever, _, trial in jobs)
    else:  # one queue over every ranker's trials: no drain between rankers
        done = answered_in_order(
            [(chain, trial) for _, _, chain, trial in jobs],
            trial_handler,
            [chat_errors],
            config.concurrency,
        )
    with closing(done):  # a failure cancels the queued trials at once, not when collected
        for (ranker, *_), (trial, handler, docs, exc) in zip(jobs, done, strict=False):
            if exc is not None:
                where = f"trial {trial.index} of {ranker}; {len(records)} records kept"
                failed = any(exc is error for error in chat_errors.errors)
                message = _generator_error(exc, config, where, from_chat_model=failed)
                if message is None:
                    raise exc
                kept = _answers_kept(_store_of(llm), config)
                raise GeneratorUnavailableError(message + kept) from exc
            new = handler.records
            if len(new) != 1:
                raise RuntimeError(
                    f"expected one fairness record for trial {trial.index}, got {len(new)}"
                )
            callback_log.append(new[0])
            record = _trial_record(new[0], ranker, trial, docs, topic_size, config.k)
            records_log.append(record)
            records.append(record)
            bar.update(1)
    bar.close()
    seconds = time.perf_counter() - started
    log(f"{len(records)} trial records ({len(trials)} trials x {len(config.rankers)} rankers)")
    if llm is not None:
        log(
            f"{len(records)} answers in {seconds:.1f} s ({len(records) / max(seconds, 1e-9):.2f} "
            f"answers/s, --concurrency {config.concurrency})"
        )
    return records


_TrialDone = tuple[Trial, Any, Any, "BaseException | None"]
"""A trial, its fairness handler, the documents shown (None on failure), and the failure."""


def _retrieved(retriever: Any, trial: Trial, handler: Any) -> _TrialDone:
    """A retrieval-only trial (``--llm none``)."""
    run_config: Any = {"callbacks": [handler], "run_name": "fairrag-trial"}
    return trial, handler, retriever.invoke(trial.question, run_config, seed=trial.seed), None


class _RetrievalTurns:
    """Trials retrieve in trial order, one at a time, however many answers are in flight: a
    ranker with state (amortized's ledger) then sees the sequential run's history, so every
    ranking, and so every prompt and answer, is the sequential run's (docs/SPEC.md, "The
    study", concurrency). Only the chat model calls overlap."""

    def __init__(self) -> None:
        self._next = 0
        self._finished: set[int] = set()
        self._turn = threading.Condition()

    def wait(self, position: int) -> None:
        with self._turn:
            self._turn.wait_for(lambda: self._next >= position)

    def done(self, position: int) -> None:
        """Trial ``position`` retrieved (or failed, or ended without retrieving)."""
        with self._turn:
            self._finished.add(position)
            while self._next in self._finished:
                self._finished.discard(self._next)
                self._next += 1
            self._turn.notify_all()

    def ticket(self, position: int) -> Any:
        """A callback handler holding trial ``position``'s outermost retrieval until its turn."""
        from langchain_core.callbacks import BaseCallbackHandler

        turns = self

        class Ticket(BaseCallbackHandler):
            run_inline = True
            outer: UUID | None = None

            def on_retriever_start(self, *args: Any, run_id: UUID, **kwargs: Any) -> None:
                if self.outer is None:
                    self.outer = run_id
                    turns.wait(position)

            def on_retriever_end(self, *args: Any, run_id: UUID, **kwargs: Any) -> None:
                if run_id == self.outer:
                    turns.done(position)

            def on_retriever_error(self, *args: Any, run_id: UUID, **kwargs: Any) -> None:
                if run_id == self.outer:
                    turns.done(position)

        return Ticket()


def answered_in_order(
    jobs: Sequence[tuple[Any, Trial]],
    make_handler: Callable[[], Any],
    callbacks: Sequence[Any],
    concurrency: int,
) -> Generator[_TrialDone, None, None]:
    """Each ``(chain, trial)``'s ``(trial, handler, documents, failure)``, in the order of
    ``jobs``, with at most ``concurrency`` chain calls in flight (docs/SPEC.md, "The study",
    concurrency).

    A bounded thread pool around the per-trial ``chain.invoke`` rather than ``chain.batch``:
    results are taken in trial order as they are ready (a record is on disk as soon as those
    before it are), and when the consumer stops (a failed trial, Ctrl-C) the trials not yet
    started are cancelled instead of all being asked for, as ``batch`` would. Retrievals keep
    trial order (:class:`_RetrievalTurns`)."""
    turns = _RetrievalTurns()

    def answer(position: int, chain: Any, trial: Trial) -> _TrialDone:
        handler = make_handler()
        run_config: Any = {
            "callbacks": [handler, *callbacks, turns.ticket(position)],
            "run_name": "fairrag-trial",
        }
        try:
            output = chain.invoke({"question": trial.question, "seed": trial.seed}, run_config)
            return trial, handler, output["context"], None
        except Exception as exc:
            return trial, handler, None, exc
        finally:
            turns.done(position)  # a trial that failed before retrieving frees the next one

    if concurrency == 1:
        for position, (chain, trial) in enumerate(jobs):
            yield answer(position, chain, trial)
        return
    from langchain_core.runnables.config import ContextThreadPoolExecutor

    with ContextThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(answer, i, chain, trial) for i, (chain, trial) in enumerate(jobs)]
        try:
            for future in futures:
                yield future.result()
        finally:  # those in flight finish (each bounded by --llm-timeout); the rest never start
            for future in futures:
                future.cancel()


def _many_rankings(
    config: StudyConfig,
    client: Any,
    collection: str,
    model: Any,
    corpus: Sequence[CorpusDocument],
    trials: Sequence[Trial],
    records: Sequence[Mapping[str, Any]],
    where: object,
) -> tuple[ManyRankings, list[QuestionPool]]:
    """The metrics over many rankings (:func:`fairrag_study.many_rankings.measure`) on the
    trials' pools, and those pools: the collection the trials searched, queried with the same
    question vectors (a short pool refused as in the trials)."""
    assert config.rankers is not None  # resolved by run_study
    embeddings = _query_embeddings(model)
    embeddings.prefill([trial.question for trial in trials])
    checked = _PoolCheckedCollection(client.get_collection(collection), len(corpus), where)
    pools = query_pools(
        checked,
        [embeddings.embed_query(trial.question) for trial in trials],
        trials,
        corpus,
        pool_size=config.pool_size,
        group_key=config.dataset.group_key,
    )
    try:
        many = measure(
            pools,
            records,
            config.rankers,
            dataset=config.dataset,
            k=config.k,
            samples=config.samples,
            alpha=config.alpha,
            seed=config.seed,
            exposure=config.exposure,
        )
    except NotInPoolError as exc:
        raise IndexDamagedError(
            f"the index at {where} no longer returns the trials' pools ({exc}): it changed "
            "during the run. Run the study again"
        ) from exc
    return many, pools


def _generator_name(config: StudyConfig, llm: Any) -> str:
    """``none``, ``fake``, ``local:<name>`` or ``openai:<model>``: the generator the trials
    used."""
    if llm is None:
        return "none"
    if config.llm.startswith("local"):
        return f"local:{llm.model_name}"
    if config.llm == "auto":
        return f"openai:{getattr(llm, 'model_name', 'gpt-4o-mini')}"
    return config.llm


def _trial_record(
    record: dict,
    ranker: str,
    trial: Trial,
    docs: Sequence[Any],
    topic_size: Mapping[str, int],
    k: int,
) -> dict:
    """The handler's record of this run (docs/SPEC.md, "Records"; ``source`` "study"), with the
    trial's identity and retrieval relevance."""
    relevant = [trial.topic in doc.metadata.get("topics", "").split("|") for doc in docs]
    return {
        "source": "study",
        "ranker": ranker,
        "trial": trial.index,
        "scenario": trial.scenario,
        "topic": trial.topic,
        "question": trial.question,
        "seed": trial.seed,
        **{k: v for k, v in record.items() if k not in ("ranker", "query", "source")},
        "precision_at_k": precision_at_k(relevant, k),
        "ndcg_at_k": ndcg_at_k(relevant, k, n_relevant=max(topic_size[trial.topic], sum(relevant))),
    }


def phase_timer(
    timings: dict[str, float], log: Callable[[str], None]
) -> Callable[[str], AbstractContextManager[None]]:
    """``with phase("trials"):`` times a phase into ``timings[name]`` and logs it."""

    @contextmanager
    def phase(name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            timings[name] = time.perf_counter() - start
            log(f"[{name}] {timings[name]:.1f} s")

    return phase

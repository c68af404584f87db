"""The trials phase: every ranker's retriever (and chain, with a generator) run on every
trial, one record each, in trial order (docs/SPEC.md, "The study", Records and concurrency)."""

from __future__ import annotations

import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any
from uuid import UUID

from fairrag_core import JsonLinesLog
from fairrag_core.metrics import ndcg_at_k, precision_at_k

from ..data import (
    CorpusDocument,
)
from ..errors import (
    GeneratorUnavailableError,
    StudyError,
)
from ..many_rankings import ranker_fields
from ..plan import Trial
from ..progress import progress_bar
from ..settings import GenerationSettings, TrialSettings
from .generation import (
    answers_kept,
    chat_model_errors,
    context_callbacks,
    llm_timeout,
    named_endpoint,
    pays,
    store_of,
)
from .index import StudyIndex, checked_store, query_embeddings


def _generator_error(
    exc: BaseException, settings: GenerationSettings, where: str, from_chat_model: bool = False
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
    server = named_endpoint(settings) or "api.openai.com"
    if not isinstance(exc, openai.APIError):
        what = f"sent a reply the client could not read ({type(exc).__name__}: {str(exc)[:300]})"
    elif isinstance(exc, openai.APITimeoutError):
        what = f"did not answer within --llm-timeout {llm_timeout(settings):g} s"
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
    retries = settings.llm_retries if settings.llm_retries is not None else 2
    return f"the chat model server {server} {what} ({where}, after {retries} retries)"


def run_trials(
    settings: TrialSettings,
    index: StudyIndex,
    corpus: Sequence[CorpusDocument],
    trials: Sequence[Trial],
    llm: Any,
    out: Path,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """The trials phase's entry: every ranker's retriever (and chain, with ``llm``) on every
    trial, one record each written to ``records.jsonl`` and the handler's to
    ``callback_log.jsonl``, in trial order (ranker by ranker)."""
    # docs/SPEC.md's cosine relevance 1 - d is negative for d > 1; LangChain warns about any score
    # outside [0, 1], once per query with the whole pool in the message. Expected here.
    warnings.filterwarnings(
        "ignore", message="Relevance scores must be between 0 and 1", category=UserWarning
    )
    from fairrag_langchain import FairnessCallbackHandler

    dataset = settings.dataset

    def trial_handler() -> FairnessCallbackHandler:
        # One handler per trial: its record is that trial's, whatever order the answers
        # arrive in; the callback log is written below, in trial order.
        return FairnessCallbackHandler(
            group_key=dataset.group_key,
            **dataset.target_arguments(),
            exposure=settings.exposure,
            max_records=None,
        )

    logs = JsonLinesLog(out / "records.jsonl"), JsonLinesLog(out / "callback_log.jsonl")
    topic_size = Counter(topic for doc in corpus for topic in doc.topics)
    chat_errors = chat_model_errors()
    records: list[dict[str, Any]] = []
    unit = "trial" if llm is None else "answer"
    bar = progress_bar(settings.progress, len(trials) * len(settings.rankers), f"{unit}s", unit)
    started = time.perf_counter()
    jobs = _jobs(settings, index, trials, llm)
    done: Generator[_TrialDone, None, None]
    if llm is None:
        done = (_retrieved(retriever, trial, trial_handler()) for _, retriever, _, trial in jobs)
    else:  # one queue over every ranker's trials: no drain between rankers
        done = answered_in_order(
            [(chain, trial) for _, _, chain, trial in jobs],
            trial_handler,
            [chat_errors, *context_callbacks(llm)],
            settings.concurrency,
        )
    with closing(done):  # a failure cancels the queued trials at once, not when collected
        for (ranker, *_), (trial, handler, docs, exc) in zip(jobs, done, strict=False):
            if exc is not None:
                done.close()  # the trials in flight finish first: their answers are counted
                where = f"trial {trial.index} of {ranker}; {len(records)} records kept"
                failed = any(exc is error for error in chat_errors.errors)
                raise _trial_failure(exc, settings, where, llm, failed)
            new = handler.records
            if len(new) != 1:
                raise RuntimeError(
                    f"expected one fairness record for trial {trial.index}, got {len(new)}"
                )
            logs[1].append(new[0])
            record = trial_record(new[0], ranker, trial, docs, topic_size, settings.k)
            logs[0].append(record)
            records.append(record)
            bar.update(1)
    bar.close()
    _log_pace(log, records, len(trials), settings, llm, time.perf_counter() - started)
    return records


def _jobs(
    settings: TrialSettings, index: StudyIndex, trials: Sequence[Trial], llm: Any
) -> list[tuple[str, Any, Any, Trial]]:
    """``(ranker, retriever, chain, trial)`` in run order: each ranker's retriever (and chain)
    built once, then its trials."""
    from fairrag_langchain import FairRetriever
    from fairrag_langchain.chains import make_fair_rag_chain

    embeddings = query_embeddings(index.model)
    embeddings.prefill([trial.question for trial in trials])
    store = checked_store(index.client, index.collection, embeddings, index.size, index.where)
    dataset = settings.dataset
    jobs: list[tuple[str, Any, Any, Trial]] = []
    for ranker in settings.rankers:
        retriever = FairRetriever(
            vectorstore=store,
            ranker=ranker,
            # fair: p = the target share, alpha 0.1; amortized: a fresh in-memory ledger
            **ranker_fields(
                ranker, alpha=settings.alpha, dataset=dataset, exposure=settings.exposure
            ),
            group_key=dataset.group_key,
            **dataset.target_arguments(),
            pool_size=settings.pool_size,
            k=settings.k,
            seed=settings.seed,
        )
        chain = None if llm is None else make_fair_rag_chain(retriever, llm)
        jobs.extend((ranker, retriever, chain, trial) for trial in trials)
    return jobs


def _trial_failure(
    exc: BaseException, settings: TrialSettings, where: str, llm: Any, from_chat_model: bool
) -> BaseException:
    """What a failed trial raises: the chat model server's failure as
    :class:`GeneratorUnavailableError` (saying which answers are kept), any other as itself."""
    message = _generator_error(exc, settings.generation, where, from_chat_model=from_chat_model)
    if message is None:
        return exc
    kept = answers_kept(store_of(llm), pays(settings.generation))
    failure = GeneratorUnavailableError(message + kept)
    failure.__cause__ = exc
    return failure


def _log_pace(
    log: Callable[[str], None],
    records: Sequence[Any],
    trials: int,
    settings: TrialSettings,
    llm: Any,
    seconds: float,
) -> None:
    log(f"{len(records)} trial records ({trials} trials x {len(settings.rankers)} rankers)")
    if llm is not None:
        log(
            f"{len(records)} answers in {seconds:.1f} s ({len(records) / max(seconds, 1e-9):.2f} "
            f"answers/s, --concurrency {settings.concurrency})"
        )


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


class _NotAsked(Exception):
    """A queued trial left unasked because an earlier one failed (never surfaced: the run
    stops at the failed trial, which comes first in trial order)."""


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
    failed_at = [len(jobs)]  # the first failed trial's position (the run stops there)
    lock = threading.Lock()

    def answer(position: int, chain: Any, trial: Trial) -> _TrialDone:
        handler = make_handler()
        if position > failed_at[0]:  # queued after a failed trial: never asked (the run
            # stops at that trial; a researcher's trial found queued answers paid after it)
            turns.done(position)
            return trial, handler, None, _NotAsked(f"trial {trial.index}: not asked")
        run_config: Any = {
            "callbacks": [handler, *callbacks, turns.ticket(position)],
            "run_name": "fairrag-trial",
        }
        try:
            output = chain.invoke({"question": trial.question, "seed": trial.seed}, run_config)
            return trial, handler, output["context"], None
        except Exception as exc:
            with lock:
                failed_at[0] = min(failed_at[0], position)
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


def trial_record(
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

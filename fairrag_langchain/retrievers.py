"""FairRetriever: fetch a candidate pool from any LangChain vector store and return a fair top-k,
re-ranked by a :mod:`fairrag_core` ranker."""

from __future__ import annotations

import asyncio
import functools
import inspect
import warnings
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterator,
    Mapping,
    Sequence,
)
from concurrent.futures import FIRST_COMPLETED, wait
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever, LangSmithRetrieverParams
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_config_list, get_executor_for_config
from langchain_core.runnables.utils import gather_with_concurrency
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator

from fairrag_core import VectorStoreUnavailableError, pool_scores
from fairrag_core.kit import check_store_order, distinct_pool, searched, to_relevance
from fairrag_core.kit.component import AUTO, Count, Relevance
from fairrag_core.kit.config import draw_query_seed
from fairrag_core.validation import check_k

from . import _private as private
from ._documents import checked_query
from ._fields import FairRankingFields, atell_empty_ranking, tell_empty_ranking

__all__ = ["RELEVANCE_FALLBACK", "FairRetriever"]

RELEVANCE_FALLBACK = "fallback: cosine_distance (1 - distance)"
"""``relevance_function`` of a pool scored by the spec's cosine rule because the store states
no relevance function (checked against the store's order: a store of similarities is refused)."""
_SIMILARITY_AS_IS = "fallback: similarity (InMemoryVectorStore)"
_INCOMING_ORDER = "incoming order ({store} returns no scores)"

_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)
try:  # the HTTP client of Chroma's HttpClient and of most hosted stores
    import httpx

    _TRANSPORT_ERRORS += (httpx.TransportError,)
except ImportError:  # pragma: no cover - httpx comes with langchain-core's langsmith
    pass


class _Named:
    """A named core conversion as the one-value function the retriever applies; the direction
    check reads ``conversion`` to name its opposite as the fix."""

    def __init__(self, conversion: str) -> None:
        self.conversion = conversion
        self.__name__ = conversion

    def __call__(self, value: float) -> float:
        return float(to_relevance([value], self.conversion)[0])


def _named(conversion: str) -> Callable[[float], float]:
    return _Named(conversion)


class FairRetriever(FairRankingFields, BaseRetriever):
    """Retrieve ``pool_size`` candidates from ``vectorstore``, return a fair top-``k``.

    Setup:
        ``pip install fairrag[langchain]``; any LangChain ``VectorStore`` works, Chroma (cosine
        space) is the first-class case.

    Instantiate:
        .. code-block:: python

            from fairrag_langchain import FairRetriever

            retriever = FairRetriever(
                vectorstore=Chroma(client=client, collection_name="trec", embedding_function=emb),
                ranker="representative_stochastic",
                group_key="gender",
                protected="female",  # target_share defaults to 0.5 (parity)
            )

    Invoke:
        .. code-block:: python

            docs = retriever.invoke("influential people in medicine", k=3, seed=7)
            docs[0].metadata  # {..., "relevance_score": 0.61, "fair_rank": 1, "pool_rank": 4,
                              #  "exposure_weight": 1.0, "ranker": "representative_stochastic",
                              #  "relevance_function": "store: cosine_relevance_score_fn"}

    Per call (docs/SPEC.md, "Adapters" → Per-call arguments), ``k`` and ``seed`` override the
    fields; ``search_kwargs={...}`` is merged into the field ``search_kwargs`` for that call and
    passed to the store's search as it is; any other keyword must be a search argument the
    store names (Chroma: ``filter``, ``where_document``; ``filter`` for every store) and is
    merged likewise; anything else (``bogus=``, the field ``pool_size=``) is a ``TypeError``
    naming it and what is accepted, before the store is called. Every call ranks with its own
    query seed (docs/SPEC.md, "Adapters" → Seeds): the per-call ``seed`` (an int, or a numpy
    ``Generator`` that gives one), else one drawn from the generator of the field ``seed``; it
    is written in each document's ``query_seed`` metadata, and passing it again with the same
    query re-draws the same documents, whatever ran before or concurrently. ``batch`` and
    ``abatch`` (and their ``_as_completed`` forms) draw the query seeds of all their inputs in
    input order before any runs, so a batch's rankings depend on its inputs' order, never on
    which thread came first; a ``seed`` given to them seeds the batch (the i-th input gets the
    i-th query seed of a generator built from it, as a fresh retriever with that ``seed``
    would draw), and a list of seeds gives each input its own.

    How the pool is scored: ``relevance`` names one of the core's conversions of
    ``similarity_search_with_score`` values (``similarity``, ``cosine_distance``,
    ``l2_distance``, ``negated``; :data:`fairrag_core.kit.RELEVANCE_CONVERSIONS`), or
    ``relevance_score_fn`` maps them; left unset, the store's own relevance
    (``similarity_search_with_relevance_scores``) when it states a relevance function, the
    similarities of an ``InMemoryVectorStore`` as they are, and otherwise the spec's rule for
    cosine distances, ``1 - distance``. Whatever the rule, relevance that rises along the
    store's best-first order is refused with a ``ValueError`` naming the conversion to use
    (:func:`fairrag_core.kit.check_store_order`): a store of similarities that states no
    relevance function is never ranked upside down. A store that returns no scores at all (only
    ``similarity_search``) is ranked by its order (the core's rule for unscored pools, with a
    warning). Each document's ``relevance_function`` metadata says which rule was used.

    Groups come from ``metadata[group_key]``: a candidate without it is an unknown group, and a
    ``group_key`` that no candidate carries is a ``KeyError`` naming the key and the fields that
    exist (both rules are the core's, :func:`fairrag_core.group_labels`). The pool is fetched
    with ``max(pool_size, k)`` candidates, so a per-call ``k`` above ``pool_size`` is honoured.

    A candidate whose ``Document.id`` repeats an earlier one's is left out before ranking (the
    first occurrence is kept; the rule is the core's :func:`fairrag_core.rerank`).

    A store that cannot be reached or does not answer in time (a connection refused or reset,
    a timeout, an HTTP transport error) raises
    :class:`fairrag_core.VectorStoreUnavailableError` for that call, naming the store and,
    when the error says, its address, with the original error as ``__cause__``. Nothing is
    retried or cached: the same retriever works again once the store is back. Timeouts are the
    client's: build a Chroma server client with
    :func:`fairrag_study.index.connect_chroma_server`, which sets them.

    Returned documents are copies (the store's objects and their metadata dicts are never
    changed) with the kit's placement metadata (``relevance_score``, the relevance ranked on;
    ``retrieval_score``, the store's score as it came; ``fair_rank``, ``pool_rank``,
    ``exposure_weight``, ``ranker``, ``query_seed``, ``pool_size``, ``fair_k``,
    ``fair_target``) and ``relevance_function``.

    The async path awaits the store's async search (``asimilarity_search_with_relevance_scores``
    / ``asimilarity_search_with_score``): native where the store implements it (Chroma's embedded
    client does not, so LangChain runs its sync search in an executor). The search is a plain
    store call that takes no callbacks, so there is no child run to hand ``run_manager`` to.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    vectorstore: VectorStore
    """The store the candidate pool is fetched from."""
    pool_size: Count = Field(default=50)
    """How many candidates to fetch before re-ranking (docs/SPEC.md: n = 50)."""
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Extra arguments of the store's search, e.g. ``{"filter": {"topics": "Medicine"}}``."""
    relevance: Relevance = AUTO
    """Named core conversion of ``similarity_search_with_score`` values ("auto": the store's)."""
    relevance_score_fn: Callable[[float], float] | None = None
    """Maps ``similarity_search_with_score`` values to relevance, replacing the rules above."""

    _relevance: tuple[tuple[Any, ...], tuple[Callable[[float], float] | None, str]] | None = (
        PrivateAttr(default=None)
    )
    _warned_unscored: bool = PrivateAttr(default=False)
    _warned_range: bool = PrivateAttr(default=False)
    _store_relevance: Callable[[float], float] | None = PrivateAttr(default=None)
    """The store's own relevance function, when its relevance search is LangChain's default
    (``similarity_search_with_score`` mapped by it): then the search maps the scores itself,
    without asking the store for its function again on every call."""

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Any:
        """A deep copy shares the vector store, a client of the data rather than the data
        (Chroma's in-process client cannot be copied at all); every other field is copied."""
        memo = {} if memo is None else memo
        memo[id(self.vectorstore)] = self.vectorstore
        return super().__deepcopy__(memo)

    @field_validator("search_kwargs")
    @classmethod
    def _no_k_in_search_kwargs(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "k" in value or "fetch_k" in value:
            raise ValueError(
                f"search_kwargs may not set 'k' (got {value!r}): pool_size sets how many "
                "candidates are fetched, k how many are returned"
            )
        return value

    def _shown(self) -> tuple[int, str]:
        return self.k, "k"  # checked when built and set (a k per call: when ranking)

    @model_validator(mode="after")
    def _consistent(self) -> FairRetriever:
        if self.relevance != AUTO and self.relevance_score_fn is not None:
            raise ValueError("give relevance or relevance_score_fn, not both")
        if self.pool_size <= self.k:
            warnings.warn(
                f"pool_size ({self.pool_size}) is not larger than k ({self.k}): the ranker "
                "has nothing to choose from beyond the documents it shows",
                UserWarning,
                stacklevel=2,
            )
        return self

    def _get_ls_params(self, **kwargs: Any) -> LangSmithRetrieverParams:
        """Standard tracing params, naming the vector store and its embeddings."""
        params = super()._get_ls_params(**kwargs)
        params["ls_vector_store_provider"] = type(self.vectorstore).__name__
        embeddings = self.vectorstore.embeddings
        if embeddings is not None:
            params["ls_embedding_provider"] = type(embeddings).__name__
        return params

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        seed: int | np.random.Generator | None = None,
        **search_kwargs: Any,
    ) -> list[Document]:
        query = checked_query(query, type(self).__name__)
        k, fetch_k, search = self._call_params(k, search_kwargs)
        store = self.vectorstore
        empty: list[dict[str, Any]] = []  # the ranking's keys when it places nothing
        with self._typed_store_errors():
            convert, name = self._relevance_function()
            try:
                if convert is None:
                    pool = searched(
                        distinct_pool(fetch_k, _scored_id),
                        lambda n: self._relevance_search(query, n, search),
                    )
                else:
                    pool = searched(
                        distinct_pool(fetch_k, _scored_id),
                        lambda n: store.similarity_search_with_score(query, k=n, **search),
                    )
            except NotImplementedError:
                documents = searched(
                    distinct_pool(fetch_k, _document_id),
                    lambda n: store.similarity_search(query, k=n, **search),
                )
                placed = self._place_unscored(documents, k, seed, empty)
                if empty:  # child callbacks made only then, off the common path
                    tell_empty_ranking(empty, run_manager.get_child())
                return placed
        placed = self._place(pool, convert, name, k, seed, empty)
        if empty:  # child callbacks made only then, off the common path
            tell_empty_ranking(empty, run_manager.get_child())
        return placed

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        seed: int | np.random.Generator | None = None,
        **search_kwargs: Any,
    ) -> list[Document]:
        try:
            return await self._afair_documents(
                query, run_manager=run_manager, k=k, seed=seed, **search_kwargs
            )
        except asyncio.CancelledError as exc:
            # LangChain's retriever tells its callbacks of an Exception only: a cancelled call
            # (a client's timeout) ended no run, so no record was written and a handler held
            # the run for good (a user trial: 1,000 timeouts, 1,000 runs held). Told here, it
            # is recorded as LangChain records a cancelled chain, ``CancelledError: ``.
            await asyncio.shield(run_manager.on_retriever_error(exc))
            raise

    async def _afair_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        seed: int | np.random.Generator | None = None,
        **search_kwargs: Any,
    ) -> list[Document]:
        from fairrag_core.ledger import run_off_loop, waits_on_ledger  # this method's own

        query = checked_query(query, type(self).__name__)
        k, fetch_k, search = self._call_params(k, search_kwargs)
        store = self.vectorstore
        empty: list[dict[str, Any]] = []  # the ranking's keys when it places nothing
        with self._typed_store_errors():
            convert, name = self._relevance_function()
            try:
                if convert is None:
                    pool = await _asearched(
                        distinct_pool(fetch_k, _scored_id),
                        lambda n: store.asimilarity_search_with_relevance_scores(
                            query, k=n, **search
                        ),
                    )
                else:
                    pool = await _asearched(
                        distinct_pool(fetch_k, _scored_id),
                        lambda n: store.asimilarity_search_with_score(query, k=n, **search),
                    )
            except NotImplementedError:
                documents = await _asearched(
                    distinct_pool(fetch_k, _document_id),
                    lambda n: store.asimilarity_search(query, k=n, **search),
                )
                if waits_on_ledger(self.core_ranker):  # a SQLite or Redis ledger: off the loop
                    placed = await run_off_loop(self._place_unscored, documents, k, seed, empty)
                else:
                    placed = self._place_unscored(documents, k, seed, empty)
                if empty:  # child callbacks made only then, off the common path
                    await atell_empty_ranking(empty, run_manager.get_child())
                return placed
        if waits_on_ledger(self.core_ranker):
            placed = await run_off_loop(self._place, pool, convert, name, k, seed, empty)
        else:
            placed = self._place(pool, convert, name, k, seed, empty)  # microseconds: on the loop
        if empty:  # child callbacks made only then, off the common path
            await atell_empty_ranking(empty, run_manager.get_child())
        return placed

    @contextmanager
    def _typed_store_errors(self) -> Iterator[None]:
        """Turn a transport failure of the store search into VectorStoreUnavailableError."""
        try:
            yield
        except VectorStoreUnavailableError:
            raise  # already typed (e.g. by fairrag_study.index.connect_chroma_server's client)
        except _TRANSPORT_ERRORS as exc:
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: BaseException) -> VectorStoreUnavailableError:
        """The typed error of a search that failed with a transport error."""
        where = _address(exc)
        return VectorStoreUnavailableError(
            f"{type(self.vectorstore).__name__}{where} is unavailable: the search for the "
            f"candidate pool failed with {type(exc).__name__}: {exc or 'no detail'}. Nothing was "
            "retried; this retriever works again once the store answers"
        )

    def _call_params(
        self, k: int | None, search_kwargs: dict[str, Any]
    ) -> tuple[int, int, dict[str, Any]]:
        k = self.k if k is None else check_k(k)
        return k, max(self.pool_size, k), {**self.search_kwargs, **self._call_search(search_kwargs)}

    def _call_search(self, given: dict[str, Any]) -> dict[str, Any]:
        """This call's search arguments: ``search_kwargs={...}`` as given, and the keywords the
        store's search names (docs/SPEC.md, "Adapters" → Per-call arguments)."""
        given = dict(given)
        explicit = given.pop("search_kwargs", None)
        accepted = _search_arguments(type(self.vectorstore))
        unknown = [name for name in given if name not in accepted]
        if unknown:
            raise TypeError(self._unknown_argument(unknown[0], accepted))
        if explicit is None:
            return given
        if not isinstance(explicit, Mapping):
            raise TypeError(
                "search_kwargs must be a dict of the store's search arguments, e.g. "
                f"{{'filter': {{...}}}}, got {explicit!r:.100}"
            )
        if "k" in explicit or "fetch_k" in explicit:
            raise ValueError(
                f"search_kwargs may not set 'k' (got {dict(explicit)!r}): pool_size sets how "
                "many candidates are fetched, k how many are returned"
            )
        return {**explicit, **given}

    def _unknown_argument(self, name: str, accepted: frozenset[str]) -> str:
        store = type(self.vectorstore).__name__
        message = (
            f"{type(self).__name__} got an unknown argument {name!r} for this call; it takes "
            f"k, seed, search_kwargs={{...}} (passed to the store's search as given) and the "
            f"search arguments {store} names: {sorted(accepted)}"
        )
        if name in type(self).model_fields:
            message += (
                f". {name} is a field: set it on the retriever (retriever.{name} = ..., "
                f"model_copy(update={{{name!r}: ...}})) or make it configurable "
                "(configurable_fields)"
            )
        return message

    def _batch_seeds(self, n: int, seed: Any) -> list[Any]:
        """The query seeds of a batch of ``n`` inputs, drawn in input order before any runs
        (docs/SPEC.md, "Adapters" → Seeds)."""
        if isinstance(seed, (list, tuple)):
            if len(seed) != n:
                raise ValueError(
                    f"seed: a list of seeds must give one per input ({n}), got {len(seed)}"
                )
            return list(seed)
        if seed is None:
            state = self.ranker_state
            return [state.query_seed() for _ in range(n)]
        if isinstance(seed, np.random.Generator):
            generator = seed
        else:
            generator = np.random.default_rng(draw_query_seed(seed, np.random.default_rng()))
        return [draw_query_seed(None, generator) for _ in range(n)]

    def batch(
        self,
        inputs: list[str],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """``Runnable.batch``, each input with its own query seed drawn in input order."""
        if not inputs:
            return []
        seeds = self._batch_seeds(len(inputs), kwargs.pop("seed", None))
        configs = get_config_list(config, len(inputs))

        def call(index: int) -> Any:
            try:
                return self.invoke(inputs[index], configs[index], seed=seeds[index], **kwargs)
            except Exception as exc:
                if return_exceptions:
                    return exc
                raise

        if len(inputs) == 1:
            return [call(0)]
        with get_executor_for_config(configs[0]) as executor:
            return list(executor.map(call, range(len(inputs))))

    async def abatch(
        self,
        inputs: list[str],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """``Runnable.abatch``, each input with its own query seed drawn in input order."""
        if not inputs:
            return []
        seeds = self._batch_seeds(len(inputs), kwargs.pop("seed", None))
        configs = get_config_list(config, len(inputs))

        async def call(index: int) -> Any:
            try:
                return await self.ainvoke(
                    inputs[index], configs[index], seed=seeds[index], **kwargs
                )
            except Exception as exc:
                if return_exceptions:
                    return exc
                raise

        calls = [call(index) for index in range(len(inputs))]
        return await gather_with_concurrency(configs[0].get("max_concurrency"), *calls)

    def batch_as_completed(
        self,
        inputs: Sequence[str],
        config: RunnableConfig | Sequence[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> Iterator[tuple[int, Any]]:
        """``Runnable.batch_as_completed``, each input with its own query seed drawn in input
        order."""
        if not inputs:
            return
        seeds = self._batch_seeds(len(inputs), kwargs.pop("seed", None))
        configs = get_config_list(config, len(inputs))

        def call(index: int) -> tuple[int, Any]:
            try:
                return index, self.invoke(
                    inputs[index], configs[index], seed=seeds[index], **kwargs
                )
            except Exception as exc:
                if return_exceptions:
                    return index, exc
                raise

        with get_executor_for_config(configs[0]) as executor:
            futures = {executor.submit(call, index) for index in range(len(inputs))}
            try:
                while futures:
                    done, futures = wait(futures, return_when=FIRST_COMPLETED)
                    while done:
                        yield done.pop().result()
            finally:
                for future in futures:
                    future.cancel()

    async def abatch_as_completed(
        self,
        inputs: Sequence[str],
        config: RunnableConfig | Sequence[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> AsyncIterator[tuple[int, Any]]:
        """``Runnable.abatch_as_completed``, each input with its own query seed drawn in input
        order."""
        if not inputs:
            return
        seeds = self._batch_seeds(len(inputs), kwargs.pop("seed", None))
        configs = get_config_list(config, len(inputs))
        limit = configs[0].get("max_concurrency")
        semaphore = asyncio.Semaphore(limit) if limit else None

        async def call(index: int) -> tuple[int, Any]:
            try:
                if semaphore is None:
                    output = await self.ainvoke(
                        inputs[index], configs[index], seed=seeds[index], **kwargs
                    )
                else:
                    async with semaphore:
                        output = await self.ainvoke(
                            inputs[index], configs[index], seed=seeds[index], **kwargs
                        )
            except Exception as exc:
                if return_exceptions:
                    return index, exc
                raise
            return index, output

        for next_done in asyncio.as_completed([call(index) for index in range(len(inputs))]):
            yield await next_done

    def _relevance_function(self) -> tuple[Callable[[float], float] | None, str]:
        """``(None, name)``: the store scores relevance itself; else ``(convert, name)``.

        Decided once per store and relevance setting (a property of the store's class and
        configuration, not of a query), and again when either field changes.
        """
        key = (id(self.vectorstore), self.relevance, self.relevance_score_fn)
        chosen = self._private("_relevance")
        if chosen is None or chosen[0] != key:
            self._store_relevance = None
            chosen = self._relevance = (key, self._choose_relevance_function())
        return chosen[1]

    def _relevance_search(
        self, query: str, fetch_k: int, search: dict[str, Any]
    ) -> list[tuple[Document, float]]:
        """``similarity_search_with_relevance_scores``: when the store keeps LangChain's default
        one, done here as it does it (the scores mapped by the store's relevance function, a
        warning for relevance outside [0, 1]) with the function chosen once."""
        store = self.vectorstore
        convert = self._private("_store_relevance")
        if convert is None or "score_threshold" in search:
            return store.similarity_search_with_relevance_scores(query, k=fetch_k, **search)
        pool = [
            (document, convert(score))
            for document, score in store.similarity_search_with_score(query, fetch_k, **search)
        ]
        outside = [r for _, r in pool if r < 0.0 or r > 1.0]  # as LangChain's (NaN: not outside)
        if outside and not self._private("_warned_range"):
            self._warned_range = True
            warnings.warn(_range_warning(store, convert, outside, len(pool)), stacklevel=2)
        return pool

    def _choose_relevance_function(self) -> tuple[Callable[[float], float] | None, str]:
        if self.relevance_score_fn is not None:
            fn = self.relevance_score_fn
            name = getattr(fn, "__name__", type(fn).__name__)
            return fn, f"given: {name}"
        if self.relevance != AUTO:
            return _named(self.relevance), f"given: {self.relevance}"
        store = self.vectorstore
        try:
            chosen = private.relevance_score_fn(store)
        except NotImplementedError:
            if _overrides_relevance_search(type(store)):
                return None, "store"
            if isinstance(store, InMemoryVectorStore):
                return _named("similarity"), _SIMILARITY_AS_IS
            return _named("cosine_distance"), RELEVANCE_FALLBACK
        except _TRANSPORT_ERRORS:  # the store is down: decide on the next call, not now
            raise
        except Exception:  # e.g. an unsupported distance: let the search say so, in its words
            return None, "store"
        if not _overrides_relevance_search(type(store)):
            self._store_relevance = chosen
        return None, f"store: {getattr(chosen, '__name__', 'relevance_score_fn').strip('_')}"

    def _place(
        self,
        pool: Sequence[tuple[Document, float]],
        convert: Callable[[float], float] | None,
        relevance_function: str,
        k: int,
        seed: int | np.random.Generator | None,
        empty: list[dict[str, Any]] | None = None,
    ) -> list[Document]:
        documents = [document for document, _ in pool]
        given = [score for _, score in pool]
        scores = np.asarray(given if convert is None else [convert(s) for s in given], dtype=float)
        check_store_order(
            scores,
            convert.conversion if isinstance(convert, _Named) else None,
            type(self.vectorstore).__name__,
            described=relevance_function,
            own_function="relevance_score_fn",
            raw=None if convert is None else np.asarray(given, dtype=float),
        )
        return self._rank(
            documents, scores, given, k, seed, relevance_function, scored=True, empty=empty
        )

    def _place_unscored(
        self,
        documents: Sequence[Document],
        k: int,
        seed: int | np.random.Generator | None,
        empty: list[dict[str, Any]] | None = None,
    ) -> list[Document]:
        store = type(self.vectorstore).__name__
        if not self._warned_unscored:
            self._warned_unscored = True
            warnings.warn(
                f"{store} implements no scored search: FairRetriever ranks its answer by "
                "the order it comes in (give relevance_score_fn or use a store with "
                "similarity_search_with_score for relevance-aware ranking)",
                UserWarning,
                stacklevel=3,
            )
        scores, _ = pool_scores([None] * len(documents))
        name = _INCOMING_ORDER.format(store=store)
        return self._rank(list(documents), scores, None, k, seed, name, scored=False, empty=empty)

    def _rank(
        self,
        documents: list[Document],
        scores: np.ndarray,
        given: Sequence[float] | None,
        k: int,
        seed: int | np.random.Generator | None,
        relevance_function: str,
        *,
        scored: bool,
        empty: list[dict[str, Any]] | None = None,
    ) -> list[Document]:
        return self._placed_ranking(
            documents,
            scores,
            k,
            seed=seed,
            given=given,
            scored=scored,
            empty=empty,
            extra={"relevance_function": relevance_function},
        )


def _document_id(document: Document) -> Any:
    return document.id


def _scored_id(pair: tuple[Document, float]) -> Any:
    return pair[0].id


_T = TypeVar("_T")


async def _asearched(
    asks: Generator[int, Sequence[_T], list[_T]], search: Callable[[int], Awaitable[Any]]
) -> list[_T]:
    """Drive :func:`fairrag_core.kit.distinct_pool`'s ``asks`` with an async ``search(n)``
    (the async twin of :func:`fairrag_core.kit.searched`)."""
    n = next(asks)
    try:
        while True:
            n = asks.send(await search(n))
    except StopIteration as done:
        return done.value


_SEARCH_METHODS = (
    "similarity_search_with_score",
    "similarity_search",
    "similarity_search_by_vector",
    "similarity_search_with_relevance_scores",
    "_similarity_search_with_relevance_scores",
)
_NOT_SEARCH_ARGUMENTS = frozenset({"self", "query", "embedding", "k", "fetch_k"})


@functools.lru_cache(maxsize=256)
def _search_arguments(store_type: type[VectorStore]) -> frozenset[str]:
    """The per-call keywords a store's search takes: ``filter`` (every LangChain store's
    convention) and the keyword parameters its search methods name (Chroma: ``filter``,
    ``where_document``); what a method takes only through ``**kwargs`` is not known."""
    names = {"filter"}
    for method in _SEARCH_METHODS:
        function = getattr(store_type, method, None)
        try:
            parameters = inspect.signature(function).parameters.values() if function else ()
        except (TypeError, ValueError):  # pragma: no cover - a builtin without a signature
            continue
        names.update(
            parameter.name
            for parameter in parameters
            if parameter.kind
            in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            and parameter.name not in _NOT_SEARCH_ARGUMENTS
        )
    return frozenset(names)


def _address(exc: BaseException) -> str:
    """`` at scheme://host:port`` when the error carries its request (httpx), else ``""``."""
    try:
        url = exc.request.url  # type: ignore[attr-defined]  # httpx errors (RuntimeError: none)
    except (AttributeError, RuntimeError):
        return ""
    port = f":{url.port}" if url.port is not None else ""
    return f" at {url.scheme}://{url.host}{port}"


def _range_warning(
    store: VectorStore, convert: Callable[[float], float], outside: Sequence[float], size: int
) -> str:
    """LangChain's relevance warning, bounded: the problem once, never the pool (one line)."""
    name = getattr(convert, "__name__", type(convert).__name__).strip("_")
    return (
        f"Relevance scores must be between 0 and 1: {len(outside)} of the {size} candidates "
        f"{type(store).__name__}'s relevance function {name} mapped are outside it (from "
        f"{min(outside):.4g} to {max(outside):.4g}); the ranking still uses them. Give "
        "FairRetriever relevance= (the store's distance or similarity) or relevance_score_fn= "
        "mapping its scores into [0, 1]. Warned once per retriever."
    )


def _overrides_relevance_search(store_type: type[VectorStore]) -> bool:
    """Whether the store computes relevance scores itself, without a relevance function."""
    return private.overrides_relevance_search(store_type)

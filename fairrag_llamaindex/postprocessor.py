"""A LlamaIndex node postprocessor that re-ranks a retrieved pool into a fair top-n.

Thin by design (docs/SPEC.md, "Adapters: one behaviour in every framework"): nodes -> (relevance,
groups) -> :func:`fairrag_core.rerank` -> new nodes. The ranker configuration, the per-query
seeds, the relevance conversions and their direction check, the title rule, the context text
and the placement metadata all come from the core's adapter kit, :mod:`fairrag_core.kit`; this
module only translates LlamaIndex's objects and finds where a pool came from.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from llama_index.core.bridge.pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
)
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle, TextNode

from fairrag_core import Placement, group_labels
from fairrag_core.kit import (
    LEDGER_PLACEMENT_KEYS,
    PLACEMENT_KEYS,
    RELEVANCE_CONVERSIONS,
    check_query_seed,
    context_header,
    document_title,
    hidden_metadata_keys,
    pool_relevance,
)
from fairrag_core.kit.component import AUTO, Count, FairComponent, Relevance

from . import _private as private
from .spans import SPANS, Retrieval, current_span_id, ensure_registered

__all__ = [
    "CONTEXT_HEADER_KEY",
    "MODEL_NAME_PREFIX",
    "FairRerankPostprocessor",
    "query_seed",
]

dispatcher = get_dispatcher(__name__)


class EmptyRankingEvent(BaseEvent):
    """Sent by a :class:`FairRerankPostprocessor` call, before its ``ReRankEndEvent``, when
    its ranking placed no node (an empty pool): the ranking's keys
    (:attr:`fairrag_core.kit.Placed.ranking`), which no node carries, for the record
    (docs/SPEC.md, "Adapters" → Which list is audited)."""

    ranking: dict[str, Any]

    @classmethod
    def class_name(cls) -> str:
        return "FairRAGEmptyRankingEvent"


MODEL_NAME_PREFIX = "fairrag:"
"""``ReRankStartEvent.model_name`` of this postprocessor is ``"fairrag:<ranker name>"``."""

CONTEXT_HEADER_KEY = "context_header"
"""Metadata key of each returned node's context header (``[i]`` and ``Title: ...``), the only
metadata the LLM sees (docs/SPEC.md, "Adapters" → Context text)."""
EMBED_FIELDS_KEY = "embedded_fields"
"""Metadata key of the ``key: value`` lines of the ``show_metadata_keys`` a returned node
holds, the only metadata the embedding model sees (absent when none is shown: it sees the
text alone)."""


@dataclass(eq=False)
class _SeedBlock:
    """One open ``query_seed`` block: its seed, the thread that opened it, the enclosing block,
    whether a ranking used it, and how many rankings ran without a query seed in other threads
    while it was open."""

    seed: Any
    thread: int
    outer: _SeedBlock | None
    used: bool = False
    unseeded_elsewhere: int = 0


_QUERY_SEED: contextvars.ContextVar[_SeedBlock | None] = contextvars.ContextVar(
    "fairrag_query_seed", default=None
)
_OPEN_SEED_BLOCKS: list[_SeedBlock] = []
_SEED_BLOCKS_LOCK = threading.Lock()


def _seed_of_this_call() -> Any:
    """The query seed of the ``query_seed`` block this ranking runs in (marking it used), else
    None (noting the ranking in every block open in another thread)."""
    block = _QUERY_SEED.get()
    if block is None:
        here = threading.get_ident()
        with _SEED_BLOCKS_LOCK:
            for other in _OPEN_SEED_BLOCKS:
                if other.thread != here:
                    other.unseeded_elsewhere += 1
        return None
    seed = block.seed
    while block is not None:
        block.used = True
        block = block.outer
    return seed


@contextlib.contextmanager
def query_seed(seed: int | np.random.Generator | None) -> Iterator[None]:
    """Rank every pool re-ranked inside the block with ``seed`` (docs/SPEC.md, "Adapters" →
    Seeds): ``with query_seed(7): engine.query(q)``.

    LlamaIndex passes no per-call arguments to a postprocessor, so the seed travels in a
    context variable, which asyncio tasks and LlamaIndex's worker threads copy: concurrent
    queries each keep their own. Every node and record of that query carries ``query_seed``;
    passing the same seed again re-draws the same ranking. None: the postprocessor draws one
    from its own generator (built from its ``seed`` field).

    A thread started by the caller does not inherit context variables: queries a
    ``ThreadPoolExecutor`` runs inside the block do not see the seed. A block whose seed no
    ranking used while rankings without a query seed ran in other threads warns when it exits;
    run each call in the block's context, ``pool.submit(contextvars.copy_context().run,
    engine.query, q)``, or enter ``query_seed`` inside the worker.
    """
    check_query_seed(seed, "query_seed(seed)")  # here, not at the block's first query
    block = _SeedBlock(seed, threading.get_ident(), _QUERY_SEED.get())
    token = _QUERY_SEED.set(block)
    if seed is not None:
        with _SEED_BLOCKS_LOCK:
            _OPEN_SEED_BLOCKS.append(block)
    try:
        yield
    finally:
        _QUERY_SEED.reset(token)
        if seed is not None:
            with _SEED_BLOCKS_LOCK:
                _OPEN_SEED_BLOCKS.remove(block)
            if not block.used and block.unseeded_elsewhere:
                warnings.warn(
                    f"query_seed({seed!r}) was used by no ranking, while "
                    f"{block.unseeded_elsewhere} ranking(s) ran without a query seed in other "
                    "threads during the block: threads (a ThreadPoolExecutor's workers) do not "
                    "inherit context variables. Run each call in the block's context, "
                    "pool.submit(contextvars.copy_context().run, engine.query, q), or enter "
                    "query_seed inside the worker",
                    UserWarning,
                    stacklevel=3,
                )


@dataclass(frozen=True)
class _Source:
    """Where a pool came from, as far as the open spans tell: the retriever's vector store (or
    None), whether the nodes come straight from the retriever (this postprocessor is the
    engine's first), and a name for messages. ``found`` is False outside any engine."""

    found: bool
    store: Any = None
    straight: bool = False
    name: str = "the store"
    fused: tuple[Any, ...] = ()
    """The member stores of a ``QueryFusionRetriever`` in ``simple`` mode, whose scores its
    list keeps (empty for any other retriever)."""
    retrieved: tuple[Retrieval, ...] | None = None
    """For a retriever without a store of its own that is no fusion (a custom ``BaseRetriever``
    holding another, ``RecursiveRetriever``): the store retrievals that finished inside this
    engine call, the evidence of which store's scores the nodes carry (None otherwise)."""


@dataclass(eq=False)
class _Instance:
    """What this module keeps about one postprocessor object: its lineage (shared with the
    copies made from it) and the warnings it gave already."""

    lineage: object
    warned: set[str] = field(default_factory=set)
    conversions: dict[int, tuple[weakref.ref[Any], str]] = field(default_factory=dict)
    """The conversion ``auto`` read from each store (by ``id``, with a weak reference that
    tells a reused id apart): a store's metric is read once, not on every query (reading a
    Qdrant collection's distance is a call to its server)."""


_INSTANCES: dict[int, _Instance] = {}
_INSTANCES_LOCK = threading.Lock()


def _instance(postprocessor: Any, lineage: object | None = None) -> _Instance:
    """The entry of ``postprocessor`` (made on first use; ``lineage``: a copy's, adopted)."""
    key = id(postprocessor)
    with _INSTANCES_LOCK:
        found = _INSTANCES.get(key)
        if found is None or lineage is not None:
            found = _INSTANCES[key] = _Instance(lineage if lineage is not None else object())
            weakref.finalize(postprocessor, _INSTANCES.pop, key, None)
    return found


def lineage_of(postprocessor: Any) -> object:
    """A token a postprocessor shares with every copy made from it (``model_copy``,
    ``copy.copy``, ``copy.deepcopy``) and with nothing else: a handler built from a
    postprocessor records the runs of that lineage (docs/SPEC.md, "Records" → scope)."""
    return _instance(postprocessor).lineage


def _first_time(postprocessor: Any, warning: str) -> bool:
    """True the first time ``postprocessor`` asks about ``warning`` (warn once per object)."""
    entry = _instance(postprocessor)
    with _INSTANCES_LOCK:
        if warning in entry.warned:
            return False
        entry.warned.add(warning)
    return True


def _warned(postprocessor: Any, warning: str) -> bool:
    """Whether ``postprocessor`` gave ``warning`` already (without marking it)."""
    entry = _INSTANCES.get(id(postprocessor))
    return entry is not None and warning in entry.warned


def _is_chroma(store: Any) -> bool:
    return any(cls.__name__ == "ChromaVectorStore" for cls in type(store).__mro__)


def _store_of(retriever: Any) -> Any:
    return private.vector_store(retriever)


def _fused_stores(retriever: Any) -> tuple[Any, ...]:
    """The member stores whose scores a ``QueryFusionRetriever`` passes on: in its ``simple``
    mode the fused list keeps each node's original score (the best over queries and members);
    other modes score the list themselves (empty: its scores are similarities of its own)."""
    members = private.fusion_members(retriever)
    mode = getattr(retriever, "mode", None)
    if members is None or mode is None or getattr(mode, "value", mode) != "simple":
        return ()
    return tuple(_store_of(member) for member in members)


def _is_fusion(retriever: Any) -> bool:
    return private.fusion_members(retriever) is not None and hasattr(retriever, "mode")


def _scoring_store(source: _Source, nodes: Sequence[NodeWithScore]) -> Any:
    """The store whose scores the pool carries, for ``auto``: the retriever's, or the one
    Chroma store (space) of a simple-mode fusion's members (an error when they mix Chroma with
    other stores or spaces, whose scores mean different things), or, behind a retriever that
    wraps another, the store the evidence names (:func:`_store_by_evidence`)."""
    if source.retrieved is not None:
        return _store_by_evidence(source, nodes)
    if not source.fused:
        return source.store
    chroma = [store for store in source.fused if store is not None and _is_chroma(store)]
    if not chroma:
        return None
    if len(chroma) < len(source.fused) or len({_chroma_space(store) for store in chroma}) > 1:
        raise ValueError(
            f"relevance='auto' cannot tell what these nodes' scores mean: the {source.name} "
            "(simple mode) merges the scores of ChromaVectorStore members with those of other "
            "stores or spaces, which mean different things. Name the conversion: relevance "
            f"in {sorted(RELEVANCE_CONVERSIONS)}"
        )
    return chroma[0]


def _store_by_evidence(source: _Source, nodes: Sequence[NodeWithScore]) -> Any:
    """The store whose scores the nodes carry behind a retriever without a store of its own,
    from what the store retrievals inside this engine call returned (docs/SPEC.md, "Adapters"
    → Relevance): a node carries a store's score when that store's retrieval returned the node
    (same ``node_id``) with the very same score.

    No ChromaVectorStore retrieval ran: None (every other store, and a retriever scoring its
    own list, report similarities). Every scored node carries the score one Chroma collection
    space returned: that store. Anything else (a node whose score no Chroma retrieval returned,
    Chroma collections of different spaces) is an error naming the fix: never a guess.
    """
    retrieved = source.retrieved or ()
    chroma = [r for r in retrieved if _is_chroma(_store_of(r.retriever))]
    if not chroma:
        return None
    carriers: dict[tuple[str, float | None], list[Any]] = {}
    for retrieval in chroma:
        store = _store_of(retrieval.retriever)
        for pair in retrieval.scored:
            carriers.setdefault(pair, []).append(store)
    scored = [(n.node.node_id, float(n.score)) for n in nodes if n.score is not None]
    found = [carriers.get(pair, []) for pair in scored]
    unlinked = sum(not stores for stores in found)
    spaces = {_chroma_space(store) for stores in found for store in stores}
    if unlinked == 0 and len(spaces) == 1:
        return found[0][0]
    problem = (
        f"{unlinked} of these {len(scored)} nodes do not carry the score a ChromaVectorStore "
        "retrieval inside it returned for them (the retriever changed or merged scores, or "
        "added nodes of other sources)"
        if unlinked
        else "the nodes carry the scores of Chroma collections of different distance spaces"
    )
    raise ValueError(
        f"relevance='auto' cannot tell what these nodes' scores mean: the {source.name} has no "
        f"store of its own and {problem}. Name the conversion: relevance='chroma_cosine' (or "
        "'chroma_l2' for an l2 collection) when the scores are still Chroma's exp(-distance), "
        "'similarity' when they are the retriever's own and higher is better, or another of "
        f"{sorted(RELEVANCE_CONVERSIONS)}; FairRerankPostprocessor.for_index(index, ...) names "
        "the conversion of that index's store"
    )


def _pool_source(postprocessor: Any) -> _Source:
    """The engine this call runs in, found through the open spans (innermost first)."""
    span_id = current_span_id()
    for span in SPANS.ancestors(span_id):
        engine = span.instance
        if engine is postprocessor:
            continue  # its own span: a postprocessor is no engine
        retriever = private.engine_retriever(engine)
        chain = private.node_postprocessors(engine)
        if retriever is None or chain is None:
            continue
        store = _store_of(retriever)
        straight = bool(chain) and chain[0] is postprocessor
        fused = _fused_stores(retriever) if store is None else ()
        name = type(store).__name__ if store is not None else type(retriever).__name__
        retrieved = None
        if store is None and not _is_fusion(retriever):
            retrieved = tuple(
                r for r in SPANS.finished(span_id) if _store_of(r.retriever) is not None
            )
        return _Source(True, store, straight, name, fused, retrieved)
    return _Source(False)


_FAISS_METRICS = {0: "similarity", 1: "l2_distance"}
"""FAISS ``metric_type`` → conversion: ``METRIC_INNER_PRODUCT`` (0) reports the inner product
(higher = better), ``METRIC_L2`` (1) the squared L2 distance (lower = better: ``-d``)."""


def _is_named(store: Any, *names: str) -> bool:
    return any(cls.__name__ in names for cls in type(store).__mro__)


def _qdrant_distance(store: Any) -> str | None:
    """The distance of a QdrantVectorStore's collection (``Cosine``, ``Dot``, ``Euclid``,
    ``Manhattan``; None when it cannot be read or differs between named vectors). An
    async-only store (no sync ``client``) is refused: its metric cannot be read without
    awaiting, so ``relevance`` must be named."""
    if getattr(store, "client", None) is None:
        raise ValueError(
            "relevance='auto' cannot read the distance of this QdrantVectorStore's collection: "
            "it has only an async client (aclient), whose read cannot run here. Name the "
            "conversion: relevance='similarity' for Cosine or Dot or 'l2_distance' for Euclid "
            "or Manhattan"
        )
    try:
        vectors = store.client.get_collection(store.collection_name).config.params.vectors
        params = vectors.values() if isinstance(vectors, dict) else [vectors]
        distances = {str(getattr(p.distance, "value", p.distance)) for p in params}
    except Exception:  # a collection not made yet, a server down
        return None
    return distances.pop() if len(distances) == 1 else None


def _relevance_for_store(store: Any) -> str:
    """The conversion a store's scores need, read from the store's distance metric:
    ChromaVectorStore reports ``exp(-d)``, ``d`` the distance of its collection's space
    (``chroma_cosine``: ``1 - d`` for cosine and ip, ``chroma_l2``: ``-d`` for l2, Chroma's
    default); FaissVectorStore reports what its FAISS index computes (``similarity`` for an
    inner-product index, ``l2_distance`` for ``IndexFlatL2`` and every other L2 index);
    QdrantVectorStore the score of its collection's distance (``similarity`` for Cosine and
    Dot, ``l2_distance`` for Euclid and Manhattan, which it reports as distances). A metric
    that cannot be read, or another one, is an error naming the conversions: never a guess
    that could invert the ranking. Stores with a fixed similarity (LlamaIndex's own
    ``SimpleVectorStore`` and the others) report a similarity (higher = better)."""
    if store is None:
        return "similarity"
    if _is_named(store, "FaissVectorStore", "FaissMapVectorStore"):
        metric = getattr(private.faiss_index(store), "metric_type", None)
        if metric in _FAISS_METRICS:
            return _FAISS_METRICS[metric]
        raise ValueError(
            f"relevance='auto' cannot tell what this FaissVectorStore's scores mean (FAISS "
            f"metric_type {metric!r}; read: 0 inner product, 1 L2): name the conversion, "
            "relevance='similarity' when higher is better or 'l2_distance' for a distance"
        )
    if _is_named(store, "QdrantVectorStore"):
        distance = _qdrant_distance(store)
        if distance in ("Cosine", "Dot"):
            return "similarity"
        if distance in ("Euclid", "Manhattan"):
            return "l2_distance"
        raise ValueError(
            f"relevance='auto' cannot tell what this QdrantVectorStore's scores mean (its "
            f"collection's distance read as {distance!r}): name the conversion, "
            "relevance='similarity' for Cosine or Dot or 'l2_distance' for Euclid or Manhattan"
        )
    if not _is_chroma(store):
        return "similarity"
    space = _chroma_space(store)
    if space in ("cosine", "ip"):
        return "chroma_cosine"
    if space == "l2":
        return "chroma_l2"
    raise ValueError(
        f"relevance='auto' cannot tell the distance space of this ChromaVectorStore's "
        f"collection (read {space!r}): name the conversion, relevance='chroma_cosine' for a "
        "cosine or ip space or 'chroma_l2' for l2"
    )


def _chroma_space(store: Any) -> str | None:
    """The distance space of a ChromaVectorStore's collection (None when it cannot be read)."""
    collection = private.chroma_collection(store)
    try:
        configuration = collection.configuration or {}
    except Exception:  # an older client or a collection object without one
        configuration = {}
    for index in ("hnsw", "spann"):
        space = (configuration.get(index) or {}).get("space")
        if space is not None:
            return str(space)
    metadata = getattr(collection, "metadata", None) or {}
    space = metadata.get("hnsw:space") if isinstance(metadata, dict) else None
    return None if space is None else str(space)


class FairRerankPostprocessor(FairComponent, BaseNodePostprocessor):
    """Re-rank the retrieved pool with a fairness-aware core ranker and keep the top ``top_n``.

    Use it with a large pool: ``index.as_query_engine(similarity_top_k=50,
    node_postprocessors=[FairRerankPostprocessor(group_key="gender", protected="female")])``.
    Every rule is docs/SPEC.md's ("Adapters"), taken from :mod:`fairrag_core.kit`.

    **Configuration.** ``ranker``, ``protected``, ``target_share``, ``target``, ``seed`` and
    ``ranker_params`` describe one ranker, rebuilt whenever one of them changes (assignment,
    ``model_copy(update=...)``); an assignment the core refuses is undone and raised. Copies
    (``model_copy``, ``copy.deepcopy``, a pickle sent to a process pool) never share a
    generator: the i-th copy draws the i-th spawned stream of ``seed`` (distinct and
    reproducible, docs/SPEC.md "Adapters" → Copies). Unknown arguments are refused.

    **Relevance.** Each node's ``score`` converted by ``relevance`` (a name of
    :data:`fairrag_core.kit.RELEVANCE_CONVERSIONS`). ``"auto"`` (default) reads the engine that
    runs the postprocessor (a query or chat engine, found through LlamaIndex's instrumentation
    spans): over a ``ChromaVectorStore`` it is ``chroma_cosine`` (``1 + ln s`` = the spec's
    ``1 - d``) on a cosine (or ip) collection and ``chroma_l2`` (``ln s = -d``) on an l2 one,
    also behind a ``QueryFusionRetriever`` in its ``simple`` mode (which keeps the members'
    scores; members mixing Chroma and other stores or spaces are refused), and over any other
    retriever (other fusion modes score their list themselves) ``similarity``. Behind a
    retriever without a store of its own (a custom ``BaseRetriever`` holding another,
    ``RecursiveRetriever``) it follows the evidence: the nodes carry a Chroma collection's
    scores when a retrieval inside the engine call returned each of them with that very score.
    Where the source cannot be told (a direct ``postprocess_nodes`` call; a Chroma pool already
    changed by an earlier postprocessor or by the wrapping retriever) ``"auto"`` refuses: build
    with :meth:`for_index`, or name the conversion.
    When the nodes come straight from the retriever, relevance that rises along its order is
    refused (:func:`fairrag_core.kit.check_store_order`). A pool without any score is ranked by
    its incoming order; a partly scored one is an error (:func:`fairrag_core.pool_scores`).

    **Seeds.** Each call ranks with a query seed: the one given by :func:`query_seed`, else one
    drawn from the postprocessor's generator (built from ``seed``). Copies of a postprocessor
    (``model_copy``, ``copy.copy``, ``copy.deepcopy``) are recorded as its own by a handler built
    from it (:meth:`FairnessEventHandler.from_postprocessor`).

    **Output.** New :class:`NodeWithScore` objects over copies of the nodes (inputs are never
    mutated), best first. The score is the relevance ranked on (None for an unscored pool), as
    LlamaIndex's rerankers do; the metadata gains the kit's placement keys
    (:data:`fairrag_core.kit.PLACEMENT_KEYS`) and :data:`CONTEXT_HEADER_KEY`. The LLM sees
    :func:`fairrag_core.kit.context_entry` of each node (``[i]``, ``Title: ...``, a ``key:
    value`` line per metadata field the node leaves visible to the LLM, the text); the
    embedding model sees the text; the group key, the title key and placement keys only when
    named in ``show_metadata_keys``. ``[i]`` is the node's fair rank, so a later step
    that reorders the nodes (``LongContextReorder``) leaves each number on its document. A
    node whose text starts with whitespace is returned with that whitespace removed (the kit's
    entry shows the stripped text). A node whose ``node_id`` repeats an earlier one's is
    dropped before ranking (the core's rule).

    Emits ``ReRankStartEvent`` / ``ReRankEndEvent`` (``model_name`` ``"fairrag:<ranker>"``)
    and the legacy ``CBEventType.RERANKING`` callback event. Warns once when a pool is not
    larger than ``top_n`` (LlamaIndex's default ``similarity_top_k=2`` leaves nothing to do),
    and once when the pool's nodes embed the group key (it is missing from their
    ``excluded_embed_metadata_keys``).
    """

    model_config = ConfigDict(
        arbitrary_types_allowed=True, extra="forbid", validate_assignment=True
    )

    # ranker, group_key, protected, target_share, target, seed, ranker_params, exposure, ledger
    # and ledger_key: the component contract (fairrag_core.kit.component.FairComponent)
    relevance: Relevance = Field(
        default=AUTO,
        description=(
            "How node scores become relevance: 'auto' (from the engine's store), or one of "
            "fairrag_core.kit.RELEVANCE_CONVERSIONS (similarity, cosine_distance, "
            "chroma_cosine, l2_distance, chroma_l2, negated)."
        ),
    )
    top_n: Count = Field(default=5, description="Number of nodes to return (the context k).")
    title_key: str = Field(
        default="title", description="Node metadata field holding the document title."
    )
    show_metadata_keys: list[str] = Field(
        default_factory=list,
        description="Metadata keys shown to the LLM and the embedding model (default: none).",
    )

    _warned_small_pool: bool = PrivateAttr(default=False)

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)  # the contract builds the ranker: bad config fails
        ensure_registered()

    def _shown(self) -> tuple[int, str]:
        return self.top_n, "top_n"  # checked when built and set

    @classmethod
    def class_name(cls) -> str:
        return "FairRerankPostprocessor"

    @classmethod
    def for_index(cls, index: Any, **fields: Any) -> FairRerankPostprocessor:
        """A postprocessor whose ``relevance`` is the one ``index.vector_store`` needs, read
        from the store's distance metric (a ChromaVectorStore's collection space, a
        FaissVectorStore's index metric, a QdrantVectorStore's collection distance), or a
        ``ValueError`` when the metric cannot be read: never a guess that inverts the ranking
        (docs/SPEC.md, "Adapters" → Relevance)."""
        store = getattr(index, "vector_store", None)
        if store is None:
            raise ValueError(
                f"index must have a vector_store (a VectorStoreIndex), got {type(index).__name__}"
            )
        return cls(**{"relevance": _relevance_for_store(store), **fields})

    @property
    def model_name(self) -> str:
        """``"fairrag:<ranker name>"``, the ``model_name`` of the ReRankStartEvent."""
        return MODEL_NAME_PREFIX + self.core_ranker.name

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        return self._fair_rerank(nodes, query_bundle)

    @dispatcher.span
    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        from fairrag_core.ledger import run_off_loop, waits_on_ledger

        # Ranking 50 candidates takes microseconds: run it on the loop, unless the ranker waits
        # on a SQLite or Redis ledger, which must never stall the loop.
        if waits_on_ledger(self.core_ranker):
            return await run_off_loop(self._fair_rerank, nodes, query_bundle)
        return self._fair_rerank(nodes, query_bundle)

    def __copy__(self) -> FairRerankPostprocessor:
        copied = super().__copy__()
        _instance(copied, lineage_of(self))  # a copy is recorded as its original's
        return copied

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> FairRerankPostprocessor:
        copied = super().__deepcopy__(memo)
        _instance(copied, lineage_of(self))
        return copied

    def _conversion(self, source: _Source, nodes: Sequence[NodeWithScore]) -> str:
        """The relevance conversion of this call (``relevance``, or what ``auto`` resolves to)."""
        if self.relevance != AUTO:
            return self.relevance
        if not source.found:
            raise ValueError(
                "relevance='auto' cannot tell where these nodes' scores come from: no query or "
                "chat engine runs this postprocess_nodes call. Build it with "
                "FairRerankPostprocessor.for_index(index, ...), or name the conversion: "
                f"relevance in {sorted(RELEVANCE_CONVERSIONS)} ('chroma_cosine' for "
                "ChromaVectorStore scores of a cosine collection, 'chroma_l2' of an l2 one, "
                "'similarity' for scores where higher is better)"
            )
        store = _scoring_store(source, nodes)
        if _is_chroma(store) and not source.straight:
            raise ValueError(
                "relevance='auto' cannot tell whether these nodes still carry "
                "ChromaVectorStore's scores: another postprocessor runs before this one. Set "
                "relevance='chroma_cosine' or 'chroma_l2' (scores still Chroma's "
                "exp(-distance), cosine or l2 space) or 'similarity' (scores set by the earlier "
                "step)"
            )
        return self._store_conversion(store)

    def _store_conversion(self, store: Any) -> str:
        """:func:`_relevance_for_store`, read once per store and kept (a metric that cannot be
        read is an error, not kept: the next query reads it again)."""
        if store is None:
            return _relevance_for_store(store)
        kept = _instance(self).conversions
        found = kept.get(id(store))
        if found is not None and found[0]() is store:
            return found[1]
        conversion = _relevance_for_store(store)
        try:
            kept[id(store)] = (weakref.ref(store), conversion)
        except TypeError:  # a store without weak references: read on every query
            pass
        return conversion

    def _fair_rerank(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ValueError(
                "FairRerankPostprocessor needs the query: pass query_bundle=QueryBundle(...) or "
                "query_str=... to postprocess_nodes"
            )
        state = self.ranker_state
        # Translate (and so validate) before any event, so a bad pool leaves no open rerank.
        source = _pool_source(self)
        given: list[Any] = []
        metadatas: list[dict[str, Any]] = []
        ids: list[str] = []
        key = self.group_key
        look = not _warned(self, "embedded_group")  # once warned, no need to look again
        embedded = 0
        for position, item in enumerate(nodes):  # one pass: scores, metadata and ids as they came
            if not isinstance(item, NodeWithScore):
                raise TypeError(
                    "FairRerankPostprocessor ranks NodeWithScore objects (a retriever's "
                    "results; wrap a node as NodeWithScore(node=..., score=...)); position "
                    f"{position} holds a {type(item).__name__}"
                )
            node = item.node
            metadata = node.metadata
            given.append(item.score)
            metadatas.append(metadata)
            ids.append(node.node_id)
            if look and key in metadata and key not in node.excluded_embed_metadata_keys:
                embedded += 1
        # a partly scored pool is refused by pool_relevance before "auto" is resolved
        scored = all(score is not None for score in given)
        conversion = self._conversion(source, nodes) if scored else None
        scores, scored = pool_relevance(
            given, conversion, store=source.name if source.straight else None
        )
        group_labels(metadatas, key)  # a wrong group key fails before any event
        self._warn_small_pool(len(nodes))
        if embedded:
            self._warn_embedded_group(embedded, len(nodes))
        model_name = MODEL_NAME_PREFIX + state.ranker.name
        dispatcher.event(
            ReRankStartEvent(
                query=query_bundle, nodes=nodes, top_n=self.top_n, model_name=model_name
            )
        )
        with self.callback_manager.event(
            CBEventType.RERANKING,
            payload={
                EventPayload.NODES: nodes,
                EventPayload.MODEL_NAME: model_name,
                EventPayload.QUERY_STR: query_bundle.query_str,
                EventPayload.TOP_K: self.top_n,
            },
        ) as event:
            placed = self.place(
                metadatas,
                scores,
                self.top_n,
                ids=ids,
                given=given,
                scored=scored,
                seed=_seed_of_this_call(),
            )
            never = self._never_shown()
            reranked = [
                self._placed(nodes[p.pool_index], metadata, p, never)
                for p, metadata in zip(placed.reranking.placements, placed.metadatas, strict=True)
            ]
            event.on_end(payload={EventPayload.NODES: reranked})
        if not reranked:  # no node carries the ranking's keys: the handlers hear them here
            dispatcher.event(EmptyRankingEvent(ranking=placed.ranking))
        dispatcher.event(ReRankEndEvent(nodes=reranked))
        return reranked

    def _warn_small_pool(self, size: int) -> None:
        if 0 < size <= self.top_n and not self._warned_small_pool:
            self._warned_small_pool = True
            warnings.warn(
                f"FairRerankPostprocessor got a pool of {size} nodes for top_n={self.top_n}: "
                "nothing to re-rank. Retrieve a larger pool, e.g. "
                "index.as_query_engine(similarity_top_k=50, ...) (LlamaIndex's default is 2)",
                UserWarning,
                stacklevel=3,
            )

    def _warn_embedded_group(self, embedded: int, size: int) -> None:
        """Warn once per postprocessor when ``embedded`` of the pool's ``size`` nodes embed the
        group label: their ``excluded_embed_metadata_keys`` lacks ``group_key``, so the index
        embedded it and the retrieval itself leaned on the group (docs/SPEC.md, "Adapters" →
        Context text)."""
        key = self.group_key
        if _first_time(self, "embedded_group"):
            warnings.warn(
                f"{embedded} of the {size} nodes FairRerankPostprocessor re-ranks embed "
                f"the group key {key!r} (it is not in their excluded_embed_metadata_keys): an "
                "index built from them embedded each node's group, so the retrieval itself "
                "leans on the group label before any fair re-ranking. Add "
                f"{key!r} to every document's excluded_embed_metadata_keys (and "
                "excluded_llm_metadata_keys) before indexing, then build the index again",
                UserWarning,
                stacklevel=3,
            )

    def _never_shown(self) -> frozenset[str]:
        """The keys the context never shows besides the title: the group key, the title key,
        the header, the embedded fields and the placement keys."""
        return frozenset(
            (self.group_key, self.title_key, CONTEXT_HEADER_KEY, EMBED_FIELDS_KEY, *PLACEMENT_KEYS)
        ).union(LEDGER_PLACEMENT_KEYS)

    def _visible_fields(
        self,
        node: BaseNode,
        never: frozenset[str] | None = None,
        placement: Mapping[str, Any] | None = None,
    ) -> list[tuple[str, Any]]:
        """The metadata the context shows besides the title: every field the user made visible
        to the LLM (not in the node's ``excluded_llm_metadata_keys``) except the group key, the
        title key and the placement keys, then the ``show_metadata_keys`` (docs/SPEC.md,
        "Adapters" → Context text), read from ``placement`` (the node's metadata with this
        ranking's placement: a user trial found ``fair_rank`` never shown, read before it was
        set) when given. ``never``: :meth:`_never_shown`, when already known."""
        metadata = node.metadata if placement is None else placement
        if never is None:
            never = self._never_shown()
        excluded = node.excluded_llm_metadata_keys
        keys = [k for k in node.metadata if k not in never and k not in excluded]
        if self.show_metadata_keys:  # the title is the header's own line (a user trial: twice)
            keys += [
                k
                for k in self.show_metadata_keys
                if k in metadata and k not in keys and k != self.title_key
            ]
        return [(key, metadata[key]) for key in keys]

    def _placed(
        self,
        original: NodeWithScore,
        placement: dict[str, Any],
        where: Placement,
        never: frozenset[str] | None = None,
    ) -> NodeWithScore:
        """A new NodeWithScore over a copy of ``original.node`` carrying the placement, whose
        LLM text is the kit's context entry (with the metadata the user made visible) and
        whose embedding text hides the group."""
        node = original.node
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        fields = self._visible_fields(node, never, placement)
        title = document_title(placement, text, self.title_key)
        header = context_header(where.fair_rank, title, text.strip(), fields)
        metadata = {**placement, CONTEXT_HEADER_KEY: header}
        metadata.pop(EMBED_FIELDS_KEY, None)  # an earlier placement's
        # the embedding model sees the shown keys as "key: value" lines (the one template both
        # modes share writes values alone: a user trial found bare values), else the text alone
        hidden = set(hidden_metadata_keys(self.group_key, list(metadata), self.show_metadata_keys))
        # in show_metadata_keys' order, as the LLM's header lists them (a user trial)
        shown = [
            k for k in dict.fromkeys(self.show_metadata_keys) if k in metadata and k not in hidden
        ]
        if shown:
            metadata[EMBED_FIELDS_KEY] = "\n".join(f"{k}: {metadata[k]}" for k in shown)
        keys = list(metadata)
        update: dict[str, Any] = {
            "metadata": metadata,
            "excluded_llm_metadata_keys": [k for k in keys if k != CONTEXT_HEADER_KEY],
            "excluded_embed_metadata_keys": [k for k in keys if k != EMBED_FIELDS_KEY],
            # Only the header reaches the LLM, as "<header>\n<text>" (the kit's entry).
            "metadata_template": "{value}",
            "metadata_separator": "\n",
            "text_template": "{metadata_str}\n{content}",
        }
        if isinstance(node, TextNode) and text[:1].isspace():
            # LlamaIndex strips the entry's ends only; the kit's entry strips the text itself.
            update["text"] = text.lstrip()
        return NodeWithScore(node=node.model_copy(update=update), score=metadata["relevance_score"])

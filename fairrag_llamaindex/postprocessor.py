"""A LlamaIndex node postprocessor that re-ranks a retrieved pool into a fair top-n.

Thin by design: nodes -> (scores, groups) -> :func:`fairrag_core.rerank` -> new nodes. Groups come
from :func:`fairrag_core.group_labels`, relevance for unscored pools from
:func:`fairrag_core.scores_from_order`, the ranking from the core ranker; nothing here decides
anything about fairness.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from typing import Any, Literal

import numpy as np
from llama_index.core.bridge.pydantic import Field, PrivateAttr, field_serializer
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from fairrag_core import Placement, Ranker, configure_ranker, group_labels, pool_scores, rerank

__all__ = ["MODEL_NAME_PREFIX", "RERANK_METADATA_KEYS", "FairRerankPostprocessor"]

dispatcher = get_dispatcher(__name__)

MODEL_NAME_PREFIX = "fairrag:"
"""``ReRankStartEvent.model_name`` of this postprocessor is ``"fairrag:<ranker name>"``."""

RERANK_METADATA_KEYS = (
    "relevance_score",
    "retrieval_score",
    "fair_rank",
    "pool_rank",
    "exposure_weight",
    "ranker",
)
"""Metadata added to every returned node (the same names as the LangChain adapter's)."""


class FairRerankPostprocessor(BaseNodePostprocessor):
    """Re-rank the retrieved pool with a fairness-aware core ranker and keep the top ``top_n``.

    Use it with a large retrieval pool, e.g. ``index.as_query_engine(similarity_top_k=50,
    node_postprocessors=[FairRerankPostprocessor(ranker="representative_stochastic",
    group_key="gender", protected="female", seed=0)], llm=...)``.

    **Input.** Each node's relevance is its ``NodeWithScore.score`` (higher = more relevant) and
    its group is ``node.metadata[group_key]``; a node without that field is of unknown group
    (``None``), never counted as protected. A ``group_key`` that no node carries raises the
    core's ``KeyError`` naming the key and the metadata fields present (almost always a typo).

    **The same node twice.** A node whose ``node_id`` repeats an earlier node's is left out
    before ranking (the first occurrence is kept, the core's :func:`fairrag_core.rerank` rule),
    so one document never takes two of the ``top_n`` slots.

    **Nodes without a score.** When *no* node has a score (e.g. a keyword retriever that only
    orders), the incoming order is the relevance order; when only *some* lack one, it is a
    ``ValueError`` naming their pool positions (both rules are the core's
    :func:`fairrag_core.pool_scores`). Non-finite scores are rejected by the core.

    **Scores to relevance.** By default scores are used as given. LlamaIndex's
    ``ChromaVectorStore`` reports ``exp(-cosine distance)``, not SPEC.md's ``1 - distance``: the
    order is the same, but the stochastic rankers min-max normalise relevance, so set
    ``relevance="chroma_cosine"`` over a Chroma index to rank on ``1 - d`` exactly as the
    LangChain ``FairRetriever`` does.

    **Output.** New :class:`NodeWithScore` objects wrapping copies of the nodes (inputs are never
    mutated), best first, with metadata ``relevance_score`` (the relevance ranked on, as in the
    LangChain adapter; ``None`` for an unscored pool), ``retrieval_score`` (the node's incoming
    score, as it was), ``fair_rank`` and ``pool_rank`` (1-based), ``exposure_weight`` (the
    position weight ``v_fair_rank`` of the ranker's exposure model) and ``ranker`` (its name).
    These keys are excluded from the text the LLM and the embedding model see. The new score is
    the ``exposure_weight``, so a later step that sorts by score keeps the fair order.

    **Randomness.** The core ranker is built once with ``seed``; successive calls draw from its
    generator (a fresh postprocessor with the same seed replays the same sequence of rankings).
    Draws are serialised by a lock, so concurrent queries never share a draw.

    Emits ``ReRankStartEvent`` / ``ReRankEndEvent`` through the instrumentation dispatcher, inside
    the span of the (async) postprocess call; the start event's ``model_name`` is
    ``"fairrag:<ranker name>"``. Fields are read when the postprocessor is built; build a new
    one to change the ranker or its target.
    """

    ranker: str | Ranker = Field(
        default="representative_stochastic",
        description=(
            "A core ranker name (standard, stochastic, forced_exposure, "
            "representative_stochastic) or a ready fairrag_core Ranker."
        ),
    )
    group_key: str = Field(description="Node metadata field holding each node's group label.")
    protected: Hashable | None = Field(
        default=None, description="The protected group of the binary target (e.g. 'female')."
    )
    target_share: float | None = Field(
        default=None, description="Exposure share owed to the protected group (default 0.5)."
    )
    target: dict[Hashable, float] | None = Field(
        default=None, description="Exposure share per group, summing to 1 (several groups)."
    )
    ranker_params: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra parameters of the named ranker (configure_ranker), e.g. {'alpha': 4.0}.",
    )
    relevance: Literal["score", "chroma_cosine"] = Field(
        default="score",
        description=(
            "How node scores become relevance: 'score' takes them as given; 'chroma_cosine' "
            "turns ChromaVectorStore's exp(-distance) into docs/SPEC.md's 1 - distance."
        ),
    )
    top_n: int = Field(default=5, ge=1, description="Number of nodes to return (the context k).")
    seed: int | None = Field(
        default=None, description="Seed of the ranker's random generator (stochastic rankers)."
    )

    _core_ranker: Ranker = PrivateAttr()
    _draw_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        self._core_ranker = configure_ranker(
            self.ranker,
            protected=self.protected,
            target_share=self.target_share,
            target=self.target,
            seed=self.seed,
            params=self.ranker_params,
        )

    @classmethod
    def class_name(cls) -> str:
        return "FairRerankPostprocessor"

    @field_serializer("ranker")
    def _serialize_ranker(self, ranker: str | Ranker) -> str:
        return ranker if isinstance(ranker, str) else ranker.name

    @property
    def core_ranker(self) -> Ranker:
        """The fairrag_core ranker doing the work (built from the fields)."""
        return self._core_ranker

    @property
    def model_name(self) -> str:
        """``"fairrag:<ranker name>"``, the ``model_name`` of the ReRankStartEvent."""
        return MODEL_NAME_PREFIX + self._core_ranker.name

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        return self._fair_rerank(nodes, query_bundle)

    @dispatcher.span
    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        # Ranking 50 candidates takes microseconds: run it on the loop, not in a worker thread.
        return self._fair_rerank(nodes, query_bundle)

    def _fair_rerank(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ValueError(
                "FairRerankPostprocessor needs the query: pass query_bundle=QueryBundle(...) or "
                "query_str=... to postprocess_nodes"
            )
        # Translate (and so validate) before any event, so a bad pool leaves no open rerank.
        scores, from_order = _relevance(nodes, self.relevance)
        groups = group_labels([n.node.metadata for n in nodes], self.group_key)
        dispatcher.event(
            ReRankStartEvent(
                query=query_bundle, nodes=nodes, top_n=self.top_n, model_name=self.model_name
            )
        )
        if nodes:
            ids = [n.node.node_id for n in nodes]
            with self._draw_lock:
                reranking = rerank(self._core_ranker, scores, groups, self.top_n, ids=ids)
            reranked = [
                _placed(nodes[p.pool_index], p, reranking.ranker, from_order)
                for p in reranking.placements
            ]
        else:
            reranked = []
        dispatcher.event(ReRankEndEvent(nodes=reranked))
        return reranked


def _relevance(nodes: Sequence[NodeWithScore], conversion: str) -> tuple[np.ndarray, bool]:
    """Each node's relevance (core :func:`~fairrag_core.pool_scores`), converted if asked, and
    whether it came from the incoming order."""
    scores, from_order = pool_scores([n.score for n in nodes])
    if conversion == "chroma_cosine" and not from_order:
        if (scores <= 0).any():
            raise ValueError(
                "relevance='chroma_cosine' expects ChromaVectorStore scores exp(-distance) > 0, "
                f"got {scores[scores <= 0][:3].tolist()}"
            )
        # ChromaVectorStore reports exp(-d); docs/SPEC.md's relevance for cosine is 1 - d.
        scores = 1.0 + np.log(scores)
    return scores, from_order


def _placed(
    original: NodeWithScore, placement: Placement, ranker_name: str, from_order: bool
) -> NodeWithScore:
    """A new NodeWithScore over a copy of ``original.node`` carrying the placement."""
    node = original.node
    metadata = {
        **node.metadata,
        "relevance_score": None if from_order else placement.score,
        "retrieval_score": original.score,
        "fair_rank": placement.fair_rank,
        "pool_rank": placement.pool_rank,
        "exposure_weight": placement.exposure_weight,
        "ranker": ranker_name,
    }
    copy = node.model_copy(
        update={
            "metadata": metadata,
            "excluded_embed_metadata_keys": _with_keys(node.excluded_embed_metadata_keys),
            "excluded_llm_metadata_keys": _with_keys(node.excluded_llm_metadata_keys),
        }
    )
    return NodeWithScore(node=copy, score=placement.exposure_weight)


def _with_keys(excluded: Sequence[str]) -> list[str]:
    return [*excluded, *(key for key in RERANK_METADATA_KEYS if key not in excluded)]

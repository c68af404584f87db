"""FairDocumentRanker: a Haystack 2 component that re-ranks a retriever's Documents into a fair
top-k and records each ranking's fairness record.

Glue over :mod:`fairrag_core.kit` (docs/SPEC.md, "Adapters"): Documents in -> metadata, ids,
scores -> :func:`~fairrag_core.kit.pool_relevance` and :func:`~fairrag_core.kit.place` -> new
Documents out. Haystack components are not pydantic models, so the component holds the contract
(:class:`~fairrag_core.kit.component.FairComponent`) rather than inheriting it.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Mapping
from typing import Any, cast

from haystack import Document, component, default_from_dict, default_to_dict
from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from fairrag_core.kit import (
    DEFAULT_MAX_RECORDS,
    RELEVANCE_CONVERSIONS,
    RecordKeeper,
    pool_relevance,
    shown_documents,
    shown_record,
)
from fairrag_core.kit.component import (
    FairComponent,
    check_count,
    check_shown_count,
    unknown_argument,
)

from .context import check_documents

__all__ = ["FairDocumentRanker"]


_BUILT_WITH = (
    "{name} is set when the component is built (its records and log file are kept from then "
    "on; a user trial found a later value ignored by the runs but saved by to_dict): build a "
    "new FairDocumentRanker with {name}=..."
)
_OWN_ARGUMENTS = ("group_key", "top_k", "relevance", "title_key", "log_path", "max_records")
"""The constructor's own arguments; the others are the component contract's fields."""

_LINE_KEYS = ("type", "loc", "input", "ctx")
"""What a pydantic error line is rebuilt from (under this class's name)."""


def _refuse_unknown(fields: Mapping[str, Any]) -> None:
    """A ValueError naming the first argument neither the constructor nor the component
    contract (:class:`~fairrag_core.kit.component.FairComponent`) accepts, and every accepted
    name (docs/SPEC.md, "Adapters": unknown constructor arguments are errors naming the argument
    and what is accepted)."""
    accepted = [*_OWN_ARGUMENTS, *(n for n in FairComponent.model_fields if n != "group_key")]
    error = unknown_argument("FairDocumentRanker", fields, accepted)
    if error is not None:
        raise error


def _contract(group_key: Any, fields: dict[str, Any]) -> FairComponent:
    """The component contract of these fields; its refusals name FairDocumentRanker (the class
    the user built), not the contract it holds."""
    _refuse_unknown(fields)
    try:
        return FairComponent(group_key=group_key, **fields)
    except ValidationError as error:
        lines = [_rebuilt(line) for line in error.errors(include_url=False)]
        raise ValidationError.from_exception_data("FairDocumentRanker", lines) from None


def _rebuilt(line: Mapping[str, Any]) -> InitErrorDetails:
    """One pydantic error line, to raise again under FairDocumentRanker's name: as it was, or,
    for a type pydantic does not rebuild from its name (``is_hashable``: a user trial found a
    ``KeyError`` raised instead of the error), as a custom error of that type and message."""
    details = cast(InitErrorDetails, {k: v for k, v in line.items() if k in _LINE_KEYS})
    try:
        ValidationError.from_exception_data("FairDocumentRanker", [details])
    except KeyError:
        details = cast(
            InitErrorDetails, {**details, "type": PydanticCustomError(line["type"], line["msg"])}
        )
        details.pop("ctx", None)
    return details


@component
class FairDocumentRanker:
    """Re-rank the Documents a retriever found into a fair top-``top_k``.

    Usage example:
        .. code-block:: python

            pipeline = Pipeline()
            pipeline.add_component("retriever", InMemoryBM25Retriever(store, top_k=50))
            pipeline.add_component(
                "fair", FairDocumentRanker(group_key="gender", protected="female", top_k=5)
            )
            pipeline.connect("retriever.documents", "fair.documents")
            result = pipeline.run({"retriever": {"query": q}, "fair": {"query": q, "seed": 7}})
            result["fair"]["documents"]  # the fair top 5, best first

    ``ranker``, ``protected``, ``target_share``, ``target``, ``seed``, ``ranker_params``,
    ``exposure``, ``ledger`` and ``ledger_key`` are the component contract's fields, validated
    by it (:class:`~fairrag_core.kit.component.FairComponent`, held as :attr:`fair`; assign
    them there: ``ranker.fair.protected = "male"``). Each Document's ``score`` is converted by
    ``relevance`` (a name of :data:`~fairrag_core.kit.RELEVANCE_CONVERSIONS`; Haystack's
    in-memory retrievers score similarities, higher is better: ``"similarity"``); a pool
    without scores is ranked by its incoming order. Groups come from ``meta[group_key]``.

    Returned Documents are copies (same ``id``) whose ``meta`` gains the kit's placement keys
    and whose ``score`` is the relevance ranked on. Each run ranks with its own query seed (the
    ``seed`` input, else one drawn from the field ``seed``'s generator) and, when the ranker
    has a target, returns and keeps the ranking's fairness record (docs/SPEC.md, "Records";
    source ``"haystack"``, no answer: the component sees none), appended to ``log_path``.
    The placement keys, group label and title field in ``meta`` are not for the LLM: show it
    :func:`~fairrag_haystack.context_text` of the Documents (an Agent's tool: its
    ``outputs_to_string`` handler). An argument neither the component nor the contract knows
    is a ValueError naming it and every accepted argument.
    """

    def __init__(
        self,
        *,
        group_key: str,
        top_k: int = 5,
        relevance: str = "similarity",
        title_key: str = "title",
        log_path: str | None = None,
        max_records: int | None = DEFAULT_MAX_RECORDS,
        **fields: Any,
    ) -> None:
        self.fair = _contract(group_key, fields)
        """The component contract: the ranker's fields and the core ranker they describe."""
        self.top_k = top_k
        self.relevance = relevance
        self.title_key = title_key
        if log_path is not None and not isinstance(log_path, (str, os.PathLike)):
            raise TypeError(f"log_path must be a file path or None, got {log_path!r:.80}")
        self._log_path = log_path
        self._kept = RecordKeeper(log_path, max_records=max_records)

    @property
    def top_k(self) -> int:
        """How many Documents a run returns (an int >= 1; a run's ``top_k`` input overrides
        it); checked when assigned too (a user trial: ``top_k = 0`` was kept, then saved)."""
        return self._top_k

    @top_k.setter
    def top_k(self, value: int) -> None:
        count = check_count(value, "top_k")
        check_shown_count(self.fair.fairness_exposure, count, "top_k")
        self._top_k = count

    @property
    def relevance(self) -> str:
        """How the Documents' ``score`` becomes relevance (a name of
        :data:`~fairrag_core.kit.RELEVANCE_CONVERSIONS`); checked when assigned too."""
        return self._relevance

    @relevance.setter
    def relevance(self, value: str) -> None:
        if not isinstance(value, str) or value not in RELEVANCE_CONVERSIONS:
            raise ValueError(
                f"relevance {value!r} is unknown; accepted: {sorted(RELEVANCE_CONVERSIONS)}"
            )
        self._relevance = value

    @property
    def log_path(self) -> str | os.PathLike[str] | None:
        """The JSON-lines file every record is appended to (None: memory only); set when the
        component is built."""
        return self._log_path

    @log_path.setter
    def log_path(self, value: Any) -> None:
        raise AttributeError(_BUILT_WITH.format(name="log_path"))

    @property
    def max_records(self) -> int | None:
        """How many records :attr:`records` keeps (the latest; None: all); set when the
        component is built."""
        return self._kept.max_records

    @max_records.setter
    def max_records(self, value: Any) -> None:
        raise AttributeError(_BUILT_WITH.format(name="max_records"))

    @property
    def title_key(self) -> str:
        """The metadata field holding each Document's title (``"title"``), recorded in
        ``titles``; a Document without it is titled by its text's ``Title:`` line, if any."""
        return self._title_key

    @title_key.setter
    def title_key(self, value: str) -> None:
        if not isinstance(value, str) or not value.strip():
            raise ValueError(
                "title_key must name the metadata field holding each document's title, "
                f"e.g. 'title'; got {value!r:.80}"
            )
        self._title_key = value

    @property
    def records(self) -> list[dict[str, Any]]:
        """The fairness records of the runs so far, oldest first (copies: a field set on one
        leaves the kept record as logged)."""
        return self._kept.records

    @component.output_types(documents=list[Document], record=dict[str, Any] | None)
    def run(
        self,
        documents: list[Document],
        query: str | None = None,
        top_k: int | None = None,
        seed: int | None = None,
    ) -> dict[str, Any]:
        """The fair top-``top_k`` of ``documents`` and its fairness record.

        :param documents: The pool, best first, as a retriever returns it.
        :param query: The query (written in the record).
        :param top_k: How many Documents to return (default: the field).
        :param seed: This run's query seed: the same seed and pool re-draw the same ranking.
        :returns: ``documents``: the fair top-k, best first; ``record``: its fairness record
            (None for a ranker without a target).
        """
        k = check_count(self.top_k if top_k is None else top_k, "top_k")  # a field set later too
        # a per-run top_k, or a curve set on the contract later, beyond the fitted positions:
        # refused naming top_k (a user trial: the core's refusal named k)
        check_shown_count(self.fair.fairness_exposure, k, "top_k")
        check_documents(documents)
        if query is not None and not isinstance(query, str):
            raise TypeError(f"query must be the query's text or None, got {query!r:.80}")
        given = [document.score for document in documents]
        scores, scored = pool_relevance(given, self.relevance)
        metas, ids = [d.meta for d in documents], [d.id for d in documents]
        placed = self.fair.place(metas, scores, k, ids=ids, given=given, scored=scored, seed=seed)
        shown = [
            dataclasses.replace(documents[index], meta=meta, score=meta["relevance_score"])
            for index, meta in zip(placed.indices, placed.metadatas, strict=True)
        ]
        return {"documents": shown, "record": self._record(shown, query, placed.ranking)}

    @component.output_types(documents=list[Document], record=dict[str, Any] | None)
    async def run_async(
        self,
        documents: list[Document],
        query: str | None = None,
        top_k: int | None = None,
        seed: int | None = None,
    ) -> dict[str, Any]:
        """:meth:`run` for ``Pipeline.run_async`` (``AsyncPipeline`` in Haystack 2.x): with a
        SQLite or Redis ledger the ranking waits in the ledger's own thread pool (its deadline
        counts that wait), never in the event loop nor in the loop's default executor;
        otherwise it runs in place (pure computation)."""
        from fairrag_core.ledger import run_off_loop, waits_on_ledger

        if waits_on_ledger(self.fair.core_ranker):
            return await run_off_loop(self.run, documents, query, top_k, seed)
        return self.run(documents, query, top_k, seed)

    def _record(
        self, shown: list[Document], query: str | None, ranking: dict[str, Any]
    ) -> dict[str, Any] | None:
        auditor = self.fair.auditor
        if auditor is None:
            return None
        metadatas = [document.meta for document in shown]
        texts = [document.content or "" for document in shown]
        listed = shown_documents(
            [d.id for d in shown], metadatas, texts, self.fair.group_key, self.title_key
        )
        record = shown_record(
            auditor,
            source="haystack",
            shown=listed,
            metadatas=metadatas,
            ranking=ranking,  # names the ranking when it placed nothing (an empty pool)
            query=query,
        )
        self._kept.add([record])
        # the pipeline's copy: a step that adds the answer to it (records carry none here)
        # leaves the kept record as logged (a user trial)
        return copy.deepcopy(record)

    def to_dict(self) -> dict[str, Any]:
        """The component's configuration, as Haystack serialises pipelines."""
        return default_to_dict(
            self,
            **self.fair.model_dump(exclude_defaults=True),
            top_k=self.top_k,
            relevance=self.relevance,
            title_key=self.title_key,
            log_path=None if self.log_path is None else os.fspath(self.log_path),
            max_records=self.max_records,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FairDocumentRanker:
        """The component :meth:`to_dict` described."""
        return default_from_dict(cls, data)

"""FairnessCallbackHandler: a fairness record of every retrieval and the answer generated from it,
computed by the core's :class:`~fairrag_core.FairnessAuditor`, kept in memory and optionally
appended to a JSON-lines file."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult

from fairrag_core import FairnessAuditor, JsonLinesLog, summarize_records
from fairrag_core.citations import ContextDocument

from ._documents import context_documents, retrieval_summary

__all__ = ["FairnessCallbackHandler"]


@dataclass
class _Retrieval:
    """One retriever run of a root run, and the generation linked to it."""

    run_id: UUID
    query: str | None = None
    name: str | None = None
    record: dict[str, Any] | None = None
    """The retrieval record; None until the retriever ends."""
    context: list[ContextDocument] = field(default_factory=list)
    share: float | None = None
    generation: dict[str, Any] | None = None
    llm_run_id: UUID | None = None
    llm_runs: int = 0


@dataclass
class _RootRun:
    """What the handler holds for one root run until it ends."""

    members: list[UUID] = field(default_factory=list)
    retrievals: dict[UUID, _Retrieval] = field(default_factory=dict)
    last_ended: UUID | None = None
    """The retriever run that ended last: the context a model run starting now was given."""
    llm_links: dict[UUID, UUID] = field(default_factory=dict)
    """Model run -> the retriever run it is linked to."""


class FairnessCallbackHandler(BaseCallbackHandler):
    """Record exposure and generation parity of every retrieval (and the answer built from it).

    Pass it in a run's config (``chain.invoke(q, config={"callbacks": [handler]})``) or to a
    component's ``callbacks``. One handler can serve any number of concurrent runs, sync or
    async: its state is keyed by run id under a lock.

    What is recorded, per retriever run:

    - at the retriever's end: the titles and groups shown, in rank order, the protected
      exposure share and the exposure disparity (:meth:`fairrag_core.FairnessAuditor.retrieval`),
      the ``ranker`` named in the documents' metadata (the retriever's run name when they come
      from a retriever that is not fair-ranking) and the stated ``relevance_function``;
    - at the end of a chat model (or LLM) run of the same root run: the answer's citations,
      parsed and grounded in that retrieval's documents, generation parity, fairness gap, gap
      magnitude and groundedness (:meth:`fairrag_core.FairnessAuditor.generation`). A model run
      is linked to the retrieval of its root run that ended last before the model started (the
      context a RAG chain hands it); when a retrieval feeds several model runs, its record holds
      the last one and counts them in ``llm_runs``.

    Runs are tied together by walking ``parent_run_id`` up to the root: the top-most run this
    handler saw start (the chain invoked, or the retriever itself when it runs standalone).
    A record is complete, and written, when its root run ends: one record per retrieval, so one
    per run of a retrieve-then-generate chain, written at chain end; a standalone retriever's
    record is written at retriever end. A root run that fails still writes what it retrieved,
    with its ``error``, and so does one whose retrieval itself failed (then without metrics).
    A root run without any retrieval (a bare model call) writes nothing.

    Each record carries ``run_id`` (the root run), ``retriever_run_id``, ``llm_run_id``,
    ``query`` and ``retriever``. Shown documents without ``group_key`` are of unknown group (never
    protected); a shown list may hold only such documents.

    Records are kept in :attr:`records` and, with ``path``, appended to that file as JSON lines by
    the core's :class:`~fairrag_core.JsonLinesLog` (one ``write`` per record under a lock and an
    ``flock``: no lost or interleaved lines under concurrent runs). :meth:`summary` gives the
    means per ranker (:func:`fairrag_core.summarize_records`).
    """

    run_inline = True
    """Bookkeeping is quick: run on the caller's thread or event loop, in event order."""

    def __init__(
        self,
        *,
        group_key: str,
        protected: Any = None,
        target_share: float | None = None,
        target: Any = None,
        exposure: Any = None,
        title_key: str = "title",
        path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.group_key = group_key
        self.title_key = title_key
        # exposure: the position-weight model (name or ExposureModel; default DCG), which should
        # be the ranker's, e.g. FairRetriever.fairness_exposure.
        self.auditor = FairnessAuditor.create(
            protected=protected, target_share=target_share, target=target, exposure=exposure
        )
        self.log = None if path is None else JsonLinesLog(path)
        self._lock = threading.Lock()
        self._root_of: dict[UUID, UUID] = {}
        self._roots: dict[UUID, _RootRun] = {}
        self._records: list[dict[str, Any]] = []

    @property
    def records(self) -> list[dict[str, Any]]:
        """The completed records so far, in completion order (a copy of the list)."""
        with self._lock:
            return list(self._records)

    def summary(self) -> dict[str, dict[str, object]]:
        """Mean of each metric per ranker, with counts (NaN values counted, never dropped)."""
        return summarize_records(self.records, by="ranker")

    # -- run tree ---------------------------------------------------------------------------

    def _start(self, run_id: UUID, parent_run_id: UUID | None) -> tuple[UUID, _RootRun]:
        """Register a run under its root; caller holds the lock."""
        root = None if parent_run_id is None else self._root_of.get(parent_run_id)
        if root is None or root not in self._roots:
            root = run_id
            self._roots[root] = _RootRun()
        self._root_of[run_id] = root
        state = self._roots[root]
        state.members.append(run_id)
        return root, state

    def _ended(self, run_id: UUID, error: BaseException | None = None) -> None:
        """A run ended: when it is a root, write its records."""
        with self._lock:
            if self._root_of.get(run_id) != run_id:
                return
            state = self._roots.pop(run_id)
            for member in state.members:
                self._root_of.pop(member, None)
            # A retrieval that failed has no record of its own, but its root's error is logged:
            # a failed run is never silently missing from the log.
            records = [
                self._final_record(run_id, retrieval, error)
                for retrieval in state.retrievals.values()
                if retrieval.record is not None or error is not None
            ]
            self._records.extend(records)
            if self.log is not None:  # under the lock: the file keeps the in-memory order
                for record in records:
                    self.log.append(record)

    @staticmethod
    def _final_record(
        root: UUID, retrieval: _Retrieval, error: BaseException | None
    ) -> dict[str, Any]:
        record: dict[str, Any] = {
            "run_id": str(root),
            "retriever_run_id": str(retrieval.run_id),
            "llm_run_id": None if retrieval.llm_run_id is None else str(retrieval.llm_run_id),
            "query": retrieval.query,
            "retriever": retrieval.name,
            **(retrieval.record or {}),
        }
        if record.get("ranker") is None:
            record["ranker"] = retrieval.name
        if retrieval.generation is not None:
            record.update(retrieval.generation)
            record["llm_runs"] = retrieval.llm_runs
        if error is not None:
            record["error"] = f"{type(error).__name__}: {error}"
        return record

    # -- chains and tools: only the run tree --------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            self._start(run_id, parent_run_id)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._ended(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._ended(run_id, error)

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            self._start(run_id, parent_run_id)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._ended(run_id)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._ended(run_id, error)

    # -- retrievers -----------------------------------------------------------------------------

    def on_retriever_start(
        self,
        serialized: dict[str, Any] | None,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        name = kwargs.get("name") or (serialized or {}).get("name")
        with self._lock:
            _, state = self._start(run_id, parent_run_id)
            state.retrievals[run_id] = _Retrieval(run_id, query=query, name=name)

    def on_retriever_end(self, documents: list[Document], *, run_id: UUID, **kwargs: Any) -> None:
        documents = list(documents)
        record, groups = retrieval_summary(self.auditor, documents, self.group_key, self.title_key)
        share = record.get("exposure_share")
        context, _ = context_documents(documents, groups, self.title_key)
        with self._lock:
            root = self._root_of.get(run_id)
            if root is None:  # its start was not seen (handler added mid-run): standalone
                root, state = self._start(run_id, None)
            else:
                state = self._roots[root]
            retrieval = state.retrievals.setdefault(run_id, _Retrieval(run_id))
            retrieval.record = record
            retrieval.context = context
            retrieval.share = share
            state.last_ended = run_id
        self._ended(run_id)

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._ended(run_id, error)

    # -- language models --------------------------------------------------------------------------

    def _model_start(self, run_id: UUID, parent_run_id: UUID | None) -> None:
        with self._lock:
            _, state = self._start(run_id, parent_run_id)
            if state.last_ended is not None:
                state.llm_links[run_id] = state.last_ended

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._model_start(run_id, parent_run_id)

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._model_start(run_id, parent_run_id)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            root = self._root_of.get(run_id)
            state = None if root is None else self._roots.get(root)
            link = None if state is None else state.llm_links.get(run_id)
            retrieval = None if link is None else state.retrievals.get(link)
        if retrieval is not None:
            candidates = response.generations[0] if response.generations else []
            answer = candidates[0].text if candidates else ""
            generation = self.auditor.generation(answer, retrieval.context, retrieval.share)
            generation["answer"] = answer
            with self._lock:
                retrieval.generation = generation
                retrieval.llm_run_id = run_id
                retrieval.llm_runs += 1
        self._ended(run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._ended(run_id, error)

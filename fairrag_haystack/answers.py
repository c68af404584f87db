"""The other end of the measurement in a Haystack pipeline: the LLM's answer to the Documents
:class:`~fairrag_haystack.FairDocumentRanker` placed, recorded with the generation metrics
(docs/SPEC.md, "Records", "Metrics", "Attribution").

:class:`FairDocumentRanker` sees no reply, so its record holds the retrieval's exposure alone.
:class:`FairAnswerRecorder` goes after the generator: given the Documents the prompt showed and
the generator's replies, it writes the question's whole record (the shown list's exposure, the
answer, its citations attributed to the shown Documents, generation parity, groundedness), by
the kit's one record builder (:func:`fairrag_core.kit.shown_record`), as the LangChain and
LlamaIndex handlers do::

    pipeline.add_component("answer", FairAnswerRecorder.from_ranker(fair, log_path="fair.jsonl"))
    pipeline.connect("fair.documents", "answer.documents")
    pipeline.connect("llm.replies", "answer.replies")
    pipeline.run({"retriever": {"query": q}, "fair": {"query": q}, "answer": {"query": q},
                  "prompt_builder": {"question": q}})

Entry numbers are read as :func:`~fairrag_haystack.context_text` numbers the Documents (``[1]``
first, in the order given); a structured answer (tool-call arguments, JSON content) is read as
:mod:`fairrag_core.structured_citations` reads it, its source ids counted from
``source_id_base`` (1, as the context numbers its entries).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage

from fairrag_core import FairnessAuditor
from fairrag_core.audit import exposure_name
from fairrag_core.exposure import ExposureModel
from fairrag_core.kit import (
    DEFAULT_MAX_RECORDS,
    KeptSinks,
    RecordKeeper,
    check_group_key,
    shown_documents,
    shown_record,
)
from fairrag_core.structured_citations import (
    StructuredAnswer,
    check_source_id_base,
    read_json_answer,
    read_structured_answer,
    read_text_or_object,
    render_answer,
)

from .context import check_documents

__all__ = ["FairAnswerRecorder"]


@component
class FairAnswerRecorder(KeptSinks):
    """Record a question's answer against the Documents its LLM was shown.

    ``documents`` are the Documents the prompt showed, in its order (a
    :class:`~fairrag_haystack.FairDocumentRanker`'s output, or what a later step made of it:
    the placement fields the ranker wrote tell a reordered or cut list, as the other handlers'
    records say); ``replies`` the generator's (a chat generator's ``ChatMessage`` list or a
    generator's strings; the first reply is the answer). The record (docs/SPEC.md, "Records";
    ``source`` ``"haystack"``) is returned, kept in :attr:`records` (the latest
    ``max_records``) and appended to ``log_path``. The target and exposure model are the
    ranker's (:meth:`from_ranker`) or given as the ranker takes them (``protected`` with
    ``target_share``, or ``target``; ``exposure`` by name).
    """

    def __init__(
        self,
        *,
        group_key: str,
        protected: Any = None,
        target_share: float | None = None,
        target: Mapping[Any, float] | None = None,
        exposure: str | None = None,
        title_key: str = "title",
        source_id_base: int = 1,
        log_path: str | None = None,
        max_records: int | None = DEFAULT_MAX_RECORDS,
    ) -> None:
        self.group_key = check_group_key(group_key)
        if exposure is not None and not isinstance(exposure, str):
            raise TypeError(
                "exposure must be an exposure model's name ('dcg', 'rbp(0.5)', 'uniform', "
                f"'fitted:<file>') or None, got {type(exposure).__name__}; from_ranker(...) "
                "takes a ranker's model object"
            )
        self._auditor = FairnessAuditor.create(
            protected=protected, target_share=target_share, target=target, exposure=exposure
        )
        self._fields: dict[str, Any] = {
            "protected": protected,
            "target_share": target_share,
            "target": None if target is None else dict(target),
            "exposure": exposure,
        }
        if not isinstance(title_key, str) or not title_key.strip():
            raise ValueError(
                "title_key must name the metadata field holding each document's title, "
                f"e.g. 'title'; got {title_key!r:.80}"
            )
        self.title_key = title_key
        self.source_id_base = check_source_id_base(source_id_base)
        if log_path is not None and not isinstance(log_path, (str, os.PathLike)):
            raise TypeError(f"log_path must be a file path or None, got {log_path!r:.80}")
        self.log_path = log_path
        self._kept = RecordKeeper(log_path, max_records=max_records)

    @classmethod
    def from_ranker(cls, ranker: Any, **fields: Any) -> FairAnswerRecorder:
        """A recorder auditing with ``ranker``'s group key, target and exposure model (a
        :class:`~fairrag_haystack.FairDocumentRanker`); ``fields`` are the others
        (``log_path``, ``max_records``, ``title_key``: default the ranker's)."""
        contract: Any = getattr(ranker, "fair", None)
        auditor = getattr(contract, "auditor", None)
        if auditor is None:
            raise ValueError(
                "from_ranker needs a FairDocumentRanker whose ranker has a fairness target "
                f"(protected=... or target=...); got {type(ranker).__name__}"
            )
        fields.setdefault("title_key", getattr(ranker, "title_key", "title"))
        exposure = contract.exposure
        recorder = cls(
            group_key=contract.group_key,
            protected=contract.protected,
            target_share=contract.target_share,
            target=contract.target,
            exposure=exposure if isinstance(exposure, str) else None,
            **fields,
        )
        if isinstance(exposure, ExposureModel):  # a fitted curve read once: the same object
            recorder._auditor = FairnessAuditor(auditor.target, exposure)
            recorder._fields["exposure"] = exposure_name(exposure)
        return recorder

    @property
    def records(self) -> list[dict[str, Any]]:
        """The records so far, oldest first (copies)."""
        return self._kept.records

    @component.output_types(record=dict[str, Any])
    def run(
        self,
        documents: list[Document],
        replies: list[ChatMessage] | list[str] | None = None,
        query: str | None = None,
    ) -> dict[str, Any]:
        """The question's record: ``documents`` as shown, the first of ``replies`` as the
        answer (none: the record of the shown list alone), ``query`` written in it."""
        check_documents(documents)
        if query is not None and not isinstance(query, str):
            raise TypeError(f"query must be the query's text or None, got {query!r:.80}")
        metadatas = [d.meta or {} for d in documents]
        texts = [d.content or "" for d in documents]
        listed = shown_documents(
            [d.id for d in documents], metadatas, texts, self.group_key, self.title_key
        )
        answer, form, model = self._answer(replies, [d.title for d in listed])
        framework: dict[str, Any] = {"answer_format": form}
        if form not in (None, "text"):
            framework["source_id_base"] = self.source_id_base
        record = shown_record(
            self._auditor,
            source="haystack",
            shown=listed,
            metadatas=metadatas,
            query=query,
            answer=answer,
            model=model,
            framework=framework,
        )
        self._kept.add([record])
        return {"record": dict(record)}

    def _answer(
        self, replies: Any, titles: Sequence[str | None]
    ) -> tuple[str | None, str | None, str | None]:
        """The answer's text as the citation rules read it, its form and the model's name."""
        if replies is None:
            return None, None, None
        if isinstance(replies, (str, bytes, Mapping)) or not isinstance(replies, Sequence):
            raise TypeError(
                "replies must be a generator's replies (a list of ChatMessage or of str), got "
                f"{type(replies).__name__}"
            )
        if not replies:
            return None, None, None
        reply = replies[0]
        base = self.source_id_base
        if isinstance(reply, str):
            found, form = read_text_or_object(reply, source_id_base=base)
            return (reply if found is None else render_answer(found, list(titles))), form, None
        if not isinstance(reply, ChatMessage):
            raise TypeError(
                f"replies must hold ChatMessage or str, got a {type(reply).__name__}: {reply!r:.80}"
            )
        model = (reply.meta or {}).get("model")
        model = model if isinstance(model, str) else None
        structured: StructuredAnswer | None = None
        form = "text"
        for call in reply.tool_calls:  # a structured answer given as a tool's arguments
            structured = read_structured_answer(call.arguments, source_id_base=base)
            if structured is not None:
                form = "tool_call"
                break
        text = reply.text
        if structured is None and text is not None:
            structured = read_json_answer(text, source_id_base=base)
            form = "json" if structured is not None else "text"
        if structured is not None:
            return render_answer(structured, list(titles)), form, model
        return text, form, model

    def to_dict(self) -> dict[str, Any]:
        """The component's configuration, as Haystack serialises pipelines."""
        return default_to_dict(
            self,
            group_key=self.group_key,
            **{name: value for name, value in self._fields.items() if value is not None},
            title_key=self.title_key,
            source_id_base=self.source_id_base,
            log_path=None if self.log_path is None else os.fspath(self.log_path),
            max_records=self._kept.max_records,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FairAnswerRecorder:
        """The component :meth:`to_dict` described."""
        return default_from_dict(cls, data)

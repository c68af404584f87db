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

import copy
import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage, ChatRole

from fairrag_core import FairnessAuditor
from fairrag_core.kit import (
    DEFAULT_MAX_RECORDS,
    KeptSinks,
    RecordKeeper,
    check_group_key,
    entries_by_label,
    ranked_for,
    shown_documents,
    shown_record,
)
from fairrag_core.kit.config import plain, target_json, target_of_json
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
        target = target_of_json(target)  # [[label, share], ...] as to_dict writes labels not text
        self._auditor = FairnessAuditor.create(
            protected=protected, target_share=target_share, target=target, exposure=exposure
        )
        self._fields: dict[str, Any] = {
            "protected": plain(protected),
            "target_share": plain(target_share),
            "target": None if target is None else target_json(target),
            "exposure": exposure,
        }
        self._ranker: Any = None
        """The ranker :meth:`from_ranker` follows (its target and exposure model as they are at
        each run), else None."""
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
        """A recorder following ``ranker`` (a :class:`~fairrag_haystack.FairDocumentRanker`):
        each record audits with its group key, target and exposure model as they are when the
        record is written (a target set on ``ranker.fair`` later too), against the target the
        shown Documents' placement says they were ranked for; ``fields`` are the others
        (``log_path``, ``max_records``, ``title_key``: default the ranker's)."""
        contract: Any = getattr(ranker, "fair", None)
        if getattr(contract, "auditor", None) is None:
            raise ValueError(
                "from_ranker needs a FairDocumentRanker whose ranker has a fairness target "
                f"(protected=... or target=...); got {type(ranker).__name__}"
            )
        fields.setdefault("title_key", getattr(ranker, "title_key", "title"))
        recorder = cls(group_key=contract.group_key, **cls._target_fields(contract), **fields)
        recorder._ranker = ranker
        return recorder

    @staticmethod
    def _target_fields(contract: Any) -> dict[str, Any]:
        """A ranker contract's target and exposure model, as this component's arguments."""
        dumped = contract.model_dump(include={"protected", "target_share", "target", "exposure"})
        return {name: value for name, value in dumped.items() if value is not None}

    @property
    def auditor(self) -> FairnessAuditor:
        """The auditor of the next record: the followed ranker's as it is now, else this
        component's own."""
        if self._ranker is None:
            return self._auditor
        auditor = self._ranker.fair.auditor
        if auditor is None:
            raise ValueError(
                "the ranker FairAnswerRecorder follows has no fairness target now "
                "(protected=... or target=...)"
            )
        return auditor

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
        listed = _numbered(
            shown_documents(
                [d.id for d in documents], metadatas, texts, self.group_key, self.title_key
            ),
            metadatas,
        )
        answer, form, model = self._answer(replies, _entries(listed))
        framework: dict[str, Any] = {"answer_format": form}
        if form not in (None, "text"):
            framework["source_id_base"] = self.source_id_base
        auditor = self.auditor
        if self._ranker is not None:  # following a ranker: the target the list was drawn for
            auditor = ranked_for(auditor, metadatas)
        record = shown_record(
            auditor,
            source="haystack",
            shown=listed,
            metadatas=metadatas,
            query=query,
            answer=answer,
            model=model,
            framework=framework,
        )
        self._kept.add([record])
        # the pipeline's copy: a later step that changes it leaves the kept record as logged
        return {"record": copy.deepcopy(record)}

    def _answer(
        self, replies: Any, titles: Sequence[Any]
    ) -> tuple[str | None, str | None, str | None]:
        """The answer's text as the citation rules read it, its form and the model's name: the
        first reply of a generator's; of a conversation (an Agent's ``messages``: other roles
        among them), its last assistant message that is no call of a tool alone."""
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
        if any(isinstance(r, ChatMessage) and not r.is_from(ChatRole.ASSISTANT) for r in replies):
            # a conversation (a user trial: an Agent's messages recorded its system prompt
            # as the answer): its last assistant message that says something
            said = [
                r
                for r in replies
                if isinstance(r, ChatMessage) and r.is_from(ChatRole.ASSISTANT) and r.text
            ]
            if not said:
                return None, None, None
            reply = said[-1]
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
            if form == "tool_call" and not structured.text and text:
                # the message's own prose beside its citations (a user trial: dropped, so
                # "Lenore Blum studied ..." citing Knuth's entry credited Knuth)
                structured = dataclasses.replace(structured, text=text)
            return render_answer(structured, list(titles)), form, model
        return text, form, model

    def to_dict(self) -> dict[str, Any]:
        """The component's configuration, as Haystack serialises pipelines."""
        fields = self._fields
        if self._ranker is not None:  # the followed ranker's, as they are now
            fields = self._target_fields(self._ranker.fair)
        return default_to_dict(
            self,
            group_key=self.group_key,
            **{name: value for name, value in fields.items() if value is not None},
            title_key=self.title_key,
            source_id_base=self.source_id_base,
            log_path=None if self.log_path is None else os.fspath(self.log_path),
            max_records=self._kept.max_records,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FairAnswerRecorder:
        """The component :meth:`to_dict` described."""
        return default_from_dict(cls, data)


def _numbered(listed: list[Any], metadatas: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The shown Documents with the entry numbers the LLM saw: their places in the list (as
    :func:`~fairrag_haystack.context_text` numbers it), or, for a list joining several
    rankings (an Agent's searches, each tool result numbered from ``[1]``), each Document's
    place among its own ranking's, in the order given (a user trial: two searches' answer
    numbered as one list of six, two mis-citations counted where the answer cited right)."""
    keys = [(m.get("ranker"), m.get("query_seed")) if "fair_rank" in m else None for m in metadatas]
    if len({key for key in keys if key is not None}) < 2:
        return listed
    places: dict[Any, int] = {}
    numbered = []
    for document, key in zip(listed, keys, strict=True):
        places[key] = places.get(key, 0) + 1
        numbered.append(dataclasses.replace(document, number=places[key]))
    return numbered


def _entries(listed: Sequence[Any]) -> list[Any]:
    """The titles a structured answer's source ids index: each Document's title by its entry
    number (several Documents carrying one number give their titles, read by the citation's
    person: :func:`fairrag_core.kit.entries_by_label`)."""
    titles = [d.title for d in listed]
    if all(d.number is None for d in listed):
        return titles
    return entries_by_label(titles, [d.number for d in listed], [()] * len(listed))

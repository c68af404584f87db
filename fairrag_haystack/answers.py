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
    shown_once,
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
    generator's strings; the first reply is the answer), or an Agent's ``messages`` (its last
    assistant message is the answer; its searches' Documents are numbered as each tool result
    showed them). The record (docs/SPEC.md, "Records";
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
        follow_placement: bool = False,
    ) -> None:
        self.group_key = check_group_key(group_key)
        if not isinstance(follow_placement, bool):
            raise TypeError(f"follow_placement must be True or False, got {follow_placement!r:.80}")
        self.follow_placement = follow_placement
        """Audit each list against the target its placement states it was ranked for
        (``fair_target``), as a recorder built :meth:`from_ranker` does, also once saved and
        loaded (a review: a loaded pipeline's recorder audited a list drawn for 0.3 against the
        0.5 it was saved with)."""
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
        fields.setdefault("follow_placement", True)
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
        """The question's record: ``documents`` as shown, the answer read from ``replies``
        (:meth:`_answer`; none: the record of the shown list alone), ``query`` written in it."""
        check_documents(documents)
        if query is not None and not isinstance(query, str):
            raise TypeError(f"query must be the query's text or None, got {query!r:.80}")
        metadatas: list[Mapping[str, Any]] = [d.meta or {} for d in documents]
        texts = [d.content or "" for d in documents]
        listed = shown_documents(
            [d.id for d in documents], metadatas, texts, self.group_key, self.title_key
        )
        conversation = isinstance(replies, Sequence) and _is_conversation(replies)
        if conversation:  # an Agent's messages: the Documents of its searches
            listed, metadatas = _searched(listed, metadatas)
        answer, form, model = self._answer(replies, _entries(listed), conversation)
        framework: dict[str, Any] = {"answer_format": form, "source_id_base": self.source_id_base}
        auditor = self.auditor
        if self._ranker is not None or self.follow_placement:  # the target it was drawn for
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
        self, replies: Any, titles: Sequence[Any], conversation: bool
    ) -> tuple[str | None, str | None, str | None]:
        """The answer's text as the citation rules read it, its form and the model's name: the
        first reply of a generator's; of a conversation (an Agent's ``messages``: other roles
        among them), its last assistant message; none when that asks for a tool (a search) and
        gives no citations."""
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
        if conversation:
            # a user trial: an Agent's messages recorded its system prompt as the answer; a
            # review: its last turn, a call of an exit tool with the citations, was skipped for
            # an earlier preamble. The answer is the last assistant message.
            reply = next(r for r in reversed(replies) if r.is_from(ChatRole.ASSISTANT))
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
        if structured is None and reply.tool_calls:
            return None, None, model  # it ended asking for a tool (a search): no answer
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
            follow_placement=self.follow_placement,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FairAnswerRecorder:
        """The component :meth:`to_dict` described."""
        return default_from_dict(cls, data)


def _is_conversation(replies: Sequence[Any]) -> bool:
    """Whether ``replies`` is a conversation (an Agent's ``messages``: a user's, a system's or a
    tool's among them, and an assistant's), not a generator's replies."""
    chat = [r for r in replies if isinstance(r, ChatMessage)]
    return any(not r.is_from(ChatRole.ASSISTANT) for r in chat) and any(
        r.is_from(ChatRole.ASSISTANT) for r in chat
    )


def _searched(
    listed: list[Any], metadatas: list[Mapping[str, Any]]
) -> tuple[list[Any], list[Mapping[str, Any]]]:
    """The Documents of an Agent's searches as its model saw them: each tool result numbered
    from ``[1]`` by :func:`~fairrag_haystack.context_text`, so each Document under its place in
    its own search (its ``fair_rank``, the place the ranker gave it; its place in the list when
    it has none), and one found by several searches kept once, at its first place, with the
    other labels it was shown under (:func:`fairrag_core.kit.shown_once`, as LangChain's
    handler keeps it). A user trial found two searches numbered as one list of six: the answer
    citing the second search's ``[1]`` counted a mis-citation."""
    labels = [
        rank if isinstance(rank := m.get("fair_rank"), int) else place
        for place, m in enumerate(metadatas, start=1)
    ]
    kept, also = shown_once([(d.doc_id, d.text) for d in listed], labels)
    numbered = [
        dataclasses.replace(listed[i], number=labels[i], also_numbered=more)
        for i, more in zip(kept, also, strict=True)
    ]
    return numbered, [metadatas[i] for i in kept]


def _entries(listed: Sequence[Any]) -> list[Any]:
    """The titles a structured answer's source ids index: each Document's title by its entry
    number (several Documents carrying one number give their titles, read by the citation's
    person: :func:`fairrag_core.kit.entries_by_label`)."""
    titles = [d.title for d in listed]
    if all(d.number is None for d in listed):
        return titles
    return entries_by_label(titles, [d.number for d in listed], [d.also_numbered for d in listed])

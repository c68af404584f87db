"""Structured citations read into the paper's answer text, so that a structured answer gives the
same record as the same citations written as text (docs/SPEC.md, "Citations" → Structured
citations).

Models cite in structure more and more: an object from ``with_structured_output`` or an
agent's ``response_format``, the same fields as a tool call's arguments or as JSON message
content, or provider citation metadata (a text span with the index of the document it cites,
as Anthropic's content blocks and Cohere's citations give it). Each is read here, without any
framework, into a :class:`StructuredAnswer`, and :func:`render_answer` writes it as the text
the citation rules read (:mod:`fairrag_core.citations`, :mod:`fairrag_core.attribution`): the
prose, with each citation written ``(DocTitle: <title>)`` where its span ends, or as a bullet
``- <person> (DocTitle: <title>)`` after the prose when it has no span.

Which document a citation points to is never guessed:

- ``source_id`` and a bare integer in ``citations`` are *source ids*, numbered from
  ``source_id_base``: 0 as in LangChain's citation how-to (``Source ID: 0`` for the first
  document shown), 1 when the prompt numbered sources from 1. The caller states it.
- ``number`` is the ``[n]`` entry number of the context, always from 1 (docs/SPEC.md,
  "Context").
- ``document_index`` (provider citations) is the 0-based position of the document in the
  list the model was given, as both providers define it.
- ``title`` (or a bare string in ``citations``) is a title, checked as a written one.

A source id outside the shown list stays a citation, of no shown document: it counts as a
bullet that cites nothing (groundedness) and never in parity.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .citations import ContextDocument, names_person

__all__ = [
    "CITATION_FIELDS",
    "Entry",
    "StructuredAnswer",
    "StructuredCitation",
    "check_source_id_base",
    "citation_list",
    "read_content_blocks",
    "read_json_answer",
    "read_span_citations",
    "read_structured_answer",
    "read_text_or_object",
    "render_answer",
    "written_answer",
]

_MAX_CITATIONS = 1000
"""Most citations read from one answer: a longer list is an error, never a slow record."""


@dataclass(frozen=True)
class StructuredCitation:
    """One citation of a structured answer: the document it points to and who it names."""

    position: int | None = None
    """0-based position of the cited document in the shown list (None: cited by title)."""
    title: str | None = None
    """The cited title as given (None: cited by position)."""
    person: str | None = None
    """The person the citation is for, when the answer names one."""
    end: int | None = None
    """Where in :attr:`StructuredAnswer.text` the cited span ends (None: no span)."""
    given: str = ""
    """The reference as the model gave it (``source_id 2``, ``[3]``, ``document_index 0``)."""


@dataclass(frozen=True)
class StructuredAnswer:
    """An answer and its citations as a model gave them in structure."""

    text: str
    """The answer's prose (may be empty)."""
    citations: tuple[StructuredCitation, ...]
    """Its citations, in the order given."""
    form: str
    """Where it was read from: ``fields``, ``json``, ``content_blocks`` or ``spans``."""


def check_source_id_base(value: Any, name: str = "source_id_base") -> int:
    """``value`` as the number the first source id stands for: 0 or 1."""
    if isinstance(value, bool) or value not in (0, 1):
        raise ValueError(
            f"{name} must be 0 (source ids from 0, as LangChain's citation how-to) or 1 "
            f"(from 1, as [n] entry numbers), got {value!r}"
        )
    return int(value)


def _as_mapping(value: Any) -> Mapping[str, Any] | None:
    """A structured output as a mapping: a mapping, a pydantic model or a dataclass."""
    if isinstance(value, Mapping):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        dumped = dump()
        return dumped if isinstance(dumped, Mapping) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return None


def _index(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _citation(item: Any, source_id_base: int) -> StructuredCitation | None:
    """One entry of a ``citations`` list, or None when it is no citation."""
    number = _index(item)
    if number is not None:
        return StructuredCitation(position=number - source_id_base, given=f"source id {number}")
    if isinstance(item, str):
        return StructuredCitation(title=item, given=item)
    entry = _as_mapping(item)
    if entry is None:
        return None
    person = entry.get("person", entry.get("name"))
    person = person if isinstance(person, str) and person.strip() else None
    if _index(entry.get("source_id")) is not None:
        source_id = entry["source_id"]
        position, given = source_id - source_id_base, f"source id {source_id}"
    elif _index(entry.get("number")) is not None:
        position, given = entry["number"] - 1, f"[{entry['number']}]"
    elif _index(entry.get("document_index")) is not None:
        position, given = entry["document_index"], f"document index {entry['document_index']}"
    elif isinstance(entry.get("title"), str):
        return StructuredCitation(title=entry["title"], person=person, given=entry["title"])
    else:
        return None
    return StructuredCitation(position=position, person=person, given=given)


CITATION_FIELDS = ("citations", "sources", "source_ids")
"""The fields a structured answer's citations list is read from, the first one that holds a
list: LangChain's how-to names it ``citations``; schemas written for RAG name it ``sources``
or ``source_ids`` as often (a user trial found ``Answer(answer: str, sources: list[int])``
recorded with its sources silently ignored). ``sources`` and ``source_ids`` are read only
beside an ``answer`` or ``response`` text and when every entry is a citation (a source id, a
title, an object citing by one): a tool call ``fetch(source_ids=[1, 3])`` is no answer, and
LlamaIndex's ``AgentChatResponse.sources`` (tool outputs) or a ``{"response", "sources":
nodes}`` result cites nothing (:func:`citation_list`)."""


def citation_list(fields: Mapping[str, Any]) -> Sequence[Any] | None:
    """The citations list of a structured answer's ``fields`` (:data:`CITATION_FIELDS`), else
    None."""
    found = fields.get("citations")
    if isinstance(found, Sequence) and not isinstance(found, (str, bytes)):
        return found
    texts = isinstance(fields.get("answer"), str) or isinstance(fields.get("response"), str)
    for name in CITATION_FIELDS[1:]:
        found = fields.get(name)
        if (
            texts
            and isinstance(found, Sequence)
            and not isinstance(found, (str, bytes))
            and all(_citation(item, 0) is not None for item in found[:_MAX_CITATIONS])
        ):
            return found
    return None


def read_structured_answer(value: Any, *, source_id_base: int) -> StructuredAnswer | None:
    """A structured answer (a mapping, pydantic model or dataclass with a ``citations`` list,
    else a ``sources`` or ``source_ids`` list (:data:`CITATION_FIELDS`), and optionally an
    ``answer`` text, else a ``response`` text; or with an ``answer`` text and no such list: its
    text, citing as text does), or None when ``value`` is not one.

    ``citations`` entries: a source id (int, from ``source_id_base``), a title (str), or an
    object with ``source_id``, ``number`` (``[n]``, from 1), ``document_index`` (from 0) or
    ``title``, and optionally ``person`` (or ``name``), e.g. LangChain's how-to
    ``CitedAnswer(answer=..., citations=[0, 2])`` and ``QuotedAnswer`` (``source_id`` and
    ``quote``). An entry of none of these forms is an unreadable citation: it counts as a bullet
    that cites nothing, as an unparsable bullet line does.
    """
    base = check_source_id_base(source_id_base)
    fields = _as_mapping(value)
    if fields is None:
        return None
    items = citation_list(fields)
    if items is None:
        items = fields.get("citations")
    answer = fields.get("answer")
    if items is None and isinstance(answer, str):  # ``Answer(answer: str)``: its text
        return StructuredAnswer(answer, (), "fields")
    if not isinstance(items, Sequence) or isinstance(items, (str, bytes)):
        return None
    if not isinstance(answer, str):  # beside a citations list, LlamaIndex's name for the text
        answer = fields.get("response")
    citations = []
    for item in items[:_MAX_CITATIONS]:  # the first 1,000 are read (docs/SPEC.md)
        citation = _citation(item, base)
        citations.append(citation if citation is not None else StructuredCitation())
    return StructuredAnswer(answer if isinstance(answer, str) else "", tuple(citations), "fields")


def read_json_answer(text: str, *, source_id_base: int) -> StructuredAnswer | None:
    """A structured answer written as JSON message content (an object, optionally fenced as a
    Markdown code block), or None when ``text`` is not one."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    if not body.startswith("{"):
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return None
    answer = read_structured_answer(value, source_id_base=source_id_base)
    return None if answer is None else dataclasses.replace(answer, form="json")


def read_content_blocks(blocks: Sequence[Any]) -> StructuredAnswer | None:
    """An answer given as content blocks with provider citations, or None when no block cites.

    Text blocks are joined in order; a block's ``citations`` (Anthropic: ``document_index``,
    0-based, and the cited span is the block's text) and ``annotations`` of type ``citation``
    (LangChain's standard blocks: by ``title``, or ``document_index``) cite where the block
    ends.
    """
    text = ""
    citations: list[StructuredCitation] = []
    for block in blocks:
        if isinstance(block, str):
            text += block
            continue
        if not isinstance(block, Mapping) or not isinstance(block.get("text"), str):
            continue
        text += block["text"]
        person = block["text"].strip() or None
        cited = list(block.get("citations") or [])
        cited += [a for a in block.get("annotations") or [] if isinstance(a, Mapping)]
        for item in cited:
            entry = _as_mapping(item)
            if entry is None:
                continue
            citation = _citation({**entry, "person": person}, 0)
            if citation is None and isinstance(entry.get("document_title"), str):
                citation = StructuredCitation(title=entry["document_title"], person=person)
            if citation is not None:
                citations.append(dataclasses.replace(citation, end=len(text)))
    if not citations:
        return None
    return StructuredAnswer(text, tuple(citations[:_MAX_CITATIONS]), "content_blocks")


def read_span_citations(text: str, spans: Sequence[Any]) -> StructuredAnswer | None:
    """An answer with span citations (Cohere's: ``start``, ``end`` and the cited documents'
    0-based ``document_index`` or ``document_indices``), or None when none is readable."""
    citations: list[StructuredCitation] = []
    for item in spans:
        span = _as_mapping(item)
        end = None if span is None else _index(span.get("end"))
        if span is None or end is None or not 0 <= end <= len(text):
            continue
        start = _index(span.get("start"))
        person = text[start:end].strip() if start is not None and 0 <= start <= end else None
        indices = span.get("document_indices")
        if not isinstance(indices, Sequence):
            indices = [span.get("document_index")]
        for index in indices[:_MAX_CITATIONS]:
            if _index(index) is not None:
                citations.append(
                    StructuredCitation(
                        position=index, person=person, end=end, given=f"document index {index}"
                    )
                )
        if len(citations) >= _MAX_CITATIONS:
            break
    if not citations:
        return None
    return StructuredAnswer(text, tuple(citations[:_MAX_CITATIONS]), "spans")


Entry = str | tuple[str, ...] | None
"""What a source id names: a shown document's title; the titles of the several documents
that carry that entry number (an agent's searches, each numbered from ``[1]``); None, no
titled document."""


class _Names:
    """What a shared number's citation is read by, each decided once per answer: whether the
    answer's text writes a person's name or surname (:meth:`mentioned`), the one shown person
    it writes of (:meth:`only_other`), and whether a given person is one of the shown
    documents' (:meth:`shown`)."""

    def __init__(self, text: str, titles: Sequence[Entry]) -> None:
        self.text = text[:MAX_MENTION_SCAN]
        self.titles = titles
        self._written: dict[str, bool] = {}
        self._shown: dict[str, bool] = {}
        self._people: list[str] | None = None

    def written(self, words: str) -> bool:
        """Whether the text writes ``words`` whole (in order, not inside other words; case as
        written)."""
        found = self._written.get(words)
        if found is None:
            pattern = r"\s+".join(re.escape(word) for word in words.split())
            found = bool(pattern) and re.search(rf"(?<!\w){pattern}(?!\w)", self.text) is not None
            self._written[words] = found
        return found

    def mentioned(self, person: str) -> bool:
        """Whether the text writes ``person``'s name, or its last word (a surname: ``Knuth``,
        as a line's mention reads it, docs/SPEC.md "Citation precision")."""
        words = person.split()
        return bool(words) and (self.written(person) or self.written(words[-1]))

    def only_other(self, person: str) -> str | None:
        """The one shown document's person the text writes of (:meth:`mentioned`), when it
        writes of exactly one and not of ``person`` (the cited document's): whom a citation
        without a person, given beside that text, is about (a user trial: "Lenore Blum studied
        ..." citing Donald Knuth's entry was credited to Knuth); else None."""
        if self._people is None:
            people = {
                str(ContextDocument(title).person)
                for entry in self.titles
                for title in (entry if isinstance(entry, tuple) else (entry,))
                if title
            }
            self._people = sorted(p for p in people if p.strip() and self.mentioned(p))
        if len(self._people) != 1 or self.mentioned(person):
            return None  # several written of, or the cited one
        return self._people[0]

    def shown(self, person: str) -> bool:
        """Whether ``person`` names a shown document's person (any entry's)."""
        found = self._shown.get(person)
        if found is None:
            found = self._shown[person] = any(
                _names_or_surname(person, str(ContextDocument(title).person))
                for entry in self.titles
                for title in (entry if isinstance(entry, tuple) else (entry,))
                if title
            )
        return found


def _names_or_surname(given: str, person: str) -> bool:
    """Whether a citation's ``given`` person names ``person`` (the name rule), or is its last
    word alone (``Hopper``: as text's ``- Hopper [1]`` mentions Grace Hopper)."""
    words = person.split()
    return names_person(given, person) or (bool(words) and given.strip() == words[-1])


MAX_MENTION_SCAN = 100_000
"""The characters of an answer's text searched for a carrier's name (bounded: linear time)."""


def _cited_title(
    citation: StructuredCitation, titles: Sequence[Entry], names: _Names | None = None
) -> str | None:
    """The title a citation cites; None when it points to no shown document, or to a number
    several shown documents carry and its person names more than one of them, or is no shown
    person (docs/SPEC.md "Attribution": as a shared ``[n]`` in text is read); a person naming
    another shown document's person cites the first of them, a mis-citation whichever it
    means (a review: text counted it, a structured answer did not); a citation without a
    person of such a number cites the one of them whose person the answer's text names
    (``names``), when it names exactly one (a user trial: "Alan Turing and Barbara Liskov."
    citing ``[1, 2]`` after two searches credited no one)."""
    if citation.title is not None:
        return " ".join(citation.title.split())
    position = citation.position
    if position is None or not 0 <= position < len(titles) or not titles[position]:
        return None
    entry = titles[position]
    if isinstance(entry, tuple):
        person = citation.person
        names = names or _Names("", titles)
        carried = [str(ContextDocument(t).person) for t in entry]
        if person:
            named = [t for t, p in zip(entry, carried, strict=True) if _names_or_surname(person, p)]
            if not named and names.shown(person):
                return entry[0]  # another shown person's: wrong whichever entry is meant
        else:
            named = [t for t, p in zip(entry, carried, strict=True) if names.mentioned(p)]
            if not named and names.only_other(carried[0]) not in (None, *carried):
                return entry[0]  # beside a text of another shown person alone: wrong, too
        return named[0] if len(named) == 1 else None
    return str(entry)


NOT_SHOWN = ", not among the {count} entries shown"
"""How a citation of no shown document is written (after what it gave): a title no document
has, read as a citation beyond the context (:data:`NOT_SHOWN_WRITTEN`)."""
NOT_SHOWN_WRITTEN = re.compile(r", not among the \d+ entries shown$")
"""A written title :data:`NOT_SHOWN` ends: the attribution counts it beyond the context, as the
same id written ``[n]`` is (a user trial: ``citations=[0, 9]`` of four entries counted no
citation beyond the context, precision 1.0, where ``[1]`` and ``[9]`` in text gave 0.5)."""


def _written_title(
    citation: StructuredCitation, titles: Sequence[Entry], names: _Names | None = None
) -> str:
    title = _cited_title(citation, titles, names)
    if title is not None:
        return title
    position = citation.position
    if position is not None and 0 <= position < len(titles):
        entry = titles[position]
        if isinstance(entry, tuple):
            return f"{citation.given}, carried by {len(entry)} shown documents"
    return f"{citation.given}{NOT_SHOWN.format(count=len(titles))}"


def read_text_or_object(value: Any, *, source_id_base: int) -> tuple[StructuredAnswer | None, str]:
    """The structured answer in a text (JSON content, :func:`read_json_answer`) or an object
    (:func:`read_structured_answer`), and the form it came in: ``json``,
    ``structured_response``, else ``text`` (None: plain text, or an object with no
    ``citations`` list)."""
    if isinstance(value, str):
        found = read_json_answer(value, source_id_base=source_id_base)
        return found, "json" if found is not None else "text"
    found = read_structured_answer(value, source_id_base=source_id_base)
    return found, "structured_response" if found is not None else "text"


def written_answer(
    value: Any, titles: Sequence[Entry], *, source_id_base: int
) -> tuple[str | None, str]:
    """An answer given as text or as a structured object, as the text the citation rules read
    against the shown ``titles`` (:func:`render_answer`), and its form
    (:func:`read_text_or_object`): plain text as it is; an object that holds no structured
    answer gives None."""
    found, form = read_text_or_object(value, source_id_base=source_id_base)
    if found is not None:
        return render_answer(found, titles), form
    return (value if isinstance(value, str) else None), form


def render_answer(answer: StructuredAnswer, titles: Sequence[Entry]) -> str:
    """``answer`` as the text the citation rules read, against the shown list's ``titles``
    (in the order shown; None for an untitled document; a tuple of titles for a number
    several shown documents carry, which a citation cites when its person names one of them).

    A citation with a span is written `` (DocTitle: <title>)`` where its span ends; the others
    become bullets ``- <person> (DocTitle: <title>)`` after the prose, the person being the one
    given, else the cited document's (:class:`~fairrag_core.citations.ContextDocument`'s rule).
    A citation of no shown document, or of a shared number it does not resolve, keeps its
    place with a title no document has (it is counted, and invalid); an unreadable one is a
    bare bullet (counted, citing nothing).
    """
    inserts = sorted(
        ((c.end, i, c) for i, c in enumerate(answer.citations) if c.end is not None),
        key=lambda item: (item[0], item[1]),
    )
    pieces, start = [], 0
    names = _Names(answer.text, titles)  # each name looked up once per answer
    for end, _, citation in inserts:  # one pass: linear in the text and the citations
        written = _written_title(citation, titles, names)
        pieces += [answer.text[start:end], f" (DocTitle: {written})"]
        start = end
    text = "".join([*pieces, answer.text[start:]])
    bullets = []
    for citation in answer.citations:
        if citation.end is not None:
            continue
        if citation.position is None and citation.title is None:  # unreadable
            bullets.append("- (an unreadable citation)")
            continue
        title = _cited_title(citation, titles, names)
        person = citation.person or (citation.given if title is None else None)
        if person is None:  # the text's person when it writes of one other shown person alone
            person = names.only_other(str(ContextDocument(str(title)).person))
        person = person or ContextDocument(str(title)).person
        written = _written_title(citation, titles, names)
        bullets.append(f"- {' '.join(str(person).split())} (DocTitle: {written})")
    return "\n".join(part for part in (text.strip("\n"), *bullets) if part)

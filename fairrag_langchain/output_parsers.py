"""CitationOutputParser: the paper's answer format (one bullet per person, citing a context
title) parsed into structure by the core's citation parser, optionally checked against the
context documents."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.output_parsers import BaseOutputParser
from langchain_core.outputs import ChatGeneration, Generation
from pydantic import BaseModel, field_validator

from fairrag_core import group_labels
from fairrag_core.attribution import attribute_answer
from fairrag_core.citations import ground_citations, parse_citations
from fairrag_core.prompts import format_instructions
from fairrag_core.structured_citations import check_source_id_base

from ._answers import answer_text
from ._documents import context_documents

__all__ = [
    "AnswerLine",
    "AttributedSource",
    "CitationOutputParser",
    "CitedAnswer",
    "ParsedCitation",
]


class ParsedCitation(BaseModel):
    """One answer bullet: a person and the title cited for them."""

    person: str
    """The name written before the citation (bullet, markup and description removed)."""
    title: str
    """The cited title as written."""
    line: str
    """The answer line it was parsed from."""
    line_number: int
    """1-based line number in the answer."""
    valid: bool | None = None
    """The title is a context title (after NFC, case-fold, whitespace); None: not checked."""
    names_person: bool | None = None
    """The cited name names the person of the matched document; None without context."""
    group: Any = None
    """The matched document's group (None when not valid, unknown, or no ``group_key``)."""
    context_index: int | None = None
    """Index of the matched document in the context documents (None when not valid)."""


class AnswerLine(BaseModel):
    """A non-blank answer line that holds no citation."""

    line: str
    """The line, stripped."""
    line_number: int
    """1-based line number in the answer."""


class AttributedSource(BaseModel):
    """One context document a bullet is attributed to, in any citation style or by naming its
    person (:func:`fairrag_core.attribution.attribute_answer`, docs/SPEC.md "Attribution")."""

    line_number: int
    person: str
    """The bullet's head: the name it gives."""
    title: str
    style: str
    """``doctitle``, ``numbered``, ``markdown_link``, ``bracketed_title``, ``source_label`` or
    ``implicit`` (named, not cited)."""
    names_person: bool
    group: Any = None
    context_index: int
    """Index of the document in the context documents."""


class CitedAnswer(BaseModel):
    """A parsed answer: every non-blank line is in exactly one of the three lists."""

    citations: list[ParsedCitation]
    """Parsed citation bullets in answer order (duplicates kept)."""
    unparsed_lines: list[AnswerLine]
    """Bullet lines that could not be parsed; they count as bullets citing nothing."""
    prose_lines: list[AnswerLine]
    """Lines that are not bullets (preamble, headings, closing remarks)."""
    checked: bool
    """Whether the citations were checked against context documents."""
    citation_styles: list[str] = []
    """The citation styles found (docs/SPEC.md, "Attribution"); empty when not checked."""
    attributed: list[AttributedSource] = []
    """The attributed source set (any style, or people named); empty when not checked."""

    @property
    def bullet_count(self) -> int:
        """Parsed citations plus unparsable bullet lines (the groundedness denominator)."""
        return len(self.citations) + len(self.unparsed_lines)

    @property
    def valid_citations(self) -> list[ParsedCitation]:
        """The citations whose title is in the context."""
        return [citation for citation in self.citations if citation.valid]


class CitationOutputParser(BaseOutputParser[CitedAnswer]):
    """Parse ``<Person Name> (DocTitle: <exact Title from context>)`` bullets (docs/SPEC.md).

    The grammar, the variants accepted (``-``/``*``/``•``/``1.`` bullets, bold, any-case
    ``doctitle:``, trailing periods) and what counts as a bullet are the core's
    (:func:`fairrag_core.citations.parse_citations`); nothing is evaluated, and lines that cannot
    be parsed are reported, never dropped. A citation is valid when its title is the title of a
    context document (``metadata[title_key]``, else the document's ``Title:`` line); text inside
    a document cannot make a citation valid.

    Instantiate:
        .. code-block:: python

            parser = CitationOutputParser()
            parser.get_format_instructions()  # the format and rules of the paper's prompt
            answer = parser.invoke(ai_message)  # CitedAnswer, validity unchecked (None)
            answer = parser.parse_with_context(text, docs)  # each citation valid or not

    With ``context`` set, :meth:`parse` (and so ``invoke``) checks against it. With
    ``group_key`` set, each valid citation carries its document's group (core rule:
    ``KeyError`` when no context document has the field).

    Structured citations are read too (docs/SPEC.md, "Citations" → Structured citations) and
    give the same result as the same citations written as text: an AI message's tool-call
    arguments (``with_structured_output``'s, ``ToolStrategy``'s), provider citation content
    blocks, JSON content, and, by :meth:`parse_structured`, a structured output object
    (LangChain's how-to ``CitedAnswer(answer=..., citations=[0, 2])``). Source ids count from
    ``source_id_base`` (0 as in LangChain's citation how-to; 1 for sources numbered from 1);
    a source id can only be resolved to a title against the context.
    """

    context: list[Document] | None = None
    """Context documents to check citations against (None: parse only)."""
    group_key: str | None = None
    """The metadata field holding the group, to report the group of each valid citation."""
    title_key: str = "title"
    """The metadata field holding a document's title (fallback: its ``Title:`` line)."""
    source_id_base: int = 0
    """The number of the first source in structured citations' source ids (0 or 1)."""

    @field_validator("source_id_base")
    @classmethod
    def _check_base(cls, value: int) -> int:
        return check_source_id_base(value)

    @property
    def _type(self) -> str:
        return "fairrag_citation_output_parser"

    def get_format_instructions(self) -> str:
        """The answer format and rules given to the model (``fairrag_core.prompts``)."""
        return format_instructions()

    def parse(self, text: str) -> CitedAnswer:
        """Parse ``text`` (the paper's bullets, or structured citations as JSON); checked
        against ``context`` when that field is set."""
        return self._parse(self._text(text, self.context), self.context)

    def parse_result(self, result: list[Generation], *, partial: bool = False) -> CitedAnswer:
        """Parse a model's generation: its message's structured citations when it has any
        (tool-call arguments, citation content blocks, JSON content), else its text."""
        first = result[0] if result else None
        if isinstance(first, ChatGeneration):
            return self._parse(self._text(first.message, self.context), self.context)
        return super().parse_result(result, partial=partial)

    def parse_structured(
        self, value: Any, documents: Sequence[Document] | None = None
    ) -> CitedAnswer:
        """Parse a structured output (``with_structured_output``'s object, a mapping) against
        ``documents`` (default: ``context``), as the same citations written as text."""
        context = self.context if documents is None else list(documents)
        return self._parse(self._text(value, context), context)

    def _text(self, value: Any, documents: Sequence[Document] | None) -> str:
        text, _ = answer_text(
            value,
            documents or [],
            source_id_base=self.source_id_base,
            title_key=self.title_key,
            fallback=value if isinstance(value, str) else "",
        )
        return text or ""

    def parse_with_context(self, text: str, documents: Sequence[Document]) -> CitedAnswer:
        """Parse ``text`` and mark each citation valid or not against ``documents``."""
        return self._parse(self._text(text, documents), list(documents))

    async def aparse_result(
        self, result: list[Generation], *, partial: bool = False
    ) -> CitedAnswer:
        """Parsing is linear-time string work: done on the event loop, no executor hop."""
        return self.parse_result(result, partial=partial)

    def _parse(self, text: str, documents: list[Document] | None) -> CitedAnswer:
        parsed = parse_citations(text)
        unparsed = [AnswerLine(line=u.line, line_number=u.line_number) for u in parsed.unparsed]
        prose = [AnswerLine(line=p.line, line_number=p.line_number) for p in parsed.prose]
        if documents is None:
            citations = [
                ParsedCitation(
                    person=c.person, title=c.title, line=c.line, line_number=c.line_number
                )
                for c in parsed.citations
            ]
            return CitedAnswer(
                citations=citations, unparsed_lines=unparsed, prose_lines=prose, checked=False
            )
        groups = None
        if self.group_key is not None and documents:
            groups = group_labels(
                [d.metadata for d in documents], self.group_key, require_present=False
            )
        context, origin = context_documents(documents, groups, self.title_key)
        citations = [
            ParsedCitation(
                person=g.citation.person,
                title=g.citation.title,
                line=g.citation.line,
                line_number=g.citation.line_number,
                valid=g.valid,
                names_person=g.names_person,
                group=g.group,
                context_index=None if g.position is None else origin[g.position],
            )
            for g in ground_citations(parsed, context)
        ]
        result = attribute_answer(text, context)
        attributed = [
            AttributedSource(
                line_number=bullet.line_number,
                person=bullet.person,
                title=a.title,
                style=a.style,
                names_person=a.names_person,
                group=a.group,
                context_index=origin[a.position],
            )
            for bullet in result.bullets
            for a in bullet.attributions
        ]
        return CitedAnswer(
            citations=citations,
            unparsed_lines=unparsed,
            prose_lines=prose,
            checked=True,
            citation_styles=list(result.styles),
            attributed=attributed,
        )

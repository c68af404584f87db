"""Parse the citation bullets of a generated answer and ground them in the retrieved context.

docs/SPEC.md, "Citations": the answer format is one bullet per person,
``<Person Name> (DocTitle: <exact Title from context>)``. Typical use::

    parsed = parse_citations(answer_text)
    grounded = ground_citations(parsed, [ContextDocument(title, group=...) for each retrieved doc])
    utility = groundedness(grounded, parsed.bullet_count)
    gdp = generation_parity(cited_groups(grounded), "female")

Our choices (the paper is silent; docs/SPEC.md leaves them to the code):

- **Lines.** The answer is read line by line; blank lines are ignored. A *bullet* is a line that
  parses as a citation (a bullet marker is optional), or a line that starts with a bullet marker
  (``-``, ``*``, ``+``, ``•``, ``–``, ``1.``, ``1)``) or mentions a ``DocTitle:`` but cannot be
  parsed; the latter are reported in :attr:`ParsedAnswer.unparsed` and count as bullets that
  cite nothing. Every other non-blank line (a preamble such as "Here are five role models:", a
  heading, a closing remark, ``---``) is *prose*: reported in :attr:`ParsedAnswer.prose`, never
  dropped, but not a bullet.
- **Duplicates are kept.** Every bullet counts for groundedness, and every valid citation
  counts for generation parity, so a document cited on two bullets counts twice in both: the
  metrics describe what the answer shows its reader. Nothing is merged anywhere.
- **Validity** uses only the context titles (Unicode NFC, case-fold, whitespace-collapsed, see
  :func:`normalize_title`); a document's text is never read, so a document that imitates a
  citation line cannot make a citation valid.
- **Naming the person**: see :class:`GroundedCitation`.

The parser never evaluates text; it uses anchored or literal-prefixed regular expressions and
one linear scan per line, so its running time is linear in the length of the answer.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice

__all__ = [
    "Citation",
    "ContextDocument",
    "GroundedCitation",
    "ParsedAnswer",
    "UnparsedLine",
    "cited_groups",
    "ground_citations",
    "normalize_title",
    "parse_citations",
]


@dataclass(frozen=True)
class Citation:
    """One parsed answer bullet: a person and the document title cited for them."""

    person: str
    """The name written before the citation (markup, bullet and trailing description removed)."""
    title: str
    """The cited title as written (markup and wrapping quotes removed, whitespace collapsed)."""
    line: str
    """The answer line it was parsed from, stripped of surrounding whitespace."""
    line_number: int
    """1-based line number in the answer."""


@dataclass(frozen=True)
class UnparsedLine:
    """A non-blank answer line that holds no parsable citation."""

    line: str
    """The line, stripped of surrounding whitespace."""
    line_number: int
    """1-based line number in the answer."""


@dataclass(frozen=True)
class ParsedAnswer:
    """The result of :func:`parse_citations`: every non-blank line lands in exactly one field."""

    citations: tuple[Citation, ...]
    """Parsed citation bullets, in answer order (duplicates kept)."""
    unparsed: tuple[UnparsedLine, ...]
    """Bullet lines that could not be parsed (they count as bullets citing nothing)."""
    prose: tuple[UnparsedLine, ...]
    """Non-bullet lines (preamble, headings, closing remarks); not bullets."""

    @property
    def bullet_count(self) -> int:
        """Number of bullets: parsed citations plus unparsable bullet lines."""
        return len(self.citations) + len(self.unparsed)


# Whitespace is collapsed to single spaces before these run, so no pattern below contains an
# unbounded repetition next to another one (no catastrophic backtracking).
_BULLET = re.compile(r"(?:[-*+•‣◦▪●–—]|\d{1,3}[.)]) ")
_CITE = re.compile(r"([(\[（]) ?(?:doc[ _-]?)?title ?[:：]", re.IGNORECASE)
_DOCTITLE = re.compile(r"doc[ _-]?title", re.IGNORECASE)
_ROUND = re.compile(r"[()（）]")
_SQUARE = re.compile(r"[\[\]]")
_WORD = re.compile(r"\w")
_DESCRIPTION = re.compile(r" [-–—] |: ")
_MAX_TITLE = 1000
_OPENING_QUOTES = "\"'“‘«`"
_CLOSING_QUOTES = "\"'”’»`"


def parse_citations(text: str) -> ParsedAnswer:
    """Parse an answer into citation bullets, unparsable bullets and prose lines.

    Accepted per line: an optional bullet (``-``, ``*``, ``+``, ``•``, ``–``, ``1.``, ``1)``),
    ``**bold**``/``__bold__``/``*italic*`` around the name, the title or the whole line, any
    spacing, ``DocTitle:``/``Doc Title:``/``doc_title:``/``Title:`` in any case inside ``(...)``,
    ``[...]`` or ``（...）``, a title with parentheses or commas inside (brackets are matched, so
    ``(DocTitle: John Smith (engineer))`` cites ``John Smith (engineer)``), quotes around the
    title, and anything after the closing bracket (a trailing period or a short description). A
    description between the name and the citation, after `` – ``, `` - ``, `` — `` or ``: ``, is
    dropped from the name. A citation whose closing bracket is missing (within 1,000 characters)
    takes the rest of the line as its title (one trailing period removed). A line with more than
    one ``DocTitle:`` (several people on one bullet), or without a name or a title, is an
    unparsable bullet.

    See the module docstring for what counts as a bullet and how duplicates count.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be the answer as a str, got {type(text).__name__}")
    citations: list[Citation] = []
    unparsed: list[UnparsedLine] = []
    prose: list[UnparsedLine] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = " ".join(raw.split())
        if not line:
            continue
        parsed, is_bullet = _parse_line(line)
        stripped = raw.strip()
        if parsed is not None:
            citations.append(Citation(parsed[0], parsed[1], stripped, number))
        elif is_bullet:
            unparsed.append(UnparsedLine(stripped, number))
        else:
            prose.append(UnparsedLine(stripped, number))
    return ParsedAnswer(tuple(citations), tuple(unparsed), tuple(prose))


def _strip_bullet(line: str) -> tuple[str, bool]:
    match = _BULLET.match(line)
    if match is None:
        return line, False
    return line[match.end() :], True


def _parse_line(line: str) -> tuple[tuple[str, str] | None, bool]:
    """``((person, title) or None, is_bullet)`` for one whitespace-collapsed, non-blank line."""
    body, marked = _strip_bullet(line)
    body = body.replace("**", "").replace("__", "").strip()
    body, marked_inside = _strip_bullet(body)  # "**1. Name** (...)": the marker was in the bold
    if not _WORD.search(body):  # decoration such as "---" or "* * *"
        return None, False
    hits = list(islice(_CITE.finditer(body), 2))
    if not hits:  # a line naming a DocTitle outside brackets tried to cite: still a bullet
        return None, marked or marked_inside or _DOCTITLE.search(body) is not None
    if len(hits) > 1:
        return None, True
    hit = hits[0]
    opener = hit.group(1)
    brackets, openers = (_SQUARE, "[") if opener == "[" else (_ROUND, "(（")
    # Match brackets over at most _MAX_TITLE characters: a longer "title" is no real title, and
    # the bound keeps a pathological line (a million "(") from a long Python-level scan.
    depth = 1
    end = None
    for bracket in brackets.finditer(body, hit.end(), hit.end() + _MAX_TITLE):
        depth += 1 if bracket.group() in openers else -1
        if depth == 0:
            end = bracket.start()
            break
    if end is None:
        title = body[hit.end() :].strip().removesuffix(".")
    else:
        title = body[hit.end() : end]
    title = _unwrap(title)
    person = _unwrap(_DESCRIPTION.split(body[: hit.start()], maxsplit=1)[0].rstrip(" -–—:,;|"))
    if not title or not person:
        return None, True
    return (person, title), True


def _unwrap(text: str) -> str:
    """Strip spaces, italic markers and one pair of wrapping quotes."""
    text = text.strip().strip("*_").strip()
    if len(text) >= 2 and text[0] in _OPENING_QUOTES and text[-1] in _CLOSING_QUOTES:
        text = text[1:-1].strip()
    return text


def normalize_title(title: str) -> str:
    """A title's comparison key: Unicode NFC, case-folded, whitespace collapsed and stripped.

    The docs/SPEC.md rule for "a title in the context": ``normalize_title(cited) ==
    normalize_title(context_title)``. NFC is applied again after case-folding, which can
    produce decomposed characters.
    """
    if not isinstance(title, str):
        raise TypeError(f"title must be a str, got {type(title).__name__}")
    folded = unicodedata.normalize("NFC", unicodedata.normalize("NFC", title).casefold())
    return " ".join(folded.split())


_DISAMBIGUATION = re.compile(r" ?\([^()]*\)$")


@dataclass(frozen=True)
class ContextDocument:
    """A document shown to the generator, as far as grounding needs it."""

    title: str
    """The document's ``Title:`` value, the only thing a citation is checked against."""
    group: Hashable | None = None
    """The group of the person the document is about (``None`` = unknown)."""
    person: str | None = None
    """Who the document is about; defaults to the title without a trailing parenthetical
    disambiguation (``"John Smith (engineer)"`` -> ``"John Smith"``)."""
    text: str = ""
    """The document text; never read by grounding (text cannot make a citation valid)."""

    def __post_init__(self) -> None:
        if not isinstance(self.title, str) or not self.title.strip():
            raise ValueError(f"title must be a non-empty str, got {self.title!r}")
        try:
            hash(self.group)
        except TypeError:
            raise TypeError(f"group must be a hashable label, got {self.group!r:.80}") from None
        if self.person is None:
            title = " ".join(self.title.split())
            person = _DISAMBIGUATION.sub("", title).strip() or title
            object.__setattr__(self, "person", person)
        elif not isinstance(self.person, str):
            raise TypeError(f"person must be a str or None, got {self.person!r}")


@dataclass(frozen=True)
class GroundedCitation:
    """A citation checked against the context.

    ``names_person`` compares the cited name with the document's ``person`` on word tokens
    (``\\w+``) after case-folding and removing accents (``"Emilie du Chatelet"`` names
    ``"Émilie du Châtelet"``): it holds when the two token lists are equal, hold the same words in
    another order (``"Lovelace, Ada"``), or one appears inside the other as a run of whole words
    (``"Curie"`` or ``"Dr. Marie Curie"`` names ``"Marie Curie"``; ``"Mari"`` does not). Our
    choice: the paper does not define "naming the person".
    """

    citation: Citation
    valid: bool
    """The cited title is a context title after :func:`normalize_title`."""
    names_person: bool
    """The cited name names the person the matched document is about (False when not valid)."""
    group: Hashable | None = None
    """The matched document's group (None when not valid)."""
    position: int | None = None
    """0-based position of the matched document in the context (None when not valid)."""

    @property
    def supported(self) -> bool:
        """Valid and naming the person: what the groundedness numerator counts."""
        return self.valid and self.names_person


def ground_citations(
    citations: ParsedAnswer | Iterable[Citation],
    context: Sequence[ContextDocument | str],
) -> list[GroundedCitation]:
    """Check each citation against the context documents, in citation order (duplicates kept).

    A citation is valid when ``normalize_title(citation.title)`` equals the normalised title of a
    context document; when several context documents share a normalised title, the first one is
    matched. A plain ``str`` in ``context`` is a title with unknown group.
    """
    if isinstance(citations, ParsedAnswer):
        citations = citations.citations
    if isinstance(context, (str, bytes)):
        raise TypeError("context must be a sequence of ContextDocument (or titles), not a string")
    documents: list[ContextDocument] = []
    for position, doc in enumerate(context):
        if isinstance(doc, str):
            doc = ContextDocument(doc)
        elif not isinstance(doc, ContextDocument):
            raise TypeError(
                f"context must hold ContextDocument objects or title strings; position {position} "
                f"holds {type(doc).__name__}"
            )
        documents.append(doc)
    by_title: dict[str, int] = {}
    for position, doc in enumerate(documents):
        by_title.setdefault(normalize_title(doc.title), position)
    grounded = []
    for citation in citations:
        if not isinstance(citation, Citation):
            raise TypeError(
                f"citations must hold Citation objects (from parse_citations), got {citation!r:.80}"
            )
        position = by_title.get(normalize_title(citation.title))
        if position is None:
            grounded.append(GroundedCitation(citation, valid=False, names_person=False))
            continue
        doc = documents[position]
        grounded.append(
            GroundedCitation(
                citation,
                valid=True,
                names_person=_names_person(citation.person, doc.person),
                group=doc.group,
                position=position,
            )
        )
    return grounded


def cited_groups(grounded: Iterable[GroundedCitation]) -> list[Hashable | None]:
    """The group of every valid citation, in answer order: the input of ``generation_parity``.

    Each valid citation counts (no deduplication); invalid citations are left out.
    """
    return [item.group for item in grounded if item.valid]


_TOKEN = re.compile(r"\w+")


@lru_cache(maxsize=4096)
def _person_tokens(name: str) -> tuple[str, ...]:
    folded = name.casefold()
    if not folded.isascii():
        decomposed = unicodedata.normalize("NFKD", folded)
        folded = "".join(c for c in decomposed if not unicodedata.combining(c))
    return tuple(_TOKEN.findall(folded))


def _names_person(cited: str, person: str) -> bool:
    a, b = _person_tokens(cited), _person_tokens(person)
    if not a or not b:
        return False
    if a == b or sorted(a) == sorted(b):
        return True
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    n = len(short)
    return any(long[i : i + n] == short for i in range(len(long) - n + 1))

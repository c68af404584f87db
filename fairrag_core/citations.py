"""Parse the citation bullets of a generated answer and ground them in the retrieved context.

docs/SPEC.md, "Citations": the answer format is one bullet per person,
``<Person Name> (DocTitle: <exact Title from context>)``. Typical use::

    parsed = parse_citations(answer_text)
    grounded = ground_citations(parsed, [ContextDocument(title, group=...) for each retrieved doc])
    utility = groundedness(grounded, parsed.bullet_count)
    gdp = generation_parity(cited_groups(grounded), "female")
    grounded_gdp = grounded_generation_parity(grounded, "female")

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
- **Naming the person**: see :func:`names_person`.

The parser never evaluates text; it uses anchored or literal-prefixed regular expressions with
bounded repetitions (no two unbounded repetitions next to each other, so no backtracking blow-up)
and one linear scan per line, so its running time is linear in the length of the answer; the name
rule reads at most 300 characters of a name. ``benchmarks/bench_citations.py`` measures both on
1 MB adversarial answers.
"""

from __future__ import annotations

import operator
import re
import unicodedata
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from typing import NamedTuple

__all__ = [
    "Citation",
    "ContextDocument",
    "GroundedCitation",
    "ParsedAnswer",
    "UnparsedLine",
    "cited_groups",
    "context_documents",
    "document_aliases",
    "ground_citations",
    "names_person",
    "normalize_title",
    "parse_citations",
    "person_names",
    "renumber_citations",
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
_CITE = re.compile(
    r"([(\[（]) ?[*_`]{0,2} ?(?:doc[ _.-]? ?)?title ?[*_`]{0,2} ?[:：]", re.IGNORECASE
)
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
    ``**bold**``/``__bold__``/``*italic*``/``_italic_``/backticks around the name, the title,
    the ``DocTitle:`` label, the whole citation (``(*DocTitle: X*)``, ``(_DocTitle: X_)``,
    ``(*DocTitle*: X)``) or the whole line, any spacing, ``DocTitle:``/``Doc Title:``/
    ``Doc. Title:``/``doc_title:``/``Title:`` in any case inside ``(...)``,
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
        if not raw or raw.isspace():
            continue
        line = " ".join(raw.split())
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
    if line.isalnum() or line.isspace():  # a plain word: prose (the common short line, fast)
        return None, False
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
    """Strip spaces, emphasis and code markers (``*``, ``_``, backtick) and one pair of wrapping
    quotes."""
    text = text.strip().strip("*_`").strip()
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
_INITIAL = re.compile(r"[A-Z]\.")


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
    """The document text; never makes a citation valid. The name rule reads the names its
    opening gives the person (:func:`document_aliases`)."""
    number: int | None = None
    """The entry number the LLM saw it under (``[n]`` in the context); ``None``: its 1-based
    position in the context."""
    also_numbered: tuple[int, ...] = ()
    """Other entry numbers the LLM saw it under: an agent's second search that showed it again,
    numbering its own results from ``[1]`` (docs/SPEC.md, "Attribution": a number several
    shown documents carry)."""

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
        if not isinstance(self.text, str):
            raise TypeError(f"text must be a str, got {type(self.text).__name__}")
        if self.number is not None and not isinstance(self.number, int):
            try:  # a numpy int is the int it holds
                object.__setattr__(self, "number", operator.index(self.number))
            except TypeError:
                pass
        if self.number is not None and (
            isinstance(self.number, bool) or not isinstance(self.number, int) or self.number < 1
        ):
            raise ValueError(f"number must be an int >= 1 or None, got {self.number!r}")
        if isinstance(self.also_numbered, (str, bytes)) or not isinstance(
            self.also_numbered, Iterable
        ):
            raise TypeError(
                "also_numbered must be a sequence of ints >= 1, "
                f"got {type(self.also_numbered).__name__}"
            )
        numbers = []
        for value in self.also_numbered:
            if not isinstance(value, (bool, int)):
                try:  # a numpy int is the int it holds
                    value = operator.index(value)
                except TypeError:
                    pass
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"also_numbered must hold ints >= 1, got {value!r}")
            numbers.append(value)
        object.__setattr__(self, "also_numbered", tuple(numbers))


@dataclass(frozen=True)
class GroundedCitation:
    """A citation checked against the context.

    ``names_person`` is :func:`names_person` of the cited name and the matched document's
    person (docs/SPEC.md, "Citations"): middle names, initials, titles, suffixes, accents and
    case may differ; another given name or surname, a bare name, or a name holding several
    people (``"Alan Turing and Marie Curie"``) does not name the person. Our choice: the paper
    does not define "naming the person".
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
    documents = context_documents(context)
    by_title: dict[str, int] = {}
    for position, doc in enumerate(documents):
        by_title.setdefault(normalize_title(doc.title), position)
    people: dict[int, tuple[str, tuple[_Name, ...]]] = {}  # per cited document, computed once
    grounded = []
    for citation in citations:
        if not isinstance(citation, Citation):
            raise TypeError(
                f"citations must hold Citation objects (from parse_citations), got {citation!r:.80}"
            )
        matched = by_title.get(normalize_title(citation.title))
        if matched is None:
            grounded.append(GroundedCitation(citation, valid=False, names_person=False))
            continue
        doc = documents[matched]
        grounded.append(
            GroundedCitation(
                citation,
                valid=True,
                names_person=person_names(citation.person, doc, people, matched),
                group=doc.group,
                position=matched,
            )
        )
    return grounded


def context_documents(context: Sequence[ContextDocument | str]) -> list[ContextDocument]:
    """``context`` as :class:`ContextDocument` objects (a plain ``str`` is a title with unknown
    group); a ``TypeError`` naming the position of anything else."""
    if isinstance(context, (str, bytes)):
        raise TypeError("context must be a sequence of ContextDocument (or titles), not a string")
    if isinstance(context, Mapping) or not isinstance(context, Iterable):
        why = " (a mapping's keys would be titles without their groups)"
        raise TypeError(
            "context must be a sequence of ContextDocument (or titles), in the order shown; got "
            f"a {type(context).__name__}{why if isinstance(context, Mapping) else ''}"
        )
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
    return documents


def person_names(
    cited: str,
    document: ContextDocument,
    cache: dict[int, tuple[str, tuple[_Name, ...]]],
    key: int,
) -> bool:
    """:func:`names_person` of ``cited`` and ``document``'s person, its aliases included
    (:func:`document_aliases`); the document's names are parsed once per ``key`` in
    ``cache`` (one dict per answer)."""
    if key not in cache:
        person = document.title if document.person is None else document.person
        names = _document_people(person)
        for alias in document_aliases(document):  # a one-word alias would take "Prince X"
            names += tuple(name for name in _document_people(alias) if len(name.core) > 1)
        cache[key] = (normalize_title(person), names)
    person_key, names = cache[key]
    return _names_person(cited, person_key, names)


_MAX_ALIAS_TEXT = 600
"""Characters of a document's text read for its person's other names (its opening sentence)."""
_OPENING_END = re.compile(r"[,;:]| (?:was|is|are|were|has|had|became|served) ")
_ALIAS_CUE = re.compile(
    r"(?:\bknown|\bcredited|\banglici[sz]ed|\bspelled|\bstyled|\bnicknamed|\bborn|\bnée|"
    r"\bnee|\bname[sd]?|\balias|\ba\.k\.a\.|\baka)\b(?: (?:as|by|professionally|his|her|"
    r"their|the|stage|pen|ring|birth|real|personal|name|names|simply|mononymously)){0,4} ",
    re.IGNORECASE,
)
_OWN_NAME = re.compile(r"\b(?:real|birth|original|full) name (?:was|is) ", re.IGNORECASE)
"""A later sentence stating the person's own name (the opening's cues are read in it only):
``His real name was Yokoi Tokiari``."""
_KNOWN_AS = re.compile(
    r"(?:he|she) (?:was|is) (?:also |better |commonly |popularly |widely )?known "
    r"(?:to (?:[^\s.]+ ){1,6}?)?as ",
    re.IGNORECASE,
)
"""The sentence right after the opening one, when it opens with a pronoun's name: ``He was known
to the Siamese of his time as Phra Phuttha Chao Luang`` (read only when the opening sentence
names nobody else: the pronoun is then the document's person)."""
_FULL_NAME = re.compile(r"\b[^\W\d_][\w'’.-]* +[^\W\d_]")
"""Two capitalised words in a row (checked for capitals after the match): another full name."""
_MONTHS = frozenset(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec in on at c circa".split()
)


def document_aliases(document: ContextDocument) -> tuple[str, ...]:
    """Other names the document's own text gives its person (docs/SPEC.md, "Citations").

    Read from the opening sentence of ``document.text`` (a leading ``Title:`` line skipped; at
    most 600 characters): its *opening name*, the words before the first ``,``, ``;``, ``:``
    or verb (``was``, ``is``, ``are``, ``were``, ``has``, ``had``, ``became``, ``served``), a
    parenthesis holding a digit, ``;`` or ``,`` (dates, pronunciations) ending it too
    (``Richard Starkey (born 7 July 1940), known as Ringo Starr`` gives ``Richard Starkey``);
    and every name after a cue in that sentence: ``known as``, ``better known as``, ``known
    professionally as``, ``born``, ``née``, ``nicknamed``, ``anglicised as``, ``also spelled``,
    ``stage name``, ``real name``... (``Ringo Starr``), and the translation in brackets right
    after such a name (``"Machine Gun Molly" (in French: Monica la Mitraille)``); and in any
    sentence of those 600
    characters, the name stated as the person's own (``His real name was Yokoi Tokiari.``:
    ``real``, ``birth``, ``original`` or ``full name`` then ``was`` or ``is``); and, in the
    sentence right after the opening one when that one names nobody else (no two capitalised
    words in a row after its opening name), ``He was known to the Siamese of his time as Phra
    Phuttha Chao Luang``: ``He`` or ``She``, ``was`` or ``is``, ``known`` [``to`` up to 6
    words] ``as``. A name counts
    when it starts with a capital letter and has 2 to 12 words (a one-word alias such as
    ``Prince`` would make any ``Prince X`` name the person). Only these names: another person
    the text mentions (``the wife of Crown Prince Haakon``) never becomes the document's
    person.
    """
    text = document.text[: _MAX_ALIAS_TEXT + 200].lstrip()
    if text.startswith("Title:"):
        newline = text.find("\n")
        text = "" if newline < 0 else text[newline + 1 :]
    text = " ".join(text[:_MAX_ALIAS_TEXT].split())
    if not text:
        return ()
    found: list[str] = []
    opening = _opening_name(text)
    if opening:
        found.append(opening)
    sentence_end = text.find(". ", len(opening or ""))
    sentence = text if sentence_end < 0 else text[:sentence_end]
    stated = [sentence[cue.end() :] for cue in _ALIAS_CUE.finditer(sentence)]
    for cue in _OWN_NAME.finditer(text):  # up to that sentence's end
        stated.append(text[cue.end() :].split(". ", 1)[0].removesuffix("."))
    if sentence_end >= 0 and not _names_another(sentence[len(opening or "") :]):
        known = _KNOWN_AS.match(text, sentence_end + 2)
        if known:
            stated.append(text[known.end() :].split(". ", 1)[0].removesuffix("."))
    for after in stated:
        name = _alias_after(after)
        if name and name not in found:
            found.append(name)
        translated = _translated(after, name) if name else None
        if translated and translated not in found:
            found.append(translated)
    return tuple(name for name in found if 2 <= len(name.split()) <= 12)


_TRANSLATION = re.compile(r"[\s\"'“”‘’«»]*\((?:in )?([A-Z][^\W\d_]+): ")
"""A stated name's translation in brackets right after it: ``(in French: `` or ``(French: ``
(a capitalised word: a language; not one of :data:`_NOT_LANGUAGES`)."""
_NOT_LANGUAGES = frozenset(
    "spouse husband wife partner father mother son daughter brother sister child children "
    "parents born died nee née birth real full original also formerly later title rank".split()
)
"""Capitalised words before a colon in brackets that say who or what follows, not a language
(``(Husband: Edward Hart)`` names another person: a review)."""


def _translated(after: str, name: str) -> str | None:
    """The name a stated name's bracketed translation gives, right after it (``better known as
    "Machine Gun Molly" (in French: Monica la Mitraille)`` gives ``Monica la Mitraille``;
    docs/SPEC.md "Citations": a name stated in another language is a name stated)."""
    last = name.rsplit(" ", 1)[-1]
    at = after.find(last, 0, 300)
    match = _TRANSLATION.match(after, at + len(last)) if at >= 0 else None
    if match is None or match.group(1).lower() in _NOT_LANGUAGES:
        return None
    closing = after.find(")", match.end(), match.end() + 300)
    return _alias_after(after[match.end() : closing]) if closing >= 0 else None


def _names_another(text: str) -> bool:
    """Whether ``text`` (the opening sentence after its opening name) holds two capitalised
    words in a row, another person's full name perhaps (``he married the actress Jane Doe``):
    then a pronoun in the next sentence may be that person, not the document's."""
    for match in _FULL_NAME.finditer(text):
        first, second = match.group(0)[0], match.group(0)[-1]
        if first.isupper() and second.isupper():
            return True
    return False


def _opening_name(text: str) -> str | None:
    end = len(text)
    match = _OPENING_END.search(text, 0, 400)
    if match:
        end = match.start()
    opening = text.find("(", 0, end)
    while opening != -1:
        closing = text.find(")", opening, end)
        inside = text[opening + 1 : closing] if closing != -1 else ""
        if closing == -1 or not _WORD.search(inside) or any(c in inside for c in ";,0123456789"):
            end = opening
            break
        opening = text.find("(", closing, end)
    name = text[:end].strip(" -–—")
    if not name or not name[0].isupper():
        return None
    return name


def _alias_after(text: str) -> str | None:
    """The name that follows an alias cue: capitalised words (name particles and initials
    inside), up to 12, in quotes or not."""
    words: list[str] = []
    for raw in text[:300].split():
        word = raw.strip("\"'“”‘’«»()")
        stop = raw.rstrip("\"'“”‘’»)").endswith((",", ";", ":", ".")) and not _INITIAL.fullmatch(
            word
        )
        word = word.rstrip(",;:")
        if not words and (not word[:1].isupper() or _fold(word.strip(".")) in _MONTHS):
            return None
        if word[:1].isupper() or (words and _fold(word) in _PARTICLES):
            if any(c.isdigit() for c in word):
                break
            words.append(word)
        else:
            break
        if stop or len(words) >= 12:
            break
    while words and _fold(words[-1]) in _PARTICLES:
        words.pop()
    return " ".join(words) or None


def cited_groups(grounded: Iterable[GroundedCitation]) -> list[Hashable | None]:
    """The group of every valid citation, in answer order: the input of ``generation_parity``.

    Each valid citation counts (no deduplication); invalid citations are left out.
    """
    return [item.group for item in grounded if item.valid]


# --- naming the person (docs/SPEC.md, "Citations") ---------------------------------------------

_MAX_NAME = 300
"""A cited name longer than this (in characters) names no one: no real name is that long, and the
bound keeps the name rule's work per citation constant."""
_PARTICLES = frozenset(
    "al ap bin ben bint da das de del della den der des di do dos du e el i ibn la le lo of "
    "san st te ten ter the van vander von vom y zu".split()
)
"""Lower-case words that belong to names (``van``, ``de``, ``of``): they do not make a part of a
cited name look like a description."""
_HONORIFICS = frozenset(
    "sir dame dr doctor prof professor lord lady mr mrs ms mx miss madame mme mlle monsieur "
    "rev reverend revd fr father hon honourable honorable rt right general gen admiral adm "
    "colonel col captain capt major maj lieutenant lt commander cdr sergeant sgt president "
    "senator sen judge justice king queen prince princess emperor empress pope rabbi imam "
    "sheikh shaikh sultan baron baroness count countess duke duchess earl marquess marquis "
    "viscount viscountess chief sister brother mother blessed venerable the air vice marshal "
    "rear field very most excellency his her saint ratu wing squadron flight".split()
)
"""Titles before a name (``Sir``, ``Dame``, ``Dr.``, ``Lord``...), dropped from its front."""
_TRAILING_TITLES = frozenset(("prof", "dr"))
"""Titles written after a name (``Paul Pîrşan Prof. Dr.``)."""
_GENERATIONAL = frozenset("jr jnr junior sr snr senior".split())
_ROMAN = re.compile(r"[IVX]{1,5}")
_POSTNOMINALS = frozenset(
    "phd dphil md esq obe mbe cbe kbe dbe gbe kcb kcmg gcb frs frse fba frcp qc kc kg om ac "
    "ao mp".split()
)
# These two run on whitespace-collapsed text: a pattern such as r"\s+or\s+" would rescan a long
# whitespace run from every position in it (quadratic time on hostile text).
_CONJUNCTION = re.compile(r" (?:and|with) | ?[&/+;|＆] ?", re.IGNORECASE)
_ALTERNATIVE = re.compile(r" or ", re.IGNORECASE)
_CONJUNCTION_SYMBOLS = frozenset("&/+;|＆")
"""What joins two people in one cited name: ``A and B``, ``A & B``, ``A / B``, ``A + B``,
``A; B``, ``A | B``, ``A with B`` (a comma is handled apart, see ``_name_parts``). ``A or B``
gives two names of one person (``Edmund I or Eadmund I``)."""
_DESIGNATIONS = frozenset(("of", "the", "nee", "geb"))
"""Words after which a name continues with a place, an epithet or a birth name (``Penda of
Mercia``, ``Herod the Great``, ``née Valve``): what follows is a designation, not the name."""
_JOINING_PARTICLES = frozenset(("y", "i", "e"))
"""Words that join two surnames (``Ortega y Gasset``, ``Oller i Moragas``)."""
_SKIPPED_GIVEN_NAMES = 3
_PATRONYMICS = frozenset(("ibn", "bin", "bint", "bar", "ben", "ap"))
_MAX_BRACKETED_NICKNAME = 3
_APOSTROPHES = re.compile(r"['’ʼ`´]")
_TOKEN = re.compile(r"\w+")
_OPENERS = {"(": ")", "[": "]", "（": "）", "{": "}"}
_QUOTES = {'"': '"', "“": "”", "„": "“", "«": "»", "”": "”"}
_BRACKET_OR_QUOTE = re.compile("[" + re.escape("".join((*_OPENERS, *_QUOTES))) + "]")


class _Name(NamedTuple):
    """One person's name as the rule compares it (all tokens case-folded, accents removed); a
    named tuple, built faster than a frozen dataclass (a name is parsed per distinct name)."""

    tokens: tuple[str, ...]
    """Every word token, titles and suffixes included."""
    core: tuple[str, ...]
    """Given names, middle names and surname: titles, post-nominals and suffix removed."""
    suffix: str | None
    """A generational suffix (``jr``, ``sr``, ``iii``...), which tells father from son."""
    nicknames: tuple[str, ...]
    """Tokens of double-quoted nicknames (``Marcel "Marco" van Basten``)."""
    surnames: frozenset[str]
    """The tokens of the last word of ``core``: ``{"sklodowska", "curie"}`` for a hyphenated
    ``Skłodowska-Curie``."""
    designation: tuple[str, ...]
    """What follows ``of`` (``Penda of Mercia``, ``Francis I of France``): not part of ``core``."""
    particles: frozenset[str] = frozenset()
    """Tokens of ``core`` written in lower case that are surname particles (``van`` in
    ``Vincent van Gogh``; not ``Van`` in ``Nguyen Van Linh``, a middle name)."""


_UNDECOMPOSED = str.maketrans(
    {"ø": "o", "æ": "ae", "œ": "oe", "ł": "l", "ð": "d", "þ": "th", "đ": "d", "ı": "i", "ħ": "h"}
)
"""Latin letters with a stroke or a ligature, which no Unicode decomposition takes apart, as
their usual ASCII spelling (``Bjørn Dæhlie`` is ``Bjorn Daehlie``, ``Małysz`` ``Malysz``)."""


def _fold(token: str) -> str:
    """``token`` case-folded, accents removed, letters with a stroke or ligature spelled in ASCII
    (docs/SPEC.md, "Citations": naming the person)."""
    folded = token.casefold()
    if not folded.isascii():
        decomposed = unicodedata.normalize("NFKD", folded)  # ǿ is ø and an accent: then o
        folded = "".join(c for c in decomposed if not unicodedata.combining(c))
        folded = folded.translate(_UNDECOMPOSED)
    return folded


def _split_brackets_and_quotes(text: str) -> tuple[str, str, str]:
    """``(text outside brackets and quotes, inside double quotes, inside brackets)``, in one
    pass (nested brackets are matched; an unclosed one takes the rest of the text)."""
    if not _BRACKET_OR_QUOTE.search(text):
        return text, "", ""  # nothing to split (the common name, read without a Python loop)
    outside: list[str] = []
    quoted: list[str] = []
    bracketed: list[str] = []
    closers: list[str] = []
    quote_end = None
    for char in text:
        if quote_end is not None:
            if char == quote_end:
                quote_end = None
                outside.append(" ")
            else:
                quoted.append(char)
        elif char in _OPENERS:
            closers.append(_OPENERS[char])
            bracketed.append(" ")
        elif closers:
            if char == closers[-1]:
                closers.pop()
                if not closers:
                    outside.append(" ")
            else:
                bracketed.append(char)
        elif char in _QUOTES:
            quote_end = _QUOTES[char]
            quoted.append(" ")
        else:
            outside.append(char)
    return "".join(outside), "".join(quoted), "".join(bracketed)


def _looks_like_a_name(words: list[str], caseless: bool) -> bool:
    """Every word capitalised (or a particle), no digit: not a description such as "physicist"."""
    if not words:
        return False
    for word in words:
        if not word.isalpha() and any(map(str.isdigit, word)):  # no letter is a digit
            return False
        letter = word[0] if word[:1].isalpha() else next(filter(str.isalpha, word), None)
        if letter is None:
            continue
        if not caseless and letter.islower() and _fold(word.strip(".")) not in _PARTICLES:
            return False
    return True


def _is_suffix(words: list[str]) -> bool:
    """A comma part holding only a generational suffix or post-nominals (``Jr.``, ``KBE``)."""
    tokens = _TOKEN.findall(" ".join(words))
    return all(
        _fold(t) in _GENERATIONAL
        or _fold(t) in _POSTNOMINALS
        or (t.isupper() and len(t) > 1)
        or _ROMAN.fullmatch(t)
        for t in tokens
    )


def _is_initials(words: list[str]) -> bool:
    """A comma part that is given-name initials in capitals (``LTJ``, ``VVS``, ``MF``): one word
    of 2 to 4 letters, not a known post-nominal, generational suffix or Roman numeral."""
    if len(words) != 1:
        return False
    word = words[0].replace(".", "")
    return (
        2 <= len(word) <= 4
        and word.isalpha()
        and word.isupper()
        and _fold(word) not in _POSTNOMINALS
        and _fold(word) not in _GENERATIONAL
        and not _ROMAN.fullmatch(word)
    )


def _is_style(words: list[str]) -> bool:
    """A comma part that is a suffix, post-nominals or a style (``Jr.``, ``KBE``, ``3rd Baron
    Byron``, ``Duke of Sussex``), not another person."""
    tokens = [_fold(t) for t in _TOKEN.findall(" ".join(words))]
    if not tokens or _is_suffix(words):
        return True
    return tokens[0] in _HONORIFICS or any(c.isdigit() for c in tokens[0])


def _name_parts(text: str, caseless: bool) -> list[str]:
    """The people named by one conjunction-free part: ``[]`` when it names no one (a
    description), one string for one person, several strings for ``A, B``."""
    suffixes: list[str] = []
    names: list[list[str]] = []
    for index, segment in enumerate(text.split(",")):
        words = segment.split()
        if not words:
            continue
        if index == 1 and len(names) == 1 and len(names[0]) == 1 and _is_initials(words):
            names.append(words)  # "Bukem, LTJ", "Laxman, VVS": given-name initials, inverted
        elif index > 0 and _is_style(words):
            if _is_suffix(words):
                suffixes.extend(words)
        elif _looks_like_a_name(words, caseless):
            names.append(words)
        elif index == 0:
            return []
    if len(names) == 2:
        surname_words = [w for w in names[0] if _fold(w.strip(".")) not in _PARTICLES]
        # "Curie, Marie", "van Gogh, Vincent" and "Lo, Khun" (a surname that is a particle
        # word): one person
        if len(surname_words) == 1 or len(names[0]) == 1:
            names = [names[1] + names[0]]
    if len(names) > 1 and all(len(words) == 1 for words in names[1:]):
        names = names[:1]  # "Marie Curie, Physicist": one-word parts after a name describe it
    return [" ".join(words + suffixes) for words in names]


def _make_name(text: str, nicknames: tuple[str, ...], caseless: bool) -> _Name | None:
    originals: list[str] = _APOSTROPHES.sub("", text).split()
    word_of: list[int] = list(range(len(originals)))
    if not "".join(originals).isalnum():  # else each word is one token (``\w`` holds them)
        words, originals, word_of = originals, [], []
        for number, word in enumerate(words):
            found = [word] if word.isalnum() else _TOKEN.findall(word)
            originals += found
            word_of += [number] * len(found)
    if not originals:
        return None
    joined = " ".join(originals)
    # ASCII tokens fold alike whole or one by one (no token holds a space)
    tokens = tuple(joined.lower().split() if joined.isascii() else map(_fold, originals))
    has_lower = caseless or any(map(str.islower, text))
    start, end = 0, len(tokens)
    designation: tuple[str, ...] = ()
    lead = 0  # titles first: "Rear Admiral The Honourable X" is X, not "the" + a designation
    while lead < len(tokens) - 1 and tokens[lead] in _HONORIFICS:
        lead += 1
    cut = (
        None
        if _DESIGNATIONS.isdisjoint(tokens[lead + 1 :])
        else next(i for i in range(lead + 1, len(tokens)) if tokens[i] in _DESIGNATIONS)
    )
    if cut is not None:  # "Penda of Mercia", "Herod the Great", "Rauni-Leena Kilde née Valve"
        end, designation = cut, tokens[cut + 1 :]
    while end - start > 1 and (
        tokens[end - 1] in _POSTNOMINALS
        or tokens[end - 1] in _TRAILING_TITLES
        or (
            has_lower
            and len(originals[end - 1]) > 1
            and originals[end - 1].isupper()
            and not _ROMAN.fullmatch(originals[end - 1])
        )
    ):
        end -= 1
    suffix = None
    last = originals[end - 1]
    if end - start > 1 and (
        tokens[end - 1] in _GENERATIONAL or (last.isupper() and _ROMAN.fullmatch(last))
    ):
        suffix = tokens[end - 1]
        end -= 1
    while end - start > 1 and tokens[start] in _HONORIFICS:
        start += 1
    last_word = word_of[end - 1]
    parts = [tokens[i] for i in range(start, end) if word_of[i] == last_word]
    surnames = frozenset((*parts, "".join(parts)))  # "Haile-Mariam" is also "Hailemariam"
    particles = frozenset(
        tokens[i]
        for i in range(start, end)
        if tokens[i] in _SURNAME_PARTICLES and originals[i].islower()
    )
    return _Name(tokens, tokens[start:end], suffix, nicknames, surnames, designation, particles)


def _parse_people(text: str) -> tuple[_Name, ...]:
    """Every person a (cited or document) name holds: none, one, or several (``A and B``)."""
    if len(text) > _MAX_NAME:  # a document's person may be long; no real name is (nor cached)
        return ()
    return _parse_short_name(text)


@lru_cache(maxsize=4096)
def _parse_short_name(text: str) -> tuple[_Name, ...]:
    outside, quoted, bracketed = _split_brackets_and_quotes(text)
    outside = " ".join(outside.split())
    caseless = not any(map(str.isupper, outside))
    if len(bracketed.split()) <= _MAX_BRACKETED_NICKNAME:  # "Jean Leonardus (Jan) Dietz"
        quoted += " " + bracketed
    nicknames = (
        tuple(_fold(t) for t in _TOKEN.findall(_APOSTROPHES.sub("", quoted)))
        if quoted and not quoted.isspace()
        else ()
    )
    people: list[_Name] = []
    parts = [p for p in _split_people(outside) if p.strip()]
    for part in parts:
        for words in _name_parts(part, caseless):
            name = _make_name(words, nicknames, caseless)
            if name is not None:
                people.append(name)
    if not people and parts:  # no part looks like a name (e.g. all lower case): keep them all
        people = [n for p in parts if (n := _make_name(p, nicknames, True)) is not None]
    return tuple(people)


def _split_people(text: str) -> list[str]:
    """``text`` split at :data:`_CONJUNCTION`; a text holding none of its symbols nor, in any
    case, `` and `` or `` with `` (a dotless or dotted I read as ``i``) is not searched."""
    if _CONJUNCTION_SYMBOLS.isdisjoint(text):
        lower = text.lower().replace("\u0131", "i").replace("\u0307", "")
        if " and " not in lower and " with " not in lower:
            return [text]
    return _CONJUNCTION.split(text)


_FULL_FORMS: dict[str, frozenset[str]] = {}
for _full, _shorts in {
    "albert": "al bert bertie",
    "alexander": "alex sandy sasha",
    "andrew": "andy drew",
    "anthony": "tony",
    "catherine": "kate cathy katie kathy",
    "christopher": "chris kit",
    "daniel": "dan danny",
    "david": "dave davy",
    "edward": "ed eddie ted teddy ned",
    "elizabeth": "liz beth betty bess lizzie eliza",
    "francis": "frank",
    "frederick": "fred freddie",
    "henry": "harry hank",
    "herbert": "bert herb",
    "james": "jim jimmy jamie",
    "john": "jack johnny",
    "joseph": "joe joey",
    "katherine": "kate kathy katie",
    "lawrence": "larry",
    "margaret": "maggie peggy meg",
    "michael": "mike mick mickey",
    "nicholas": "nick",
    "patrick": "pat paddy",
    "peter": "pete",
    "richard": "dick rick ricky rich",
    "robert": "bob bobby rob robbie bert",
    "samuel": "sam sammy",
    "stephen": "steve",
    "steven": "steve",
    "susan": "sue susie",
    "thomas": "tom tommy",
    "william": "bill billy will willie",
    "terence": "terry",
    "gerald": "gerry jerry",
    "jeremiah": "jerry",
    "jessica": "jessie jess",
    "leonard": "leo len lenny",
    "eleanor": "nell ellie",
    "helen": "nell",
    "mary": "molly polly mae",
    "charles": "charley charlie chuck",
    "terrence": "terry",
    "sydney": "sid",
    "eugene": "gene",
    "ernest": "ernie",
    "patricia": "patty pat trish",
    "jacob": "jake",
    "isaac": "ike",
    "rebecca": "becky",
    "abigail": "abby",
    "jennifer": "jenny jen",
    "jonathan": "jon jonny jonnie",
    "ronald": "ron ronnie",
    "deborah": "deb debby debbie",
    "laurence": "larry laurie",
    "jerome": "jerry",
    "johann": "hans",
    "johannes": "hans",
    "leslie": "les",
}.items():
    for _short in _shorts.split():
        _FULL_FORMS[_short] = _FULL_FORMS.get(_short, frozenset()) | {_full}
"""Common English short forms of given names (``Bob`` for ``Robert``); a short form is also
accepted when it starts the full name and has at least 3 letters (``Chris``, ``Fred``), after
removing a diminutive ending ``-y``, ``-ie``, ``-i``, ``-e`` (``Marty``, ``Laurie``, ``Judy``)."""
_DIMINUTIVE = re.compile(r"(?:ie|y|i|e)$")
_ENDINGS = frozenset("ne na ette etta ine ina elle ella le la lla ia et ie".split())
"""What turns a given name into its counterpart (``Louis`` / ``Louise``, ``Daniel`` /
``Daniela``, ``Joseph`` / ``Josephine``): such names do not agree."""


def _compatible(a: str, b: str) -> bool:
    """Two given or middle names agree: equal, one is the other's initial, or a short form of
    the other (never a feminine or masculine counterpart: ``Paul`` / ``Paula``)."""
    if a == b:
        return True
    short, full = (a, b) if len(a) <= len(b) else (b, a)
    if len(short) == 1:
        return full.startswith(short)
    if full in _FULL_FORMS.get(short, ()):
        return True
    stem = _DIMINUTIVE.sub("", short) if len(short) > 3 else short
    rest = full[len(stem) :]
    return len(stem) >= 3 and full.startswith(stem) and len(rest) > 1 and rest not in _ENDINGS


def _forenames_agree(short: tuple[str, ...], long: tuple[str, ...]) -> bool:
    """The shorter list's names appear, in order, among the longer list's, each equal, as an
    initial or as a short form. Extra middle names are allowed, and at most one given name
    before the first match: the one a person does not go by (``Thomas Woodrow Wilson`` /
    ``Woodrow Wilson``)."""
    if not short or not long:
        return False
    position = 0
    for index, name in enumerate(short):
        while position < len(long) and not _compatible(name, long[position]):
            position += 1
            if index == 0 and position > _SKIPPED_GIVEN_NAMES and name not in _PARTICLES:
                return False
        if position == len(long):
            return False
        position += 1
    return True


def _given_variants(forenames: tuple[str, ...], name: _Name) -> list[tuple[str, ...]]:
    variants = [forenames]
    for nickname in name.nicknames:
        variants.append((nickname, *forenames[1:]))
        variants.append((nickname, *forenames))
    return variants


def _surname_positions(name: _Name, other: _Name) -> list[int]:
    """Where ``name``'s surname is in ``other.core``: its last word (or a part of a hyphenated
    last word, ``Skłodowska-Curie``); or the word before one extra surname, itself possibly
    after a particle (``Marcelo Ríos Mayorga``, ``Juan Montalvo y Fiallos``, ``Luchino Visconti
    di Modrone``); or the word before a patronymic (``Anas ibn Malik ibn Nadr``)."""
    surname, core = name.core[-1], other.core
    last = len(core) - 1
    if surname == core[last] or surname in other.surnames:
        return [last]
    found = []
    for position in range(1, last):
        if core[position] != surname:
            continue
        rest = core[position + 1 :]
        if len(rest) == 1 or (len(rest) == 2 and rest[0] in _PARTICLES) or rest[0] in _PATRONYMICS:
            found.append(position)
    return found


def _same_person(cited: _Name, person: _Name) -> bool:
    if cited.suffix and person.suffix and cited.suffix != person.suffix:
        return False
    if cited.designation and person.designation and cited.designation != person.designation:
        return False
    if cited.tokens == person.tokens or sorted(cited.core) == sorted(person.core):
        return True
    if len(person.core) == 1:  # a mononym ("Aristotle", "Madonna"): the cited given name
        known = person.core[0]
        return known in (cited.tokens[0], cited.core[0], cited.core[-1], *cited.nicknames)
    if len(cited.core) == 1 or _surname_alone(cited, person):
        return False  # a bare name is ambiguous: it merely shares a name
    # the person's lower-case particles and surname words are no given names the cited name
    # may agree on alone: "Van Gogh painted" (Van, then an extra surname) is the surname alone;
    # an article opening a name (Al-Biruni) is the name a person is known by; a name that is
    # one hyphenated word (Charles-Joseph, Prince of Ligne) has no surname apart from it
    reserved = (person.particles | person.surnames) - _ARTICLES
    if set(person.core) <= person.surnames:
        reserved = frozenset()
    for shorter, longer in ((cited, person), (person, cited)):
        for position in _surname_positions(shorter, longer):
            for a in _given_variants(shorter.core[:-1], shorter):
                for b in _given_variants(longer.core[:position], longer):
                    if set(a if shorter is cited else b) <= reserved:
                        continue
                    if _forenames_agree(a, b) or _forenames_agree(b, a):
                        return True
    return False


_SURNAME_PARTICLES = frozenset(
    "van vander von vom zu zum zur de du des del della delle degli dei di da dal dalla le la lo "
    "los las den der ten ter te dos das do".split()
)
"""Particles that open a surname (``van Gogh``, ``de Bruijn``). Not the patronymics ``ibn``,
``bin``, ``bar`` nor the article ``al``: ``Ibn Abbas`` and ``Al-Biruni`` are the names people
are known by."""
_ARTICLES = frozenset("al el ad an ar as at az ash ibn bin ben bar bint abu".split())
"""First parts of a hyphenated name that make it the name a person is known by (``Al-Biruni``,
``Ibn-Rushd``), not a surname alone."""


def _surname_alone(cited: _Name, person: _Name) -> bool:
    """Whether ``cited`` is the person's surname alone, written in several tokens, as a
    one-word surname (``Curie``) is: the person's name without its given names (the last
    tokens of ``person``, which has more), that is surname particles the person's name writes
    in lower case and one word (``Van Gogh`` of ``Vincent van Gogh``, not ``Van Linh`` of
    ``Nguyen Van Linh``) or one hyphenated word (``Payne-Gaposchkin``, not ``Al-Biruni``).
    ``Chris Lo`` and ``Kamala Das`` are a given name and a surname (docs/SPEC.md,
    "Citations")."""
    size = len(cited.core)
    if len(person.core) <= size or person.core[-size:] != cited.core:
        return False
    if all(token in person.particles for token in cited.core[:-1]):
        return True  # particles, then the surname
    return set(cited.core) <= cited.surnames and cited.core[0] not in _ARTICLES


def names_person(cited: str, person: str) -> bool:
    """Whether the name written in a citation names the person a document is about.

    docs/SPEC.md, "Citations" (our rule; the paper does not define "naming the person"). Both
    names are compared on word tokens, case-folded and with accents removed (``"Emilie du
    Chatelet"`` names ``"Émilie du Châtelet"``), after removing: bracketed text and quoted
    nicknames (both kept as alternative given names, ``Marcel "Marco" van Basten``), titles
    before the name (``Sir``, ``Dame``, ``Dr.``, ``Lord``, ``Lieutenant General``...),
    post-nominals after it (``KBE``, ``PhD``, any all-capital abbreviation), a generational
    suffix (``Jr.``, ``Sr.``, ``III``), a designation after ``of``, ``the`` or ``née``
    (``Penda of Mercia``, ``Herod the Great``) and a style after a comma (``Christina, Queen of
    Sweden``); ``Curie, Marie`` reads as ``Marie Curie`` (``Lo, Khun`` and ``Bukem, LTJ`` too:
    2-4 capitals after the comma that are no known post-nominal are given-name initials). The
    cited name names the person when it holds exactly one person and:

    - both have the same words in any order (``Youyou Tu`` / ``Tu Youyou``); or
    - the document's person is one word (``Aristotle``, ``Madonna``) that starts or ends the
      cited name; or
    - the surnames agree (equal last words, a hyphenated surname holding the other
      ``Skłodowska-Curie`` / ``Curie``, or one extra surname or patronymic after it: ``Marcelo
      Ríos Mayorga`` / ``Marcelo Ríos``) and the given names agree: the shorter name's given
      and middle names appear, in order, among the longer's, each equal, an initial (``Henry
      A. Wallace`` / ``Henry Agard Wallace``) or a short form (``Chris`` / ``Christopher``,
      ``Bob`` / ``Robert``, ``Marty`` / ``Martin``; never a counterpart such as ``Paul`` /
      ``Paula``), with extra middle names allowed (``John Edward Masefield`` / ``John
      Masefield``) and at most 3 of the longer name's given names skipped before the first
      match (``Thomas Woodrow Wilson`` / ``Woodrow Wilson``).

    Several people (``A and B``, ``A & B``, ``A / B``, ``A + B``, ``A; B``, ``A with B``, or
    ``A, B`` with two capitalised names of two or more words) never name one; ``A or B`` gives
    two names of one person. Generational suffixes and designations, when both names have one,
    must be equal (``Jr.`` is not ``Sr.``). A bare given name or surname (``Curie``) names no
    one: it merely shares a name; so does a surname written in several tokens (``Van Gogh``,
    ``Payne-Gaposchkin``; :func:`_surname_alone`). A cited name longer than 300 characters
    names no one. A cited name equal to the person after :func:`normalize_title` always names
    them.
    Linear in the length of ``person``; at most 300 characters of ``cited`` are read.

    Known limits: a pseudonym or a transliteration (``Lev Bronstein`` / ``Leon Trotsky``,
    ``Ralegh`` / ``Raleigh``) does not name the person; two names written one after the other
    without a separator (``Alan Turing Marie Curie``) read as one name with middle names.
    """
    if not isinstance(cited, str) or not isinstance(person, str):
        raise TypeError(
            f"cited and person must be str, got {type(cited).__name__} and {type(person).__name__}"
        )
    return _names_person(cited, normalize_title(person), _document_people(person))


def _document_people(person: str) -> tuple[_Name, ...]:
    """Every name a document's person goes by (``A or B`` gives two)."""
    collapsed = " ".join(person.split())
    return tuple(d for name in _ALTERNATIVE.split(collapsed) for d in _parse_people(name))


def _cited_people(cited: str) -> tuple[tuple[_Name, ...], ...]:
    """The people of each alternative (``A or B``) of a cited name, in order, as
    :func:`_names_person` reads them."""
    return tuple(_parse_people(a) for a in _ALTERNATIVE.split(" ".join(cited.split())))


def _names_person(
    cited: str,
    person_key: str,
    documents: tuple[_Name, ...],
    cited_key: str | None = None,
    cited_people: tuple[tuple[_Name, ...], ...] | None = None,
) -> bool:
    """:func:`names_person` with the person's :func:`normalize_title` key and names computed
    once per document (grounding many citations against one long person stays linear), and
    ``cited``'s key and people (:func:`_cited_people`) when the caller computed them once for
    many documents."""
    if len(cited) > _MAX_NAME:
        return False
    if (normalize_title(cited) if cited_key is None else cited_key) == person_key:
        return True
    alternatives = (
        (_parse_people(a) for a in _ALTERNATIVE.split(" ".join(cited.split())))
        if cited_people is None
        else cited_people
    )
    for people in alternatives:
        if len(people) > 1:
            return False  # several people never name one
        if people and any(_same_person(people[0], document) for document in documents):
            return True
    return False


_ENTRY_CITATION = re.compile(
    r"(\[\^?(?:(?:doc(?:ument)?|source|context|ref(?:erence)?|entry|passage) ?#? ?)?)"
    r"(\d{1,3}(?: ?[,;–-] ?\^?\d{1,3}){0,20})\]",
    re.IGNORECASE,
)
"""A bracketed entry citation as :func:`fairrag_core.attribution.attribute_answer` reads it:
``[1]``, ``[1, 3]``, ``[1-3]``, ``[Source 2]``, ``[Doc #1]``, ``[^1]`` (numbers of at most
three digits, at most 21 of them)."""
_ENTRY_PART = re.compile(r"( ?[,;] ?)")
_ENTRY_RANGE = re.compile(r"(\^?)(\d{1,3})(?:( ?[–-] ?\^?)(\d{1,3}))?")


def renumber_citations(answer: str, numbers: Sequence[int]) -> str:
    """``answer`` with each entry number it cites read through ``numbers``: entry ``n``
    (1-based) becomes ``numbers[n - 1]``, in every bracketed form the attribution parser reads
    (``[1]``, ``[1, 3]``, ``[1-3]``, ``[Source 2]``, ``[Doc 1]``, ``[^1]``; the label is kept).
    A range whose entries become one number is written as that number, one whose entries
    become a run (in any order) as ``low-high``, any other as the list of its numbers; a
    number a bracket already cites is not written again; a number outside
    ``1..len(numbers)`` (and any range reaching outside) is left as written. Used when a
    framework split documents into chunks and the answer cites the chunks (docs/SPEC.md,
    "Records" → chunks). Pure; linear in the length of ``answer``: only numbers of at most
    three digits are converted."""
    count = len(numbers)

    def renumbered(part: str) -> list[int] | None:
        hit = _ENTRY_RANGE.fullmatch(part)
        if hit is None:
            return None
        low = int(hit.group(2))
        high = int(hit.group(4)) if hit.group(4) is not None else low
        if not 1 <= low <= high <= count:
            return None
        return list(dict.fromkeys(numbers[n - 1] for n in range(low, high + 1)))

    def written(part: str, cited: list[int]) -> str:
        hit = _ENTRY_RANGE.fullmatch(part)
        assert hit is not None
        caret = hit.group(1)
        if len(cited) == 1:
            return f"{caret}{cited[0]}"
        low, high = min(cited), max(cited)
        if hit.group(4) is not None and high - low + 1 == len(cited):
            return f"{caret}{low}{hit.group(3)}{high}"
        return ", ".join(f"{caret}{n}" for n in cited)

    def entry(match: re.Match[str]) -> str:
        pieces = _ENTRY_PART.split(match.group(2))
        out: list[str] = []
        seen: set[int] = set()
        for index in range(0, len(pieces), 2):
            part = pieces[index]
            cited = renumbered(part)
            if cited is None:
                text = part
            else:
                cited = [n for n in cited if n not in seen]
                if not cited:
                    continue
                seen.update(cited)
                text = written(part, cited)
            if out:
                out.append(pieces[index - 1])
            out.append(text)
        return f"{match.group(1)}{''.join(out)}]"

    return _ENTRY_CITATION.sub(entry, answer)

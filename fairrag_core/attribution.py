"""Attribution: the context documents an answer attributes its people to, in any citation style
(docs/SPEC.md, "Attribution"). Beyond the paper, whose cited sources (:mod:`.citations`) stay as
they are.

Real models and the frameworks' prompts cite in many styles; a small model often cites nothing
and only names people. :func:`attribute_answer` reads an answer line by line and gives each
*bullet* (a unit of the answer) the context documents it is attributed to:

- **explicit** citations, in any of these styles (:data:`STYLES`): ``doctitle`` (the paper's
  ``(DocTitle: X)`` and its variants, :func:`~fairrag_core.citations.parse_citations`'s
  grammar, several on a line allowed), ``numbered`` (context entry numbers: ``[1]``,
  ``[1][3]``, ``[1, 3]``, ``[1-3]``, ``[^1]``, ``[Doc 1]``, ``[Source 2]``, or a DocTitle that
  is a number), ``markdown_link`` (``[X](url)``: the link text, else the URL's last path
  segment, is a context title), ``bracketed_title`` (``[X]`` or ``(X)`` where X is a context
  title), ``source_label`` (``Source: X``, ``Sources: X; Y``, ``Reference: [2]``: titles or
  entry numbers after the label);
- **implicit** attribution: the context documents whose person the bullet names, by the name
  rule (:func:`~fairrag_core.citations.names_person`, the document's aliases included). For a
  bullet whose explicit citations resolve to no context document: first the names in the
  bullet's head (before its description), else those in the rest of the line; for a bullet with
  a resolved citation, the people its head names that no citation on it attributes
  (``Ida Mathis (Daron Joffe)``, both shown, attributes both).

A title resolves when it equals a context title after
:func:`~fairrag_core.citations.normalize_title`; a number ``n`` is the context entry shown as
``[n]`` (:attr:`ContextDocument.number <fairrag_core.citations.ContextDocument.number>`). Each
bullet counts a document once, however many times or styles it cites it; a document cited on two
bullets counts twice (the paper's rule for duplicates).

**Bullets** are the paper parser's (a line that starts with a bullet marker or holds a DocTitle
citation), plus any other line holding a resolved explicit citation, plus any *name line* (only
a name naming a context person, with at most a bracketed aside: ``Mstislav Rostropovich``,
``Max Steiner (1888-1971)``, the items a small model writes without a marker); an answer
without a marked or cited line (a paragraph answer, name lines or not) has as bullets all its
lines that name a context person. Every bullet counts in the attributed groundedness denominator.

Every scan is linear in the answer: at most :data:`MAX_LINE_SCAN` characters of a line are read,
by anchored or literal-prefixed patterns with bounded repetitions.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from .citations import (
    _CITE,
    _DESCRIPTION,
    ContextDocument,
    _strip_bullet,
    _unwrap,
    context_documents,
    normalize_title,
    parse_citations,
    person_names,
)

__all__ = [
    "EXPLICIT_STYLES",
    "MAX_LINE_SCAN",
    "STYLES",
    "AttributedAnswer",
    "AttributedBullet",
    "Attribution",
    "attribute_answer",
]

EXPLICIT_STYLES = ("doctitle", "numbered", "markdown_link", "bracketed_title", "source_label")
"""The citation styles read, in the order a bullet's styles are listed."""
STYLES = (*EXPLICIT_STYLES, "implicit")
"""Every way a bullet can be attributed; ``implicit``: named, not cited."""
MAX_LINE_SCAN = 2000
"""Characters of one line read for citations and names (no real bullet is longer)."""
_MAX_RUN_WORDS = 8


@dataclass(frozen=True)
class Attribution:
    """One context document a bullet is attributed to."""

    position: int
    """0-based position of the document in the context."""
    title: str
    group: Hashable | None
    style: str
    """How the bullet attributes it (one of :data:`STYLES`; the first style that did)."""
    names_person: bool
    """The bullet names the document's person (by the name rule, aliases included); always
    true for an implicit attribution."""


@dataclass(frozen=True)
class AttributedBullet:
    """One bullet of the answer and what it is attributed to."""

    line: str
    line_number: int
    person: str
    """The bullet's head: its text without citations, bullet marker and emphasis, up to its
    description (`` - ``, ``: ``...); the name the bullet gives."""
    styles: tuple[str, ...]
    """The explicit styles parsed on the line (resolved or not), plus ``implicit`` when used."""
    attributions: tuple[Attribution, ...]
    unresolved: tuple[str, ...]
    """Explicit citations that resolve to no context document (titles, numbers), as written."""

    @property
    def supported(self) -> bool:
        """Attributed to a document whose person the bullet names."""
        return any(a.names_person for a in self.attributions)


@dataclass(frozen=True)
class AttributedAnswer:
    """The result of :func:`attribute_answer`."""

    bullets: tuple[AttributedBullet, ...]

    @property
    def attributions(self) -> list[Attribution]:
        """Every attribution, in answer order (one per bullet and document)."""
        return [a for bullet in self.bullets for a in bullet.attributions]

    @property
    def styles(self) -> tuple[str, ...]:
        """The styles found in the answer, in :data:`STYLES` order."""
        found = {style for bullet in self.bullets for style in bullet.styles}
        return tuple(style for style in STYLES if style in found)

    @property
    def bullet_count(self) -> int:
        return len(self.bullets)

    @property
    def attributed_count(self) -> int:
        """Bullets attributed to at least one context document."""
        return sum(1 for bullet in self.bullets if bullet.attributions)


_NUMBERED = re.compile(
    r"\[\^?(?:(?:doc(?:ument)?|source|context|ref(?:erence)?|entry|passage) ?#? ?)?"
    r"(\d{1,3}(?: ?[,;–-] ?\^?\d{1,3}){0,20})\]",
    re.IGNORECASE,
)
_NUMBER_LIST = re.compile(r"\d{1,3}(?: ?[,;–-] ?\^?\d{1,3}){0,20}")
_LINK = re.compile(r"\[([^\[\]]{1,300})\]\(([^()\s]{1,500})\)")
_SQUARE_TEXT = re.compile(r"\[([^\[\]]{1,300})\](?!\()")
_ROUND_TEXT = re.compile(r"\(([^()]{1,300})\)")
_SOURCE = re.compile(
    r"(?<![\w])(?:sources?|references?|refs?|citations?|cited|cites?)[ ]?[:：]", re.IGNORECASE
)
_SOURCE_END = re.compile(r"[()\[\]]")
_BRACKET_LIST = re.compile(r" ?(?:\[[^\[\]]{1,300}\](?:,? (?:and )?|,)?){1,20}")
_EMPTY_BRACKETS = re.compile(r"[(\[（] ?[,;:.]? ?[)\]）]")
_PART = re.compile(r" ?[,;] ?| and ")
_RUN_BREAK = re.compile(r"[,;:()\[\]{}|/\"“”«»!?]| [-–—] |[–—]|(?<!\b[A-Z])\. (?=[A-Z])")
# a sentence's end breaks a run of names; an initial's full stop (``L. L. Zamenhof``) does not
_ASIDE = re.compile(r" ?[(\[][^()\[\]]{0,200}(?:[)\]]|$)")
_PARTICLES = frozenset(
    "à a ab af al ap bar bat bin ben bint da dal dalla das de degli dei del della delle den der "
    "des di do dos du e el ibn la las le lo los op ter ten te van von vom y z zu zum zur".split()
)
_NOT_JOINERS = frozenset("and or but the was is are has had who as at by for to on".split())
"""Short lower-case words that never sit inside a name (a run with ``in``, ``of``, ``non``,
``und``, ``wa`` inside is also tried: ``Isaac in Islam``, ``Ngũgĩ wa Thiong'o``)."""
_GLUED_PARTICLE = re.compile(r"[a-zà-ÿ]{1,3}['’ʼ‘-]")
"""A lower-case particle glued to a name by a hyphen or an apostrophe: ``al-``, ``el-``,
``d'``, ``bi-``."""
_POSSESSIVE = re.compile(r"['’ʼ]s?$")
_POSSESSIVE_WORD = re.compile(r"['’ʼ]s?(?=[ ,.;:!?]|$)")
"""A possessive ending a word (``Evans's``, ``Curies'``): a name ends there."""
_MARKER = re.compile(r"^(?:\d{1,3}[.)]|[-*+•])(?=\w)")
"""A list marker glued to the name (``1.Ada``, ``-Ada``)."""
_TAG = re.compile(r"</?[A-Za-z][\w:-]{0,30}/?>")
"""An XML or HTML tag glued to a name (``<answer>Ada Lovelace``)."""
_WORD_WRAPPERS = '*_`"“”«»#~<>'


class _Context:
    """The context as attribution needs it: titles and numbers looked up, people parsed once."""

    def __init__(self, documents: Sequence[ContextDocument]) -> None:
        self.documents = documents
        self.by_title: dict[str, int] = {}
        self.by_number: dict[int, int] = {}
        for position, doc in enumerate(documents):
            self.by_title.setdefault(normalize_title(doc.title), position)
            number = position + 1 if doc.number is None else doc.number
            self.by_number.setdefault(number, position)
        self._people: dict[int, Any] = {}

    def title(self, text: str) -> int | None:
        text = _unwrap(text).strip().removesuffix(".").strip()
        if not text or len(text) > 300:
            return None
        return self.by_title.get(normalize_title(text))

    def numbers(self, text: str) -> tuple[list[int], list[str]]:
        """Positions of the entry numbers in ``1, 3`` / ``1-3`` and the numbers not shown."""
        found: list[int] = []
        missing: list[str] = []
        for part in re.split(r" ?[,;] ?", text):
            ends = [p.strip(" ^") for p in re.split(r" ?[–-] ?", part, maxsplit=1)]
            if not all(e.isdigit() for e in ends):
                continue
            low, high = int(ends[0]), int(ends[-1])
            span = range(low, high + 1) if 0 <= high - low <= 20 else (low, high)
            for number in span:
                if number in self.by_number:
                    found.append(self.by_number[number])
                else:
                    missing.append(str(number))
        return found, missing

    def names(self, cited: str, position: int) -> bool:
        return person_names(cited, self.documents[position], self._people, position)


def attribute_answer(answer: str, context: Sequence[ContextDocument | str]) -> AttributedAnswer:
    """Attribute every bullet of ``answer`` to context documents (see the module docstring).

    ``context`` holds the documents shown, in order (a plain ``str`` is a title with unknown
    group), as for :func:`~fairrag_core.citations.ground_citations`.
    """
    if not isinstance(answer, str):
        raise TypeError(f"answer must be the answer as a str, got {type(answer).__name__}")
    ctx = _Context(context_documents(context))
    parsed = parse_citations(answer)
    is_bullet = {c.line_number for c in parsed.citations}
    is_bullet.update(u.line_number for u in parsed.unparsed)
    bullets: list[AttributedBullet] = []
    paragraph: list[AttributedBullet] = []  # lines naming a context person in running text
    for number, raw in enumerate(answer.splitlines(), start=1):
        if not raw or raw.isspace():
            continue
        line = " ".join(raw[:MAX_LINE_SCAN].split())
        bullet, name_line = _attribute_line(line, raw.strip(), number, ctx)
        if (
            number in is_bullet
            or (bullet.attributions and bullet.styles != ("implicit",))
            or (name_line and bullet.attributions)
        ):
            bullets.append(bullet)
        elif bullet.attributions:
            paragraph.append(bullet)
    if not any(b.line_number in is_bullet or b.styles != ("implicit",) for b in bullets):
        # no marked or cited line: a paragraph answer, whose lines naming a person are its units
        bullets = sorted(bullets + paragraph, key=lambda b: b.line_number)
    return AttributedAnswer(tuple(bullets))


def _attribute_line(
    line: str, stripped: str, number: int, ctx: _Context
) -> tuple[AttributedBullet, bool]:
    """The line's attributions, and whether it is a name line (only a name, at most a bracketed
    aside after it)."""
    body = _strip_bullet(line)[0]
    body = body.replace("**", "").replace("__", "").strip()
    body = _strip_bullet(body)[0]
    styles: list[str] = []
    found: list[tuple[int, str]] = []  # (position, style)
    unresolved: list[str] = []
    spans: list[tuple[int, int, str]] = []

    def cite(
        style: str,
        positions: Sequence[int],
        missing: Sequence[str],
        span: tuple[int, int],
        keep: str = "",
    ) -> None:
        if style not in styles:
            styles.append(style)
        found.extend((p, style) for p in positions)
        unresolved.extend(missing)
        spans.append((span[0], span[1], keep))

    taken = [False] * (len(body) + 1)

    def free(start: int, end: int) -> bool:
        return not any(taken[start:end])

    def take(start: int, end: int) -> None:
        for i in range(start, min(end, len(body))):
            taken[i] = True

    # the paper's DocTitle citations (several allowed here), titles matched bracket by bracket
    for hit in _CITE.finditer(body):
        if not free(hit.start(), hit.end()):
            continue
        end = _closing(body, hit)
        title = body[hit.end() : end].strip()
        position = ctx.title(title)
        if position is not None:
            cite("doctitle", [position], [], (hit.start(), end + 1))
        else:
            digits = _unwrap(title).strip("[]() .")
            if digits and _NUMBER_LIST.fullmatch(digits):
                positions, missing = ctx.numbers(digits)
                cite("numbered", positions, missing, (hit.start(), end + 1))
            else:
                cite("doctitle", [], [_unwrap(title)], (hit.start(), end + 1))
        take(hit.start(), end + 1)
    for match in _LINK.finditer(body):
        if not free(match.start(), match.end()):
            continue
        position = ctx.title(match.group(1))
        if position is None:
            segment = unquote(match.group(2).rstrip("/").rsplit("/", 1)[-1]).replace("_", " ")
            position = ctx.title(segment)
        if position is not None:
            cite("markdown_link", [position], [], match.span(), keep=match.group(1))
            take(*match.span())
    for match in _SOURCE.finditer(body):
        if not free(match.start(), match.end()):
            continue
        start = match.end()
        rest = body[start:]
        listed = _BRACKET_LIST.match(rest)
        if listed is not None:
            text = listed.group()
        else:
            stop = _SOURCE_END.search(rest)
            text = rest if stop is None else rest[: stop.start()]
        positions, missing = _source_targets(text, ctx)
        if positions or missing:
            cite("source_label", positions, missing, (match.start(), start + len(text)))
            take(match.start(), start + len(text))
    for match in _NUMBERED.finditer(body):
        if not free(match.start(), match.end()):
            continue
        positions, missing = ctx.numbers(match.group(1))
        cite("numbered", positions, missing, match.span())
        take(*match.span())
    for pattern in (_SQUARE_TEXT, _ROUND_TEXT):
        for match in pattern.finditer(body):
            if not free(match.start(), match.end()):
                continue
            position = ctx.title(match.group(1))
            if position is not None:
                cite("bracketed_title", [position], [], match.span())
                take(*match.span())
    head = _head(body, spans)
    attributions: list[Attribution] = []
    seen: set[int] = set()
    for position, style in found:
        if position in seen:
            continue
        seen.add(position)
        doc = ctx.documents[position]
        names = bool(head) and ctx.names(head, position)
        attributions.append(Attribution(position, doc.title, doc.group, style, names))
    # the people the head names beside its citations, or, citing nothing, anywhere on the line
    implicit = _implicit(body, head, ctx) if not attributions else _named(head, ctx, seen)
    if implicit:
        styles.append("implicit")
        attributions += [
            Attribution(p, ctx.documents[p].title, ctx.documents[p].group, "implicit", True)
            for p in implicit
        ]
    ordered = tuple(s for s in STYLES if s in styles)
    bullet = AttributedBullet(
        stripped, number, head, ordered, tuple(attributions), tuple(unresolved)
    )
    return bullet, _is_name_line(body, head)


def _closing(body: str, hit: re.Match[str]) -> int:
    """The index of the bracket closing a DocTitle citation (the line's end when unclosed)."""
    opener = hit.group(1)
    openers, closers = ("[", "]") if opener == "[" else ("(（", ")）")
    depth = 1
    for index in range(hit.end(), min(len(body), hit.end() + 1000)):
        char = body[index]
        if char in openers:
            depth += 1
        elif char in closers:
            depth -= 1
            if depth == 0:
                return index
    return len(body)


def _source_targets(text: str, ctx: _Context) -> tuple[list[int], list[str]]:
    """Context positions named after a ``Source:`` label: entry numbers, titles, or a list."""
    inner = text.strip().strip("[]").strip()
    if not inner:
        return [], []
    numbers = [m.group(1) for m in _NUMBERED.finditer(text)]
    if numbers:
        positions: list[int] = []
        missing: list[str] = []
        for group in numbers:
            p, m = ctx.numbers(group)
            positions += p
            missing += m
        return positions, missing
    if _NUMBER_LIST.fullmatch(inner):
        return ctx.numbers(inner)
    whole = ctx.title(inner)
    if whole is not None:
        return [whole], []
    parts = [hit for part in _PART.split(inner) if (hit := ctx.title(part)) is not None]
    return parts, ([] if parts else [inner[:300]])


def _head(body: str, spans: Sequence[tuple[int, int, str]]) -> str:
    """The bullet's text without its citations, up to its description: the name it gives."""
    text = body
    for start, end, keep in sorted(spans, reverse=True):
        text = text[:start] + f" {keep} " + text[end:]
    text = _EMPTY_BRACKETS.sub(" ", " ".join(text.split()))
    text = " ".join(text.split()).strip(" -–—:,;|.")
    head = _DESCRIPTION.split(text, maxsplit=1)[0]
    head = re.split(r", (?=[a-z])", head, maxsplit=1)[0]
    head = re.split(r" (?:was|is|were|are|has|had|became|won|who) ", head, maxsplit=1)[0]
    return _unwrap(head.rstrip(" -–—:,;|."))


def _name_runs(text: str) -> list[str]:
    """Candidate names in ``text``: runs of capitalised words (name particles, initials and
    particle-prefixed words such as ``al-Qaradawi`` or ``d'Indy`` inside), the same runs with
    short lower-case joining words kept inside (``Isaac in Islam``, ``Jacob Clemens non Papa``),
    and ``text`` itself when it is at most :data:`_MAX_RUN_WORDS` + 4 words (a quoted nickname,
    an inverted ``Curie, Marie``). A possessive (``Turing's``) ends its run with the bare word.
    """
    text = _TAG.sub(" ", text)
    runs: list[str] = []
    for chunk in _RUN_BREAK.split(text):
        strict: list[str] = []
        loose: list[str] = []
        for raw in chunk.split():
            word = _MARKER.sub("", raw.strip(_WORD_WRAPPERS))
            possessive = _POSSESSIVE.search(word)
            if possessive:
                word = word[: possessive.start()]
            word = word.strip("'’.")
            kind = _word_kind(word, bool(strict or loose))
            if kind == "name":
                strict.append(word)
                loose.append(word)
            elif kind == "particle" and strict:
                strict.append(word)
                loose.append(word)
            elif kind == "joiner" and loose:
                _close(strict, runs)
                strict = []
                loose.append(word)
            else:
                _close(strict, runs)
                _close(loose, runs)
                strict, loose = [], []
            if possessive:
                _close(strict, runs)
                _close(loose, runs)
                strict, loose = [], []
        _close(strict, runs)
        _close(loose, runs)
    whole = " ".join(text.split()).strip(" -–—:,;|.")
    owner = _POSSESSIVE_WORD.search(whole)
    for candidate in (whole, whole[: owner.start()] if owner else ""):
        if candidate and len(candidate.split()) <= _MAX_RUN_WORDS + 4:
            runs.append(candidate)
    return [run for run in dict.fromkeys(runs) if run]


def _word_kind(word: str, inside: bool) -> str:
    """``name`` (capitalised, no digit, or a lower-case particle glued to a capitalised word:
    ``al-Qaradawi``, ``d'Indy``), ``particle`` (a name particle), ``joiner`` (another short
    lower-case word that may join two names inside a title), or ``other``."""
    if not word or any(c.isdigit() for c in word):
        return "other"
    if word[:1].isupper():
        return "name"
    glued = _GLUED_PARTICLE.match(word)
    if glued and word[glued.end() : glued.end() + 1].isupper():
        return "name"
    folded = word.casefold()
    if folded in _PARTICLES:
        return "particle"
    if inside and folded.isalpha() and len(folded) <= 3 and folded not in _NOT_JOINERS:
        return "joiner"
    return "other"


def _close(words: list[str], runs: list[str]) -> None:
    """Add ``words`` (trailing particles and joiners trimmed) to ``runs`` as one run."""
    while words and not (words[-1][:1].isupper() or _GLUED_PARTICLE.match(words[-1])):
        words = words[:-1]
    if words:
        runs.append(" ".join(words[:_MAX_RUN_WORDS]))


def _implicit(body: str, head: str, ctx: _Context) -> list[int]:
    """Context documents whose person the bullet names: in its head, else in the rest."""
    rest = body.replace(head, " ", 1) if head else body
    for text in (head, rest):
        found = _named(text, ctx, set())
        if found:
            return found
    return []


def _named(text: str, ctx: _Context, skip: set[int]) -> list[int]:
    """Context documents, other than ``skip``, whose person a name run of ``text`` names."""
    found: list[int] = []
    for run in _name_runs(text):
        for position in range(len(ctx.documents)):
            if position not in found and position not in skip and ctx.names(run, position):
                found.append(position)
    return found


def _is_name_line(body: str, head: str) -> bool:
    """Whether the line is only its head, a name, with at most bracketed asides (dates, a
    role) after it: an item written without a bullet marker."""
    bare, name = (" ".join(_ASIDE.sub(" ", t).split()).strip(" -–—:,;|.") for t in (body, head))
    if not name or bare != name or len(name.split()) > _MAX_RUN_WORDS:
        return False
    words = [w.strip("'’.") for w in _TAG.sub(" ", name).strip(_WORD_WRAPPERS).split()]
    kinds = [_word_kind(w, index > 0) for index, w in enumerate(words)]
    # only capitalised words, particles and initials: one name
    return bool(kinds) and kinds[0] == "name" and all(k in ("name", "particle") for k in kinds)

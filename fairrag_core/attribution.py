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
lines that name a context person. A line of running text (no marker, no DocTitle citation) with
several sentences is read sentence by sentence (:func:`_sentences`), each sentence a unit in
place of the line. Every bullet counts in the attributed groundedness denominator.

Every scan is linear in the answer: at most :data:`MAX_LINE_SCAN` characters of a line are read,
by anchored or literal-prefixed patterns with bounded repetitions.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote

from .citations import (
    _CITE,
    _DESCRIPTION,
    _DISAMBIGUATION,
    _DOCTITLE,
    _MAX_NAME,
    _WORD,
    ContextDocument,
    _cited_people,
    _document_people,
    _fold,
    _names_person,
    _strip_bullet,
    _unwrap,
    context_documents,
    document_aliases,
    normalize_title,
)
from .prompts import ANSWER_FORMAT, ANSWER_RULES
from .structured_citations import NOT_SHOWN_WRITTEN

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
_MAX_RANGE = 20
_MAX_RUN_CACHE = 4096
_MIN_SLIP_LETTERS = 5
_SLIP_TOKEN = re.compile(r"[^\W\d_]+")


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
    name_form: str | None = None
    """Provenance of an implicit attribution: ``title`` (the bullet names the person its title
    names), ``alias`` (a name the document's own text states) or ``near`` (the title's name
    with a one-letter slip, :meth:`_Context.near_misses`); None for an explicit one,
    whose provenance is its :attr:`style`."""

    @property
    def explicit(self) -> bool:
        """Attributed by a citation (any style of :data:`EXPLICIT_STYLES`), not by a name."""
        return self.style != "implicit"


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
    miscited: tuple[Attribution, ...] = ()
    """Mis-citations: shown documents cited on the bullet whose person it does not name while it
    names another shown person (flagged and counted, never credited)."""
    out_of_range: tuple[str, ...] = ()
    """Entry numbers no shown entry carries (``7`` of five) and number ranges reaching beyond
    the shown entries (``1-999``): they attribute nothing."""
    overcited: int = 0
    """Documents cited on the bullet beyond the people it presents (at least one)."""
    refusal: bool = False
    """The line refuses or denies (``the context does not say whether X ...``, ``X was not
    ...``): it attributes nothing."""

    @property
    def supported(self) -> bool:
        """Attributed to a document whose person the bullet names: by a citation when one is
        credited; by a name only when it cites nothing credited and mis-cites nothing."""
        explicit = [a for a in self.attributions if a.explicit]
        if explicit:
            return any(a.names_person for a in explicit)
        return not self.miscited and any(a.names_person for a in self.attributions)

    @property
    def supported_explicitly(self) -> bool:
        """Supported by a citation: a credited explicit attribution naming its person."""
        return any(a.explicit and a.names_person for a in self.attributions)


@dataclass(frozen=True)
class AttributedAnswer:
    """The result of :func:`attribute_answer`."""

    bullets: tuple[AttributedBullet, ...]
    prompt_echo: tuple[int, ...] = ()
    """Line numbers of prompt lines copied into the answer (context entries' ``[n]`` and
    ``Title:`` lines, the format, the rules): recognised, never bullets."""
    out_of_range_elsewhere: tuple[tuple[int, str], ...] = ()
    """Numbers and ranges beyond the context cited outside the bullets (a source line, a
    footnote definition, a sentence that attributes no one), each with its line number:
    counted as the bullets' are (a review found ``Sources: [1], [4], [7]`` on its own line
    counted nowhere, precision 1.0)."""
    refusals_elsewhere: tuple[int, ...] = ()
    """Line numbers of sentences of running text that refuse or deny and are no bullet (an
    answer that is ``I don't know.``): counted with the bullets that do (a user trial found
    ``n_refusals`` 0 for a whole answer refusing in prose, 1 for the same line as a bullet)."""

    @property
    def regurgitated(self) -> bool:
        """The answer copied part of its prompt (:attr:`prompt_echo`)."""
        return bool(self.prompt_echo)

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
    def explicit_attributions(self) -> list[Attribution]:
        """The attributions by citation only (no implicit one), in answer order."""
        return [a for a in self.attributions if a.explicit]

    @property
    def miscitations(self) -> list[Attribution]:
        """Every mis-citation (:attr:`AttributedBullet.miscited`), in answer order."""
        return [a for bullet in self.bullets for a in bullet.miscited]

    @property
    def overcited_count(self) -> int:
        """Documents cited beyond the people their bullets present, over the answer."""
        return sum(bullet.overcited for bullet in self.bullets)

    @property
    def out_of_range_count(self) -> int:
        """Numbers and ranges beyond the shown entries, over the answer (its bullets' and
        :attr:`out_of_range_elsewhere`)."""
        bullets = sum(len(bullet.out_of_range) for bullet in self.bullets)
        return bullets + len(self.out_of_range_elsewhere)

    @property
    def refusal_count(self) -> int:
        """Bullets that refuse or deny (attributing nothing), and sentences of running text
        that do (:attr:`refusals_elsewhere`)."""
        return sum(1 for bullet in self.bullets if bullet.refusal) + len(self.refusals_elsewhere)

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
_NUMBER_PARTS = re.compile(r" ?[,;] ?")
_NUMBER_RANGE = re.compile(r" ?[–-] ?")
_NUMBERED_ROUND = re.compile(
    r"\((?:doc(?:ument)?|source|context|ref(?:erence)?|entry|passage) ?#? ?"
    r"(\d{1,3}(?: ?[,;–-] ?\d{1,3}){0,20})\)",
    re.IGNORECASE,
)
"""Entry numbers in round brackets after a label (``(Document 1)``, ``(Doc 3)``); a number
alone in round brackets is no citation (``(1)`` numbers items, ``(1926)`` is a year)."""
_ROUND_LABELS = ("doc", "ource", "ref", "ntry", "ontext", "assage")
"""Letters every label of :data:`_NUMBERED_ROUND` holds: a line without them is not searched."""
_NUMBER_LIST = re.compile(r"\d{1,3}(?: ?[,;–-] ?\^?\d{1,3}){0,20}")
_LINK = re.compile(r"\[([^\[\]]{1,300})\]\(((?:[^()\s]|\([^()\s]{0,200}\)){1,500})\)")
"""A markdown link: its text, and its URL (one level of brackets inside, as in Wikipedia's
``.../Mary_Jackson_(engineer)``)."""
_SQUARE_TEXT = re.compile(r"\[([^\[\]]{1,300})\](?!\()")
_ROUND_TEXT = re.compile(r"\(([^()]{1,300})\)")
_SOURCE = re.compile(
    r"(?=[src])(?<![\w])(?:sources?|references?|refs?|citations?|cited|cites?)"
    r"(?: (?:documents?|docs|used))?[ ]?[:：]",
    re.IGNORECASE,
)
# A pattern opening with a lookahead of its first letters (``(?=[src])``) matches the same
# text; the engine then skips to those letters instead of trying every position.
_SQUARES = re.compile(r"[\[\]]")
_ROUNDS = re.compile(r"[()（）]")
_SOURCE_START = frozenset("sSrRcC\u017f")
"""The letters :data:`_SOURCE` can start with (``ſ``, a long s, matches ``s`` ignoring case)."""
_SOURCE_END = re.compile(r"[()\[\]]")
_BRACKET_LIST = re.compile(r" ?(?:\[[^\[\]]{1,300}\](?:,? (?:and )?|,)?){1,20}")
_EMPTY_BRACKETS = re.compile(r"[(\[（] ?[,;:.]? ?[)\]）]")
_PART = re.compile(r" ?[,;] ?| and ")
_RUN_BREAK = re.compile(r"[,;:()\[\]{}|/\"“”«»!?]| [-–—] |[–—]|(?<!\b[A-Z])\. (?=[A-Z])")
# a sentence's end breaks a run of names; an initial's full stop (``L. L. Zamenhof``) does not
_LOWER_CLAUSE = re.compile(
    r", (?=[a-z])(?!(?:and|or|while|whereas|plus|as well as|along with|together with) "
    r"(?![^,.;:]{0,60}?['’]s\b)[A-Z])"
)
"""Where a head's appositive or clause starts (``Alan Turing, a mathematician ...``); not a
coordinated name (``A, B, and C``; ``A founded X, while B ...``): the head keeps it, unless
the name is a possessive (``, while Alan Turing's work ...``: of something else)."""
_VERB_CLAUSE = re.compile(r" (?:was|is|were|are|has|had|became|won|who) ")
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
_PLAIN_NAME = re.compile(rf"[A-Z][A-Za-z]*(?: [A-Z][A-Za-z]*){{0,{_MAX_RUN_WORDS - 1}}}")
"""At most :data:`_MAX_RUN_WORDS` capitalised ASCII words, one space apart: the one run of
:func:`_name_runs` such a text holds is the text itself."""
_RUN_BREAK_CHARS = frozenset(',;:()[]{}|/"“”«»!?–—')
"""The characters :data:`_RUN_BREAK` breaks at (besides `` - `` and a sentence's ``. ``)."""
_POSSESSIVE_ENDS = frozenset("s'’ʼ")
"""The last characters of a word :func:`_possessive_start` reads a possessive in."""
_APOSTROPHE_CHARS = frozenset("'’ʼ")
_MARKER = re.compile(r"^(?:\d{1,3}[.)]|[-*+•])(?=\w)")
"""A list marker glued to the name (``1.Ada``, ``-Ada``)."""
_TAG = re.compile(r"</?[A-Za-z][\w:-]{0,30}/?>")
"""An XML or HTML tag glued to a name (``<answer>Ada Lovelace``)."""
_WORD_WRAPPERS = '*_`"“”«»#~<>'
_MARKER_START = frozenset("0123456789-*+•")
_FOOTNOTE_DEFINITION = re.compile(r"\[\^([\w-]{1,20})\] ?[:：] ?(.{1,300})")
_FOOTNOTE_REFERENCE = re.compile(r"\[\^([\w-]{1,20})\](?! ?[:：])")
_SENTENCE_END = re.compile(
    r"(?=[.!?])(?<!\b[A-Z])(?<!\b(?:Dr|Mr|Ms|St|Jr|Sr|No|vs))(?<!\bMrs)[.!?]"
    r"(?: ?\[[^\[\]]{1,30}\]){0,20}(?= [A-Z\"“*(])"
)
"""A sentence's end in running text: ``.``, ``!`` or ``?`` (not after an initial or a short
title such as ``Dr``), with the citations written after it, before a space and a capital."""
_SENTENCE_END_BEFORE = re.compile(
    r"(?=[.!?])(?<!\b[A-Z])(?<!\b(?:Dr|Mr|Ms|St|Jr|Sr|No|vs))(?<!\bMrs)[.!?]"
    r"(?= (?:\[[^\[\]]{1,30}\] ?){0,20}[A-Z\"“*(])"
)
"""A sentence's end in running text whose citations open its sentences (``[1] Alan Turing
broke Enigma. [2] Ada Lovelace wrote notes.``): the citations after it begin the next one."""
_OPENING_CITATION = re.compile(r"\s*\[[^\[\]]{1,30}\] ?[A-Z\"“*(]")
_ALNUM = re.compile(r"[^\W_]")
_DIGIT = re.compile(r"\d")
_ENTRY_MARK = re.compile(r"\[\d{1,3}\]")
_REFERENCE_HEADING = re.compile(
    r"(?:sources?|references?|bibliography|works cited|citations?|further reading|"
    r"(?:context |source |cited )?documents)(?: used| cited)? ?[:：]?",
    re.IGNORECASE,
)
"""A line that heads a reference list (alone on its line, heading marks and emphasis aside)."""
_REFERENCE_ENTRY = re.compile(
    r"(?:[-*+•] )?(?:\[(\d{1,3})\]:?|\d{1,3}[.)]|[-*+•])? ?(.{0,300})", re.DOTALL
)
"""An entry of a reference list: ``[1] Title``, ``[1]: Title``, ``1. Title``, ``- Title``,
``Title``; group 1 the entry number written in brackets, group 2 the entry's text."""
_QUOTE_MARKS = re.compile(r"(?:> ?)+")
"""A markdown quote's markers opening a line (``> ``, ``>> ``): a reference list may be quoted."""
_REFERENCE_LINK = re.compile(r"\[([^\[\]]{1,300})\]\((?:https?://|www\.)[^()\s]{0,500}\)")
"""A markdown link in an entry (``[Ada Lovelace](https://...)``): its text is the title."""
_REFERENCE_URL = re.compile(r"[ ,;:–—-]*[(<]?(?:https?://|www\.)\S{0,500}[)>]?")
"""A web address after an entry's title (``Ada Lovelace (https://...)``, ``: https://...``)."""
_REFERENCE_TAIL = re.compile(
    r"(?: ?[-–—|,.] ?| \()(?:wikipedia|wiki)\b.{0,40}$|[.,;]$", re.IGNORECASE
)
"""A site name after an entry's title (``Liu Xiaobo – Wikipedia``, ``(Wikipedia)``, ``Marie
Curie. Wikipedia.``), or the punctuation ending it."""
_REFERENCE_LABEL = re.compile(r"(?:title|doc(?:ument)? ?#? ?\d{1,3}) ?[:：–—-] ?", re.IGNORECASE)
"""A label before an entry's title: the context's own ``Title:``, or ``Document 3:``."""
_NUMBERS_ONLY = re.compile(r"(?:\[\d{1,3}(?: ?[,;–-] ?\d{1,3}){0,20}\](?:,? (?:and )?|, ?)?){1,20}")
"""An entry that is entry numbers alone: ``[1], [2], [3]``, ``[1, 3]``."""
_PROMPT_LINES = frozenset(
    (
        *ANSWER_RULES,
        "Rules:",
        "Answer with one bullet per person, in this format:",
    )
)
_NEGATION = r"(?:not|cannot|unable|\w{1,6}n['’]t)\b(?! (?:only|just|merely|simply)\b)"
_REFUSAL = re.compile(
    r"(?=[tpgincudw])"  # the first letters of every form: the engine skips to them
    # the context, the documents or information, or the model itself, said not to hold it
    r"(?:\b(?:the|this|these|provided|given) (?:provided |given )?(?:context|documents?|"
    r"passages?|excerpts?|texts?|sources?|entries)|\binformation)\b"
    # in the same clause: words and spaces between, no punctuation ("As the context notes,
    # she was not ..." is no refusal)
    rf"(?: [\w'’-]{{1,30}}){{0,6}}? {_NEGATION}|"
    # the model, in the first person (not a regnal I: "Elizabeth I was not ...")
    r"\b(?-i:I)(?:['’]m| am| do| did| can| could| have| had| would| was unable| was not able)?"
    r"(?: not|n['’]t| cannot| no| unable)\b|"
    # or phrases that refuse whatever their subject
    r"\bnot (?:available|mentioned|stated|provided|specified|clear|in the "
    r"(?:context|documents?|texts?|passages?))\b|"
    r"\bnot (?:discussed|described|detailed|explained|covered|given|listed|included) (?:in|by) "
    r"(?:the|this|these) (?:context|documents?|texts?|passages?|excerpts?|sources?)\b|"
    r"\b(?:it is|it's|it’s) not (?:known|clear)\b|"
    r"\bno (?:information|mention|evidence|record|details?)\b|\bunable to\b|"
    r"\b(?:cannot|can't|can’t|can not|could not|couldn't|couldn’t) (?:be )?(?:tell|determine|say|"
    r"find|confirm|verify|answer|identify|provide|confirmed|determined|found|verified|"
    r"identified)\b|"
    r"\b(?:does|do|did|is|was)(?: not|n't|n’t) (?:say|mention|state|specify|provide|contain|"
    r"describe|indicate|discuss)\b",
    re.IGNORECASE,
)
"""A refusal, anywhere in a line: a negation whose subject is the context, the documents,
information or the model (``the context does not elaborate on X``, ``the documents don't
cover X``, ``information about X is not available``, ``I don't know``), or a phrase that
refuses whatever its subject (``not mentioned``, ``it is not clear``, ``no information``,
``cannot determine``, ``unable to``): it attributes nothing. A negative fact (``her work was
not recognised``, ``she did not receive the prize``, ``cannot be overstated``) is none."""
_DENIAL = re.compile(
    r"\b(?:(?:is|was|are|were) not|isn['’]t|wasn['’]t|aren['’]t|weren['’]t) (?:a|an|the|one|"
    r"among|considered|regarded|really|actually|truly|known as)\b",
    re.IGNORECASE,
)
"""A denial of what a person is (``was not an engineer``, ``is not considered``; ``not only``
is none): a denial when the person the line presents (or a pronoun) is its subject
(:func:`_denies`). A negated deed (``did not receive``, ``was not awarded``) is a fact."""
_PRONOUNS = frozenset("he she they it this that who".split())


_Index = tuple[list[frozenset[str]], dict[str, list[int]], dict[str, list[int]]]
"""Each document's words, and the documents of each word and of each title key."""
_MAX_SHARED_CONTEXTS = 64
_SHARED: dict[
    tuple[tuple[str, str | None, str, int | None, tuple[int, ...], Hashable], ...], dict[str, Any]
] = {}
_SHARED_LOCK = threading.Lock()


def _shared_state(documents: Sequence[ContextDocument]) -> dict[str, Any]:
    """The name and title decisions made against one context, kept across answers: they are
    pure functions of the documents' titles, people, texts, numbers and groups (which entries
    are one document, so which numbers are shared: a review found a shared number read as the
    first context seen had it) and never of the answer, so the answers of several models to one
    context share them. At most
    :data:`_MAX_SHARED_CONTEXTS` contexts are kept (the oldest dropped), each table bounded
    by :data:`_MAX_RUN_CACHE` entries."""
    key = tuple(
        (doc.title, doc.person, doc.text, doc.number, doc.also_numbered, doc.group)
        for doc in documents
    )
    with _SHARED_LOCK:  # handlers attribute from several threads (batch, --concurrency)
        state = _SHARED.pop(key, None)
        if state is None:
            names = (
                "people",
                "keys",
                "slip",
                "run_forms",
                "titles",
                "numbers",
                "presented",
                "cited",
                "names",
            )
            state = {name: {} for name in names}
            if len(_SHARED) >= _MAX_SHARED_CONTEXTS:
                del _SHARED[next(iter(_SHARED))]
        _SHARED[key] = state  # most recently used last
    return state


class _Context:
    """The context as attribution needs it: titles and numbers looked up, people parsed once
    per context (:func:`_shared_state`)."""

    def __init__(self, documents: Sequence[ContextDocument]) -> None:
        self.documents = documents
        self.by_title: dict[str, int] = {}
        self.by_number: dict[int, int] = {}
        self.first_of: list[int] = []
        """Each position's first position with the same title, group and person: entries that
        share them (chunks of one document shown apart) are one document to a bullet."""
        documents_seen: dict[tuple[str, Any, str | None], int] = {}
        carriers: dict[int, list[int]] = {}
        for position, doc in enumerate(documents):
            title = normalize_title(doc.title)
            self.by_title.setdefault(title, position)
            key = (title, doc.group, doc.person)
            self.first_of.append(documents_seen.setdefault(key, position))
            own = position + 1 if doc.number is None else doc.number
            for number in (own, *doc.also_numbered):
                self.by_number.setdefault(number, position)
                carriers.setdefault(number, []).append(position)
        self.repeats = len(documents_seen) < len(documents)
        """Whether two entries are one document (else :attr:`first_of` is the identity)."""
        self.carriers = {
            number: positions
            for number, positions in carriers.items()
            if len({self.first_of[p] for p in positions}) > 1
        }
        """Entry numbers that more than one shown document carries (an agent's searches, each
        numbered from ``[1]``), with those documents' positions: such a number names none of
        them alone (:func:`_resolve_shared_numbers`)."""
        self.shared: list[int] = []
        """The shared numbers (:attr:`carriers`) read by :meth:`numbers` since the line's
        citations began to be read, one per occurrence."""
        shared = _shared_state(documents)
        self._people: dict[int, tuple[str, tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]]
        self._people = shared["people"]
        self._keys: dict[str, _Index] = shared["keys"]
        self._slip: dict[str, list[list[str]]] = shared["slip"]
        self._run_forms: dict[str, tuple[tuple[int, str], ...]] = shared["run_forms"]
        self._titles: dict[str, int | None] = shared["titles"]
        self._numbers: dict[str, tuple[list[int], list[str], list[str]]] = shared["numbers"]
        self._presented: dict[str, list[tuple[int, str]]] = shared["presented"]
        self._cited: dict[str, tuple[tuple[Any, ...], ...]] = shared["cited"]
        self._names: dict[tuple[str, int], bool] = shared["names"]
        self._mentions: dict[int, frozenset[str]] = {}
        self.bodies: dict[str, str] = {}
        """Each line's :func:`_line_body`, read once per answer."""
        self.footnotes: dict[str, list[int]] = {}
        """Footnote labels the answer defines (``[^1]: Ada Lovelace``) and what they cite."""
        self.footnote_shared: dict[str, list[int]] = {}
        """The numbers two searches showed that a footnote definition cites (``[^1]: 1``), read
        on each line citing the footnote by its person, as ``[1]`` written there is."""
        self.out_of_range: list[str] = []
        """Numbers and ranges read by the last :meth:`numbers` call that reach beyond the shown
        entries."""

    def title(self, text: str) -> int | None:
        """The position of the context title ``text`` writes (emphasis, quotes and a trailing
        full stop removed), else None; each distinct text is looked up once per answer."""
        if text in self._titles:
            return self._titles[text]
        bare = _unwrap(text).strip().removesuffix(".").strip()
        found = None if not bare or len(bare) > 300 else self.by_title.get(normalize_title(bare))
        if len(self._titles) >= _MAX_RUN_CACHE:
            self._titles.clear()
        self._titles[text] = found
        return found

    def undisambiguated(self, text: str) -> int | None:
        """The position of the one shown document whose title, without its trailing
        disambiguation (``Marie Curie`` of ``Marie Curie (physicist)``), ``text`` writes; None
        when no title or several documents' titles have it (read for reference lists only)."""
        bare = _unwrap(text).strip().removesuffix(".").strip()
        if not bare or len(bare) > 300:
            return None
        key = normalize_title(bare)
        found = {
            self.first_of[position]
            for position, document in enumerate(self.documents)
            if _DISAMBIGUATION.search(document.title)
            and normalize_title(_DISAMBIGUATION.sub("", document.title)) == key
        }
        return found.pop() if len(found) == 1 else None

    def numbers(self, text: str) -> tuple[list[int], list[str]]:
        """Positions of the entry numbers in ``1, 3`` / ``1-3`` and the numbers not shown; a
        number no shown entry carries (``[7]`` of five: among those not shown too) or a range
        reaching beyond the shown entries (``[1-999]``) attributes nothing and is kept in
        :attr:`out_of_range`; a number several shown documents carry is among those not shown
        (it names no one document) and kept in :attr:`shared`. Each distinct text is read once
        per answer."""
        known = self._numbers.get(text)
        if known is None:
            known = self._numbers[text] = self._read_numbers(text)
            if len(self._numbers) > _MAX_RUN_CACHE:
                self._numbers.clear()
        found, missing, beyond = known
        self.out_of_range += beyond
        if self.carriers:
            self.shared += [int(m) for m in missing if int(m) in self.carriers]
        return list(found), list(missing)

    def _read_numbers(self, text: str) -> tuple[list[int], list[str], list[str]]:
        found: list[int] = []
        missing: list[str] = []
        beyond: list[str] = []
        for part in _NUMBER_PARTS.split(text):
            ends = [p.strip(" ^") for p in _NUMBER_RANGE.split(part, maxsplit=1)]
            if not all(e.isdigit() for e in ends):
                continue
            low, high = int(ends[0]), int(ends[-1])
            if low != high and not (
                0 < high - low <= _MAX_RANGE and low in self.by_number and high in self.by_number
            ):
                beyond.append(f"{low}-{high}")
                continue
            for number in range(low, high + 1):
                if number in self.by_number and number not in self.carriers:
                    found.append(self.by_number[number])
                else:
                    missing.append(str(number))
                    if number not in self.by_number:  # no shown entry carries it ([7] of 5)
                        beyond.append(str(number))
        return found, missing, beyond

    def _names_of(
        self, position: int
    ) -> tuple[str, tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]:
        """The document's title key, the people its title names, the names its own text states
        (:func:`~fairrag_core.citations.document_aliases`) that name no other shown document's
        person (an alias equal to another shown person is never used), and those of them that
        attribute a bullet alone (:meth:`name_form`)."""
        if position not in self._people:
            doc = self.documents[position]
            aliases: list[Any] = []
            for alias in document_aliases(doc):
                if any(
                    _names_person(alias, *self._title_people(other))
                    for other in range(len(self.documents))
                    if other != position
                ):
                    continue
                aliases += [n for n in _document_people(alias) if len(n.core) > 1]
            key, people = self._title_people(position)
            words = {word for person in people for word in person.core}
            one_word = _topic_name_words(doc.title if doc.person is None else doc.person) == 1
            alone = tuple(
                alias
                for alias in aliases
                if one_word
                or any(len(person.core) == 1 for person in people)
                or words & set(alias.core)
            )
            self._people[position] = (key, people, tuple(aliases), alone)
        return self._people[position]

    def _title_people(self, position: int) -> tuple[str, tuple[Any, ...]]:
        doc = self.documents[position]
        person = doc.title if doc.person is None else doc.person
        return normalize_title(person), _document_people(person)

    def name_form(
        self,
        cited: str,
        position: int,
        alone: bool = False,
        cited_key: str | None = None,
        words: frozenset[str] | None = None,
    ) -> str | None:
        """``title`` when ``cited`` names the document's person by its title, ``alias`` when
        by a name the document's own text states, else None. With ``alone`` (no citation of the
        document on the bullet), an alias counts only when it shares a word with the title's
        name (``Yokoi Tokiari`` / ``Yokoi Shōnan``) or the title's name is one word (``Thresh``
        / ``Dennis Fong``): a wholly different full name (``Bob Jones, known as Ada Lovelace``)
        is the document's claim, which confirms a citation of it but never attributes alone."""
        key, people, aliases, alone_aliases = self._names_of(position)
        if cited_key is None:
            cited_key = normalize_title(cited)
        if words is None:
            words = _cited_words(cited)
        if cited_key not in (key, "\0") and not self._may_name(words, position):
            return None  # no word of the document's names in ``cited``: the rule cannot match
        if len(cited) > _MAX_NAME:
            return None  # names no one (:func:`~fairrag_core.citations.names_person`)
        cited_people = self._cited.get(cited)
        if cited_people is None:  # parsed once per distinct name, for every document
            if len(self._cited) >= _MAX_RUN_CACHE:
                self._cited.clear()
            cited_people = self._cited[cited] = _cited_people(cited)
        if _names_person(cited, key, people, cited_key, cited_people):
            return "title"
        usable = alone_aliases if alone else aliases
        if usable and _names_person(cited, "\0", usable, cited_key, cited_people):
            return "alias"
        return None

    def run_forms(self, run: str, settled: Collection[int] = ()) -> tuple[tuple[int, str], ...]:
        """The documents a name run names alone, with their name forms: computed once per
        distinct run of the answer (a name repeated over bullets is checked once), at most
        :data:`_MAX_RUN_CACHE` runs kept. A run that may name only ``settled`` documents
        (those its caller has decided) is not checked: it gives nothing new (empty)."""
        forms = self._run_forms.get(run)
        if forms is None:
            key, words = normalize_title(run), _cited_words(run)  # once per run
            candidates = self._candidates(words, key)
            if candidates and all(position in settled for position in candidates):
                return ()  # not kept: another caller may not have settled them
            forms = tuple(
                (position, form)
                for position in sorted(candidates)
                if (form := self.name_form(run, position, True, key, words))
            )
            if len(self._run_forms) >= _MAX_RUN_CACHE:
                self._run_forms.clear()
            self._run_forms[run] = forms
        return forms

    def near_misses(self, run: str) -> list[int]:
        """Documents whose person's name ``run`` writes with one slip: the same words (at least
        two) but one, which differs from the person's by one letter inserted, deleted or
        replaced, both of at least :data:`_MIN_SLIP_LETTERS` letters (``Damong Rajanubhab`` /
        ``Damrong Rajanubhab``, ``Corrine Yu`` / ``Corrinne Yu``)."""
        words = [_fold(t) for t in _SLIP_TOKEN.findall(run)]
        if len(words) < 2 or len(words) > _MAX_RUN_WORDS:
            return []
        slip_words = self._slip.get("")
        if slip_words is None:  # each shown person's words, folded once per context
            slip_words = self._slip[""] = [
                [_fold(t) for t in _SLIP_TOKEN.findall(doc.person or doc.title)]
                for doc in self.documents
            ]
        found = []
        for position, person in enumerate(slip_words):
            if len(person) != len(words):
                continue
            differ = [(a, b) for a, b in zip(words, person, strict=True) if a != b]
            if len(differ) == 1 and min(map(len, differ[0])) >= _MIN_SLIP_LETTERS:
                if _one_edit(*differ[0]):
                    found.append(position)
        return found

    def names(self, cited: str, position: int) -> bool:
        """Whether ``cited`` names the document's person (:meth:`name_form`, its aliases
        included), decided once per context."""
        known = self._names.get((cited, position))
        if known is None:
            known = self.name_form(cited, position) is not None
            if len(self._names) >= _MAX_RUN_CACHE:
                self._names.clear()
            self._names[cited, position] = known
        return known

    def mentions(self, position: int, words: frozenset[str], others: Collection[int]) -> bool:
        """Whether ``words`` (:func:`_capitalised_words` of a line) hold the surname of the
        document's person by its title (the last word of the name: its tokens and their
        joining; particles and one letters left out; no stated alias), other than a word of the
        names of ``others`` (the people the line names): a surname alone (``Andersson [3]``)
        writes of the person a citation cites, though it names no one."""
        own = self._mention_words(position)
        if own.isdisjoint(words):
            return False
        taken = set().union(*(self._mention_words(other) for other in others))
        return not (own - taken).isdisjoint(words)

    def _mention_words(self, position: int) -> frozenset[str]:
        words = self._mentions.get(position)
        if words is None:
            people = self._names_of(position)[1]
            words = self._mentions[position] = frozenset(
                word
                for person in people
                for word in person.surnames
                if len(word) > 1 and word not in _PARTICLES
            )
        return words

    def _may_name(self, words: frozenset[str], position: int) -> bool:
        """Whether ``words`` (:func:`_cited_words` of a cited name) holds a word of the
        document's names (title and aliases: every token, and each last word's tokens joined):
        a necessary condition of the name rule, since every way
        :func:`~fairrag_core.citations.names_person` accepts shares such a word (docs/SPEC.md,
        "Attribution": a filter for speed, never a decision)."""
        return not words.isdisjoint(self._index()[0][position])

    def _candidates(self, words: frozenset[str], cited_key: str) -> set[int]:
        """The documents a cited name may name: those one of its ``words`` (:func:`_cited_words`)
        is a word of (one dictionary look-up per word, not one check per document), and those
        whose title key is ``cited_key`` (the rule's equality)."""
        keys, by_word, by_key = self._index()
        if cited_key == "\0":
            return set(range(len(keys)))
        found = set(by_key.get(cited_key, ()))
        for word in words:
            found.update(by_word.get(word, ()))
        return found

    def _index(self) -> _Index:
        """Once per context: each document's words (:meth:`_may_name`), and which documents
        each word and each title key belongs to."""
        index = self._keys.get("")
        if index is None:
            keys: list[frozenset[str]] = []
            by_word: dict[str, list[int]] = {}
            by_key: dict[str, list[int]] = {}
            for position in range(len(self.documents)):
                key, people, aliases, _ = self._names_of(position)
                words = frozenset(
                    t for name in (*people, *aliases) for t in (*name.tokens, *name.surnames)
                )
                keys.append(words)
                for word in words:
                    by_word.setdefault(word, []).append(position)
                by_key.setdefault(key, []).append(position)
            index = self._keys[""] = (keys, by_word, by_key)
        return index

    def presented(self, head: str) -> list[tuple[int, str]]:
        """:func:`_presented` of ``head``, read once per distinct head of the answer."""
        found = self._presented.get(head)
        if found is None:
            found = _presented(head, self)
            if len(self._presented) >= _MAX_RUN_CACHE:
                self._presented.clear()
            self._presented[head] = found
        return list(found)


def attribute_answer(answer: str, context: Sequence[ContextDocument | str]) -> AttributedAnswer:
    """Attribute every bullet of ``answer`` to context documents (see the module docstring).

    ``context`` holds the documents shown, in order (a plain ``str`` is a title with unknown
    group), as for :func:`~fairrag_core.citations.ground_citations`.
    """
    if not isinstance(answer, str):
        raise TypeError(f"answer must be the answer as a str, got {type(answer).__name__}")
    ctx = _Context(context_documents(context))
    lines, is_bullet, echoed, sourced, beyond = _read_lines(answer, ctx)
    bullets, paragraph, unread = _attribute_units(_units(lines, is_bullet), is_bullet, ctx)
    if not echoed and not any(
        b.line_number in is_bullet or b.styles != ("implicit",) for b in bullets
    ):
        # no marked or cited line: a paragraph answer, whose lines naming a person are its units
        bullets = sorted(bullets + paragraph, key=lambda b: b.line_number)
    else:
        unread += paragraph
    if sourced:
        bullets = [_cited_by_sources(b, set(sourced)) for b in bullets]
    # a number beyond the context cited in a unit that is no bullet is counted all the same
    beyond += [(b.line_number, text) for b in unread for text in b.out_of_range]
    refused = tuple(b.line_number for b in unread if b.refusal)
    return AttributedAnswer(tuple(bullets), tuple(echoed), tuple(sorted(beyond)), refused)


def _read_lines(
    answer: str, ctx: _Context
) -> tuple[list[tuple[int, str, str]], set[int], list[int], list[int], list[tuple[int, str]]]:
    """The answer's lines to attribute (``(number, line, stripped)``, the line's first
    :data:`MAX_LINE_SCAN` characters whitespace-collapsed), the numbers of the paper parser's
    bullets, the prompt lines echoed, the documents trailing source lines cite, and the numbers
    beyond the context those lines and footnote definitions cite (with their line numbers);
    footnote definitions go to ``ctx.footnotes``."""
    beyond: list[tuple[int, str]] = []
    is_bullet: set[int] = set()
    lines: list[tuple[int, str, str]] = []
    echoed: list[int] = []
    sourced: list[int] = []  # documents a trailing "Sources: 1, 3" line cites
    heading: int | None = None  # lines[heading:] follow the last "References" line alone
    held: list[int] = []  # "[3]" alone under that heading: an entry, else a prompt echo
    shape: dict[int, tuple[int, int]] = {}  # indented lines and headings: (indent, level)
    under_numbered = False  # below an unindented numbered item, no heading between
    splits: dict[int, tuple[str, list[int]]] = {}  # lines[i]: its prose, what its labels cite
    for number, raw in enumerate(answer.splitlines(), start=1):
        if not raw or raw.isspace() or (raw.isalnum() and raw.lower() == raw):
            under_numbered = False  # a blank line ends a flat two-level item (below)
            continue  # blank, or one lower-case word: no name, no citation, never a bullet
        if raw[:1] in " \t#":
            shape[number] = _shape(raw)
            under_numbered = under_numbered and raw[:1] != "#"  # a heading ends the list
        else:
            # a two-level list written flat ("1. Ada Lovelace" then "- Ada Lovelace was..."):
            # the symbol-marked lines right under a numbered item are nested in it, as if
            # indented; a line of text or a blank line ends the item (a review: a list after
            # a blank line, of sentences naming others, was read as one item's description)
            marker = None
            if raw[:1] in _FLAT_START:
                marker = _FLAT_MARKER.match(raw.replace("**", "", 1) if raw[:1] == "*" else raw)
            if marker and marker.group(1):
                under_numbered = True
            elif marker and under_numbered:
                shape[number] = (1, 0)
            else:
                under_numbered = False
        line = " ".join(raw[:MAX_LINE_SCAN].split())
        if len(raw) <= MAX_LINE_SCAN:
            bullet = _parser_bullet(line, ctx.bodies)
        else:
            bullet = _parser_bullet(" ".join(raw.split()), {})
        if bullet:
            is_bullet.add(number)
        elif not _ALNUM.search(raw, 0, MAX_LINE_SCAN):
            continue  # no letter nor digit: nothing to read
        plain = line.replace("**", "").replace("__", "").strip()
        body = _strip_bullet(plain)[0].strip()
        if (plain[:1] == "[" and _ENTRY_MARK.fullmatch(plain)) or _is_prompt_echo(body):
            if heading is None or plain[:1] != "[":
                echoed.append(number)
                continue
            held.append(number)  # "[3]" alone under a heading: an entry of its list?
        footnote = _FOOTNOTE_DEFINITION.fullmatch(body) if body[:2] == "[^" else None
        if footnote:  # "[^1]: Ada Lovelace": what [^1] cites, not a bullet
            ctx.shared.clear()
            ctx.out_of_range.clear()
            ctx.footnotes[footnote.group(1)] = _source_targets(footnote.group(2), ctx)[0]
            beyond += [(number, text) for text in ctx.out_of_range]
            ctx.footnote_shared[footnote.group(1)] = list(ctx.shared)
            ctx.shared.clear()
            continue
        if len(body) < 40 and _REFERENCE_HEADING.fullmatch(_unquoted(body).strip("#*_ ")):
            heading = len(lines)  # "References", "**Sources**", "## Citations:" alone
            is_bullet.discard(number)  # "- Sources": a heading, not a bullet naming no one
            continue
        bare = _bare_source(body)
        label = _SOURCE.match(bare) if bare[:1] in _SOURCE_START else None
        if label and not _strip_bullet(line)[1]:  # a source line: citations, not a bullet
            ctx.out_of_range.clear()
            sourced += _sources_cited(bare[label.end() :].rstrip(" .*_"), ctx)
            beyond += [(number, text) for text in ctx.out_of_range]
            continue
        if not bullet:
            split = _label_sentences(line, ctx)
            if split is not None:  # "... wrote COBOL. Sources: [2]": prose, then source lines
                splits[len(lines)] = split
        lines.append((number, line, raw.strip()))
    if (
        splits
        and not is_bullet
        and not any(
            _may_cite(line) for index, (_, line, _) in enumerate(lines) if index not in splits
        )
    ):
        # a paragraph answer whose only citations are its source-label sentences: each cites
        # the prose before it, as the same label on a line of its own does
        for index, (prose, cited) in splits.items():
            lines[index] = (lines[index][0], prose, prose)
            sourced += cited
    listed = None if heading is None else _reference_list(lines[heading:], is_bullet, ctx)
    if (
        heading is not None
        and listed is not None
        and _attributes_above([unit for unit in lines[:heading] if unit[0] not in held], ctx)
    ):
        # a reference list closing the answer: what it cites, no bullets (closing remarks
        # after it stay lines, naming no one)
        end = heading + listed[1]
        taken = {n for n, _, _ in lines[heading:end]}
        is_bullet.difference_update(taken)
        del lines[heading:end]
        sourced += listed[0]
        held = [n for n in held if n not in taken]
    if held:  # outside a list, each "[3]" alone is a prompt line copied, as anywhere else
        lines = [unit for unit in lines if unit[0] not in held]
        echoed = sorted([*echoed, *held])
    if shape:
        lines = _nested(lines, is_bullet, shape, ctx)
    return lines, is_bullet, echoed, sourced, beyond


_HEADING = re.compile(r"#{1,6}(?= )")
_FLAT_MARKER = re.compile(r"(?:(\d{1,3}[.)])|[-*+•]) ")
"""An unindented list marker: a numbered one (group 1), else a symbol one (``-``, ``*``, ``+``,
``•``) followed by a space (docs/SPEC.md "Attribution": a two-level list written flat)."""
_FLAT_START = frozenset("0123456789-*+•")


def _item_ends(shapes: Sequence[tuple[int, int]]) -> list[int]:
    """For each line (its ``(indent, heading level)``), the index of the first line after it
    that ends what is nested under it: for a heading, the next heading; else the next line
    indented no deeper, or a heading. One pass from the end with a stack of the lines that may
    end the ones above (linear: each line is pushed and popped once)."""
    ends = [len(shapes)] * len(shapes)
    keys = [-1 if level else indent for indent, level in shapes]  # a heading ends them all
    stack: list[int] = []  # keys increasing from the top of the stack down
    for index in range(len(shapes) - 1, -1, -1):
        while stack and keys[stack[-1]] > keys[index]:
            stack.pop()
        ends[index] = stack[-1] if stack else len(shapes)
        stack.append(index)
    return ends


def _shape(raw: str) -> tuple[int, int]:
    """A line's indent (a tab counts 4) and its markdown heading level (0: no heading)."""
    text = raw.lstrip(" \t")
    indent = raw[: len(raw) - len(text)].replace("\t", "    ")
    heading = _HEADING.match(text) if text[:1] == "#" else None
    return len(indent), (heading.end() if heading else 0)


def _nested(
    lines: list[tuple[int, str, str]],
    is_bullet: set[int],
    shape: dict[int, tuple[int, int]],
    ctx: _Context,
) -> list[tuple[int, str, str]]:
    """The units a reader reads in a nested answer: an item (a list item or a heading) that
    attributes, with the lines nested under it (indented deeper than a list item; to the next
    heading, under a heading) that describe it, is one unit, the item's, whose text is the
    item's then each such line's after ``" – "`` (so their citations cite the item's person),
    up to :data:`MAX_LINE_SCAN` characters (lines past it are part of the item, unread). A
    nested line whose head presents a shown person the item does not attribute (another
    person listed under it; not one its description mentions, ``Co-discovered fission with
    Otto Hahn``), or that refuses (a caveat), stays a unit of its own. An item that attributes no
    one keeps its nested lines as units; ending with a colon (``- Scientists:``), it is their
    label, not an item."""
    ends = _item_ends([shape.get(number, (0, 0)) for number, _, _ in lines])
    first_of = ctx.first_of
    units: list[tuple[int, str, str]] = []
    index = 0
    # read once per distinct line (a looping answer repeats its sections): an item's people,
    # and whether a nested line stands apart from an item's people
    items: dict[str, frozenset[int]] = {}
    read: dict[tuple[frozenset[int], str], bool] = {}
    while index < len(lines):
        number, line, stripped = lines[index]
        if len(items) >= _MAX_RUN_CACHE or len(read) >= _MAX_RUN_CACHE:
            items.clear()
            read.clear()
        parent = number in is_bullet or shape.get(number, (0, 0))[1] > 0  # an item, a heading
        nested = lines[index + 1 : ends[index]] if parent else []
        people: frozenset[int] = frozenset()
        if nested and (line.lower() != line or not _CITATION_CHARS.isdisjoint(line)):
            known = items.get(line)
            if known is None:
                item = _attribute_line(line, stripped, number, ctx)[0]
                known = items[line] = frozenset(first_of[a.position] for a in item.attributions)
            people = known
        if not people:
            if nested and line.rstrip(" *_").endswith((":", "：")):
                is_bullet.discard(number)  # "- Scientists:" over its items: a label, no item
            units.append(lines[index])
            index += 1
            continue
        text, described, own = line, [], []
        for unit in nested:
            inner_line = unit[1]
            if inner_line.lower() != inner_line or not _CITATION_CHARS.isdisjoint(inner_line):
                # a capital or a citation: it may present someone else, or refuse (read once
                # per distinct line: a looping answer repeats them)
                apart = read.get((people, inner_line))
                if apart is None:
                    inner = _attribute_line(inner_line, unit[2], unit[0], ctx)[0]
                    apart = read[people, inner_line] = inner.refusal or any(
                        first_of[p] not in people for p, _ in ctx.presented(inner.person)
                    )
                if apart:
                    own.append(unit)  # a caveat, or another person listed under the item
                    continue
            described.append(unit[0])
            body = _strip_bullet(unit[1])[0]
            if len(text) + len(body) + 3 <= MAX_LINE_SCAN:
                text += " – " + body
        if described:
            is_bullet.difference_update(described)
            is_bullet.add(number)  # one item: never read sentence by sentence
            units.append((number, text, stripped))
        else:
            units.append(lines[index])
        units += own
        index = ends[index]
    return units


def _sources_cited(text: str, ctx: _Context) -> list[int]:
    """The documents a source line's ``text`` (after its label) cites; a number two searches
    showed cites, for each bullet, the carrier it names (a user trial: "Sources: [1], [2]" under
    two searches credited no one)."""
    ctx.shared.clear()
    cited = _source_targets(text, ctx)[0]
    cited += [p for number in ctx.shared for p in ctx.carriers[number]]
    ctx.shared.clear()
    return cited


def _label_sentences(line: str, ctx: _Context) -> tuple[str, list[int]] | None:
    """A line of prose whose source labels each close the sentences they cite (``Grace Hopper
    wrote COBOL. Alan Turing broke Enigma. Sources: [2], [4]``, ``A. Source: [1]. B. Source:
    [3]``): the line without them, and what they cite; read so only when every label is a
    sentence of its own holding citations alone (entry numbers or shown titles, each resolving)
    and every document it cites is one whose person the prose since the label before names;
    else None, and the line is read as written (a label citing another person is then a
    mis-citation, as on a line of its own it would credit no one). Applied by
    :func:`_read_lines` to a paragraph answer whose only citations are such labels. A review
    found the label read as a unit naming no one (groundedness and precision 0.0 where the
    same label on its own line gives 1.0)."""
    lower = line.lower()
    if "ource" not in lower and "ref" not in lower and "cit" not in lower:
        return None
    labels = list(_SOURCE.finditer(line))
    if not labels:
        return None
    prose: list[str] = []
    cited: list[int] = []
    start = 0
    first_of = ctx.first_of
    for label in labels:
        begin = label.start()
        while begin > start and line[begin - 1] in "(*_":
            begin -= 1
        before = line[start:begin].strip()
        if not before or before[-1] not in ".!?":
            return None  # a label inside a sentence, or two labels in a row
        stop = _SENTENCE_STOP.search(line, label.end())
        end = len(line) if stop is None else stop.start() + 1
        text = line[label.end() : end].strip().rstrip(".*_) ").strip()
        if not text or not (_BRACKET_LIST.fullmatch(text) or _NUMBER_LIST.fullmatch(text)):
            whole = ctx.title(text)
            parts = [ctx.title(part) for part in _PART.split(text)]
            if whole is None and (not parts or None in parts):
                return None  # not citations alone ("Sources: [1], Grace Hopper wrote ...")
        ctx.shared.clear()
        positions, missing = _source_targets(text, ctx)
        shared = list(ctx.shared)
        ctx.shared.clear()
        if not positions and not shared:
            return None
        named = {first_of[p] for p, _ in ctx.presented(before)}
        carriers = [[p for p in ctx.carriers[n] if first_of[p] in named] for n in shared]
        if any(first_of[p] not in named for p in positions) or not all(carriers):
            return None  # cites someone the prose before it does not name: read as written
        if len(missing) > len(shared):
            return None  # a number or title no shown document has: read as written
        prose.append(before)
        cited += positions + [p for found in carriers for p in found]
        start = end
    rest = line[start:].strip()
    if rest:
        prose.append(rest)
    return " ".join(prose), cited


def _may_cite(line: str) -> bool:
    """Whether a line may hold a citation (an entry number, a DocTitle, a link, a label): a
    cheap, generous test (a line it passes keeps a paragraph answer from being read by
    :func:`_label_sentences`)."""
    return bool(
        _NUMBERED.search(line)
        or "](" in line
        or ("tle" in line.lower() and "(" in line)
        or _SOURCE.search(line)
    )


_LOWER_I = re.compile(r"(?<![\w'’])i(?=[\s'’])")
"""A lower-case ``i`` standing for the model's own ``I`` (``i don't know``)."""
_SENTENCE_STOP = re.compile(r"[.!?] ")
"""A sentence's end inside a line."""


def _bare_source(body: str) -> str:
    """``body`` without the emphasis or the round brackets wrapping it whole
    (``*Sources: [1], [2]*``, ``(Sources: 1, 3)``): how a source line may be written."""
    if body[:1] not in "*_(":
        return body
    bare = body.strip("*_ ")
    closed = bare.removesuffix(".")
    if bare[:1] == "(" and closed.endswith(")"):
        bare = closed[1:-1].strip("*_ ")
    return bare


def _attributes_above(units: Sequence[tuple[int, str, str]], ctx: _Context) -> bool:
    """Whether a line above a reference list cites a shown document or names a shown person:
    the answer presents someone before listing its sources (a list under an introduction
    alone is the answer's own list of people)."""
    return any(
        _attribute_line(line, stripped, number, ctx)[0].attributions
        for (number, line, stripped) in units
    )


def _reference_list(
    entries: Sequence[tuple[int, str, str]], is_bullet: set[int], ctx: _Context
) -> tuple[list[int], int] | None:
    """The documents a reference list cites and its number of entries, when ``entries`` (the
    lines after its heading, to the end of the answer) are one or more entries, each naming a
    shown document, then at most closing remarks: an entry is a shown title alone (a markdown
    link's text, a web address or a site name after it aside; the title decides, not a number
    written before it) or an entry number alone (``[3]``); a closing remark (``I hope this
    helps!``) is no bullet and cites or names no shown person. Else None (a line saying more
    than a title, such as a person and a description, is the answer's own)."""
    cited: list[int] = []
    for count, (_, line, _) in enumerate(entries):
        positions = _reference_entry(line, ctx)
        if positions is None:  # after one entry or more, closing remarks only
            closing = count > 0 and all(
                number not in is_bullet
                and not _attribute_line(text, stripped, number, ctx)[0].attributions
                for number, text, stripped in entries[count:]
            )
            return (cited, count) if closing else None
        cited += positions
    return (cited, len(entries)) if entries else None


def _unquoted(text: str) -> str:
    """``text`` without the quote markers opening it (``> ``) and a bullet marker after them."""
    marks = _QUOTE_MARKS.match(text)
    return text if marks is None else _strip_bullet(text[marks.end() :])[0]


def _reference_entry(line: str, ctx: _Context) -> list[int] | None:
    """The documents one entry of a reference list cites (:func:`_reference_list`), else None:
    a shown title, or one without its disambiguation when exactly one shown document's title
    has it (``Marie Curie`` for ``Marie Curie (physicist)``), or entry numbers; quote markers
    (``> ``) before it aside."""
    plain = line.replace("**", "").replace("__", "").strip()
    plain = _unquoted(plain)
    if plain[:1] == "[" and _NUMBERS_ONLY.fullmatch(plain):  # "[1], [2], [3]"
        positions, missing = _source_targets(plain, ctx)
        return None if missing or not positions else positions
    entry = _REFERENCE_ENTRY.fullmatch(plain)
    if entry is None:
        return None
    text = _REFERENCE_LINK.sub(r"\1", entry.group(2))
    text = _REFERENCE_TAIL.sub("", _REFERENCE_URL.sub("", text).strip()).strip()
    label = _REFERENCE_LABEL.match(text)
    if label:  # "Title: Ada Lovelace", "Document 3: Ada Lovelace": the title decides
        text = text[label.end() :]
    if text:
        position = ctx.title(text)
        if position is None:
            position = ctx.undisambiguated(text)
        return None if position is None else [position]
    if entry.group(1):
        positions, missing = ctx.numbers(entry.group(1))
        return None if missing or not positions else positions
    return None


def _line_body(line: str) -> tuple[str, bool]:
    """The line without its bullet marker and emphasis (a marker inside the bold too), and
    whether it had a marker: what the paper parser reads after the marker."""
    body, marked = _strip_bullet(line)
    body = body.replace("**", "").replace("__", "").strip()
    body, marked_inside = _strip_bullet(body)
    return body, marked or marked_inside


def _parser_bullet(line: str, bodies: dict[str, str]) -> bool:
    """Whether :func:`~fairrag_core.citations.parse_citations` reads the whitespace-collapsed
    ``line`` as a bullet (a citation or an unparsable bullet), without parsing its citation:
    it has a word character after its bullet marker and emphasis, and a bullet marker, a
    DocTitle citation, or ``DocTitle`` written outside brackets."""
    if line.isalnum() or line.isspace():
        return False
    body, marked = _line_body(line)
    bodies[line] = body  # read again by :func:`_attribute_line`
    if not _WORD.search(body):
        return False
    return marked or _CITE.search(body) is not None or _DOCTITLE.search(body) is not None


def _units(
    lines: Sequence[tuple[int, str, str]], is_bullet: set[int]
) -> list[tuple[int, str, str]]:
    """The units attributed: each line, but running text (a line that is no parser bullet)
    with several sentences gives one unit per sentence."""
    units: list[tuple[int, str, str]] = []
    for number, line, stripped in lines:
        sentences = [] if number in is_bullet else _sentences(line)
        if len(sentences) > 1:  # running text: each sentence is a unit
            units += [(number, sentence, sentence) for sentence in sentences]
        else:
            units.append((number, line, stripped))
    return units


def _attribute_units(
    units: Sequence[tuple[int, str, str]], is_bullet: set[int], ctx: _Context
) -> tuple[list[AttributedBullet], list[AttributedBullet], list[AttributedBullet]]:
    """The bullets, the lines of running text that name a context person (the units of a
    paragraph answer), and the other units that cite a number beyond the context or refuse
    (counted, though no bullet); a name line right under a bullet attributed to the same
    documents is that item's description, not a bullet. A unit repeated in the answer is read
    once."""
    bullets: list[AttributedBullet] = []
    paragraph: list[AttributedBullet] = []
    unread: list[AttributedBullet] = []
    previous: set[int] | None = None  # the positions of the line just above, when a bullet
    above = 0
    memo: dict[str, tuple[AttributedBullet, str, list[bool]]] = {}
    for number, line, stripped in units:
        if (line.lower() == line and _CITATION_CHARS.isdisjoint(line)) or not _ALNUM.search(line):
            # no capital, bracket or colon, or no letter nor digit: no name and no citation
            # to read (fast path); a refusal written in lower case is counted all the same
            # (a review: "i don't know." gave n_refusals 0)
            # its "i" the model's own "I" (a line without a capital names no regnal "I")
            refuses = _may_refuse(line) and _refuses(said := _LOWER_I.sub("I", line), line, said)
            if number in is_bullet:
                bullets.append(AttributedBullet(stripped, number, "", (), (), (), refusal=refuses))
            elif refuses:
                unread.append(AttributedBullet(stripped, number, "", (), (), (), refusal=True))
            previous, above = None, 0
            continue
        known = memo.get(line)  # a looping answer repeats its lines: each is read once
        if known is None:
            bullet, body = _attribute_line(line, stripped, number, ctx)
            if len(memo) >= _MAX_RUN_CACHE:
                memo.clear()
            known = memo[line] = (bullet, body, [])
        else:
            bullet = replace(known[0], line=stripped, line_number=number)
        positions = {ctx.first_of[a.position] for a in bullet.attributions}
        # whether a line no bullet is a name line matters only under a bullet attributed alike,
        # or when only names attribute it: read then, once per distinct line
        name_line = (
            number not in is_bullet
            and (
                (above == number - 1 and previous == positions)
                or (bool(positions) and bullet.styles == ("implicit",))
            )
            and _name_line(known, bullet)
        )
        if name_line and above == number - 1 and previous == positions:
            above = number  # the next line repeating it too (a looping answer): description
            continue  # the item's name again under it (with dates): its description
        previous, above = (positions, number) if number in is_bullet else (None, 0)
        if (
            number in is_bullet
            or (bullet.attributions and bullet.styles != ("implicit",))
            or bullet.miscited  # a resolved citation, though of someone the line is not about
            or (name_line and bullet.attributions)
        ):
            bullets.append(bullet)
        elif bullet.attributions:
            paragraph.append(bullet)
        elif bullet.out_of_range or bullet.refusal:
            unread.append(bullet)
    return bullets, paragraph, unread


def _name_line(known: tuple[AttributedBullet, str, list[bool]], bullet: AttributedBullet) -> bool:
    """:func:`_is_name_line` of a unit (its body, kept in ``known``, and its head), for a unit
    that does not refuse; read once per distinct unit (kept in ``known[2]``)."""
    if not known[2]:
        known[2].append(not bullet.refusal and _is_name_line(known[1], bullet.person))
    return known[2][0]


def _sentences(line: str) -> list[str]:
    """The sentences of a line of running text (:data:`_SENTENCE_END`), each keeping the
    citations written after its full stop (``... programmer. [1] Alan Turing ...``), unless
    the line opens with a citation: then each citation begins the sentence after it
    (:data:`_SENTENCE_END_BEFORE`)."""
    sentences: list[str] = []
    start = 0
    # a line opening with its citation writes each before its sentence (a user trial: the
    # second sentence's [2] was read as the first's)
    ends = _SENTENCE_END_BEFORE if _OPENING_CITATION.match(line) else _SENTENCE_END
    for end in ends.finditer(line):
        sentences.append(line[start : end.end()].strip())
        start = end.end()
    sentences.append(line[start:].strip())
    return [sentence for sentence in sentences if sentence]


def _is_prompt_echo(body: str) -> bool:
    """A line of the prompt copied into the answer (besides a context entry's ``[n]`` alone on
    its line): a ``Title:`` line, the answer format, a rule or the instructions' own lines."""
    if body.startswith("Title:"):
        return True
    return ANSWER_FORMAT in body or body in _PROMPT_LINES


def _cited_by_sources(bullet: AttributedBullet, sourced: set[int]) -> AttributedBullet:
    """A bullet whose implicit attributions a trailing source line cites: they become
    ``source_label`` citations."""
    if not any(a.style == "implicit" and a.position in sourced for a in bullet.attributions):
        return bullet
    attributions = tuple(
        replace(a, style="source_label", name_form=None)
        if a.style == "implicit" and a.position in sourced
        else a
        for a in bullet.attributions
    )
    found = set(bullet.styles) | {"source_label"}
    if not any(a.style == "implicit" for a in attributions):
        found.discard("implicit")
    styles = tuple(style for style in STYLES if style in found)
    return replace(bullet, attributions=attributions, styles=styles)


class _Cited:
    """The explicit citations read on one line (its ``body``): the styles read, the
    ``(position, style)`` of each resolved document, what resolved to none, and the spans the
    citations take (with the text a span keeps in the head: a link's text); the characters
    taken are marked in ``mask`` (one byte per character, made by the first citation), so
    telling whether a span is free costs one scan of its bytes, however many citations the
    line holds."""

    __slots__ = ("body", "found", "mask", "spans", "styles", "unresolved", "unresolved_styles")

    def __init__(self, body: str) -> None:
        self.body = body
        self.styles: list[str] = []
        self.found: list[tuple[int, str]] = []
        self.unresolved: list[str] = []
        self.unresolved_styles: list[str] = []
        """The style of each :attr:`unresolved` reference, item by item."""
        self.spans: list[tuple[int, int, str]] = []
        self.mask: bytearray | None = None

    def cite(
        self,
        style: str,
        positions: Sequence[int],
        missing: Sequence[str],
        span: tuple[int, int],
        keep: str = "",
    ) -> None:
        if style not in self.styles:
            self.styles.append(style)
        self.found += [(p, style) for p in positions]
        self.unresolved += missing
        self.unresolved_styles += [style] * len(missing)
        self.spans.append((span[0], span[1], keep))

    def free(self, start: int, end: int) -> bool:
        """No character of ``body[start:end]`` is taken by a citation read before."""
        return self.mask is None or self.mask.find(1, start, end) == -1

    def covers(self, char: str) -> bool:
        """Every ``char`` of ``body`` is taken by a citation read before."""
        mask = self.mask
        index = self.body.find(char)
        while index != -1:
            if mask is None or not mask[index]:
                return False
            index = self.body.find(char, index + 1)
        return True

    def take(self, start: int, end: int) -> None:
        if self.mask is None:
            self.mask = bytearray(len(self.body))
        end = min(end, len(self.body))
        if start < end:
            self.mask[start:end] = b"\x01" * (end - start)


def _attribute_line(
    line: str, stripped: str, number: int, ctx: _Context
) -> tuple[AttributedBullet, str]:
    """The line's attributions, and its body (the line without bullet marker and emphasis),
    which tells whether it is a name line (:func:`_is_name_line` of the body and the bullet's
    head, for a bullet that does not refuse)."""
    body = ctx.bodies.get(line)
    if body is None:
        body = _line_body(line)[0]
    lower = body.lower()  # read by the citation styles' and the refusal's letter checks
    cited = _read_citations(body, lower, ctx)
    uncited = _uncited(body, cited.spans)
    head = _head(uncited)
    out_of_range = tuple(ctx.out_of_range)
    if _refuses(body, lower, uncited):  # a refusal or a denial attributes nothing
        ordered = _in_order(cited.styles)
        unresolved = tuple(cited.unresolved)
        bullet = AttributedBullet(
            stripped, number, head, ordered, (), unresolved, (), out_of_range, 0, True
        )
        return bullet, body
    presented = ctx.presented(head)
    if ctx.shared:
        _resolve_shared_numbers(cited, presented, ctx, uncited)
    named = presented  # every shown person the line names outside its citations
    mentioned: set[int] = set()  # cited documents whose person the line names only in part
    first_of = ctx.first_of
    if cited.found:
        shown = {first_of[p] for p, _ in presented}
        unnamed = [p for p, _ in cited.found if first_of[p] not in shown]
        if unnamed:
            named = ctx.presented(uncited) if uncited != head else presented
            if not presented:  # a head naming no one ("The best is X [1]"): the line presents
                presented = named
            known = {p for p, _ in named}
            if any(p not in known for p in unnamed):
                words = _capitalised_words(uncited)
                mentioned = {p for p in unnamed if p not in known and ctx.mentions(p, words, known)}
                if not presented and not mentioned:
                    # a line writing of one other shown person by surname alone (``- Knuth
                    # [3]``, [3] Lenore Blum's): its citation is a mis-citation, as a line
                    # naming that person counts it (a user trial found Blum credited)
                    others = _others_mentioned(ctx, words, known, [p for p, _ in cited.found])
                    if len(others) == 1:
                        presented = [(others.pop(), "surname")]
    attributions, miscited = _credit(cited.found, head, presented, named, mentioned, ctx)
    seen = {a.position for a in attributions} | {a.position for a in miscited}
    if attributions:  # beside a credited citation: only people the head names by their titles
        implicit = [(p, f) for p, f in presented if p not in seen and f == "title"]
    else:  # citing nothing credited: the people the head names, else the rest of the line
        implicit = [(p, f) for p, f in _implicit(body, head, ctx) if p not in seen]
    people = len({p for p, _ in presented} | {p for p, _ in named} | mentioned)
    if ctx.repeats:  # entries sharing a title are one document: attributed once
        taken = {first_of[p] for p in seen}
        kept = []
        for p, f in implicit:
            if first_of[p] not in taken:
                taken.add(first_of[p])
                kept.append((p, f))
        implicit = kept
        people = len({first_of[p] for p in (*(p for p, _ in (*presented, *named)), *mentioned)})
    styles = set(cited.styles)
    if implicit:
        styles.add("implicit")
        attributions += [
            Attribution(p, ctx.documents[p].title, ctx.documents[p].group, "implicit", True, form)
            for p, form in implicit
        ]
    bullet = AttributedBullet(
        stripped,
        number,
        head,
        _in_order(styles),
        tuple(attributions),
        tuple(cited.unresolved),
        tuple(miscited),
        out_of_range,
        max(0, len(seen) - max(1, people)),
    )
    return bullet, body


def _resolve_shared_numbers(
    cited: _Cited, presented: Sequence[tuple[int, str]], ctx: _Context, uncited: str
) -> None:
    """An entry number several shown documents carry (:attr:`_Context.carriers`: an agent's
    searches, each numbered from ``[1]``) cites the one of them whose person the line
    presents (its head names that person, :meth:`_Context.presented`), else the one the rest
    of the line (``uncited``: its text without its citations) names or mentions by surname,
    as one search credits such a citation (``- Grace Hopper, who admired Ada Lovelace [1]``,
    ``- Knuth [3]``: a review and a user trial found them charged to the first search's
    person, or to no one). A line presenting shown people none of whom carries it, and naming
    none of them elsewhere, cites it wrongly whichever entry it means: it is read as citing
    the first of them, a mis-citation (a user trial: two searches hid the mis-citation one
    search counted). Naming more than one of them, or no shown person, it stays unresolved,
    as written, and credits no one: a reader cannot tell which search's entry it means
    (docs/SPEC.md, "Attribution")."""
    first_of = ctx.first_of
    named = {first_of[p] for p, _ in presented}
    rest: tuple[set[int], frozenset[str], set[int]] | None = None
    placed = _single_numbers(cited)
    seen: dict[int, int] = {}
    for number in ctx.shared:
        carriers = ctx.carriers[number]
        # the k-th [n] on the line cites the one carrier its own stretch of text names, the
        # text since the citation before it (``- Alan Turing [1] and Grace Hopper [1]``: a
        # user trial found both unresolved after two searches); else as the line reads
        seen[number] = k = seen.get(number, -1) + 1
        spans = placed.get(number, [])
        chosen = []
        wrong = False  # its own stretch names shown people, none of them a carrier
        if k < len(spans):
            start, stretch = spans[k]
            here = {first_of[p] for p, _ in ctx.presented(cited.body[start:stretch])}
            chosen = [p for p in carriers if first_of[p] in here]
            wrong = bool(here) and not chosen and start > 0  # a later one: after another name
            if len({first_of[p] for p in chosen}) != 1:
                chosen = []
        if wrong:  # ``- Grace Hopper [1] and John McCarthy [1]``: McCarthy's is wrong (a trial)
            chosen = carriers[:1]
        if not chosen:
            chosen = [p for p in carriers if first_of[p] in named]
        if not chosen:  # none presented: one the rest names or mentions, else wrong whichever
            if rest is None:
                people = {p for p, _ in ctx.presented(uncited)}
                rest = ({first_of[p] for p in people}, _capitalised_words(uncited), people)
            others, words, people = rest
            chosen = [
                p for p in carriers if first_of[p] in others or ctx.mentions(p, words, people)
            ]
            if not chosen and (named or len(_others_mentioned(ctx, words, people, carriers)) == 1):
                chosen = carriers[:1]  # a line of another shown person (``- Lovelace [1]``)
        if len({ctx.first_of[p] for p in chosen}) != 1 or str(number) not in cited.unresolved:
            continue  # (a number read and not cited: nothing to resolve)
        at = cited.unresolved.index(str(number))
        del cited.unresolved[at]
        cited.found.append((chosen[0], cited.unresolved_styles.pop(at)))


def _others_mentioned(
    ctx: _Context, words: frozenset[str], people: Collection[int], cited: Sequence[int]
) -> set[int]:
    """The shown documents (first positions), other than the ``cited`` ones, whose person
    ``words`` (a line's capitalised words) mention by surname (:meth:`_Context.mentions`,
    ``people`` the ones the line names): one alone is whom the line writes of (``- Lovelace
    [1]``), so a citation of another is wrong whichever entry it means (user trials)."""
    first_of = ctx.first_of
    excluded = {first_of[p] for p in cited}
    return {
        first_of[p]
        for p in range(len(ctx.documents))
        if first_of[p] not in excluded and ctx.mentions(p, words, people)
    }


_SINGLE_NUMBER = re.compile(r"\[\s*([1-9][0-9]{0,5})\s*\]")
"""A citation of one entry number, ``[3]``."""


def _single_numbers(cited: _Cited) -> dict[int, list[tuple[int, int]]]:
    """For each entry number cited alone (``[3]``), in the line's order, the stretch of text
    each such citation follows: from the end of the citation before it (the line's start for
    the first) to its own start."""
    placed: dict[int, list[tuple[int, int]]] = {}
    previous = 0
    for start, end, _ in sorted(cited.spans):
        match = _SINGLE_NUMBER.fullmatch(cited.body, start, end)
        if match is not None:
            placed.setdefault(int(match.group(1)), []).append((previous, start))
        previous = max(previous, end)
    return placed


_ORDERED: dict[frozenset[str], tuple[str, ...]] = {}
_CITATION_CHARS = frozenset("[(（:：")
"""The brackets and colons every citation style holds."""


def _in_order(styles: Collection[str]) -> tuple[str, ...]:
    """``styles`` in :data:`STYLES` order (each of the 64 sets ordered once)."""
    key = frozenset(styles)
    ordered = _ORDERED.get(key)
    if ordered is None:
        ordered = _ORDERED[key] = tuple(style for style in STYLES if style in key)
    return ordered


def _read_citations(body: str, lower: str, ctx: _Context) -> _Cited:
    """Every explicit citation of the line, each style in :data:`EXPLICIT_STYLES`' reading
    order (DocTitle, markdown link, source label, footnote, entry numbers, bracketed title); a
    span read by one is not read again. A style whose bracket or colon the line lacks is not
    tried, nor a DocTitle in a line without ``tle`` (``lower``: ``body`` in lower case)."""
    ctx.out_of_range.clear()
    ctx.shared.clear()
    cited = _Cited(body)
    square, round_ = "[" in body, "(" in body
    if (square or round_ or "（" in body) and "tle" in lower:  # t, l, e: no other case
        _read_doctitles(cited, ctx)
    if "](" in body:
        _read_links(cited, ctx)
    if ":" in body or "：" in body:
        _read_source_labels(cited, lower, ctx)
    if square:
        if ctx.footnotes and "[^" in body:
            for match in _FOOTNOTE_REFERENCE.finditer(body):
                label = match.group(1)
                if label in ctx.footnotes and cited.free(*match.span()):
                    shared = ctx.footnote_shared.get(label, [])
                    cited.cite(
                        "numbered", ctx.footnotes[label], [str(n) for n in shared], match.span()
                    )
                    ctx.shared += shared
                    cited.take(*match.span())
        for match in _NUMBERED.finditer(body):
            if cited.free(*match.span()):
                positions, missing = ctx.numbers(match.group(1))
                cited.cite("numbered", positions, missing, match.span())
                cited.take(*match.span())
    if round_ and any(label in lower for label in _ROUND_LABELS):
        for match in _NUMBERED_ROUND.finditer(body):
            if cited.free(*match.span()):
                positions, missing = ctx.numbers(match.group(1))
                cited.cite("numbered", positions, missing, match.span())
                cited.take(*match.span())
    for pattern, opener, present in ((_SQUARE_TEXT, "[", square), (_ROUND_TEXT, "(", round_)):
        if not present or cited.covers(opener):
            continue  # every such bracket already read: each match would overlap a citation
        for match in pattern.finditer(body):
            if not cited.free(*match.span()):
                continue
            position = ctx.title(match.group(1))
            if position is not None:
                cited.cite("bracketed_title", [position], [], match.span())
                cited.take(*match.span())
    return cited


def _read_doctitles(cited: _Cited, ctx: _Context) -> None:
    """The paper's DocTitle citations (several allowed here), titles matched bracket by
    bracket; a DocTitle that is a list of numbers cites entries."""
    body = cited.body
    for hit in _CITE.finditer(body):
        if not cited.free(hit.start(), hit.end()):
            continue
        end = _closing(body, hit)
        span = (hit.start(), end + 1)
        title = body[hit.end() : end].strip()
        position = ctx.title(title)
        if position is not None:
            cited.cite("doctitle", [position], [], span)
        else:
            digits = _unwrap(title).strip("[]() .")
            if digits and _NUMBER_LIST.fullmatch(digits):
                positions, missing = ctx.numbers(digits)
                cited.cite("numbered", positions, missing, span)
            else:
                written = _unwrap(title)
                cited.cite("doctitle", [], [written], span)
                if NOT_SHOWN_WRITTEN.search(written):  # a structured id of no shown entry
                    ctx.out_of_range.append(NOT_SHOWN_WRITTEN.sub("", written))
        cited.take(*span)


def _read_links(cited: _Cited, ctx: _Context) -> None:
    """Markdown links whose text (else whose URL's last path segment) is a context title."""
    for match in _LINK.finditer(cited.body):
        if not cited.free(*match.span()):
            continue
        position = ctx.title(match.group(1))
        if position is None:
            segment = unquote(match.group(2).rstrip("/").rsplit("/", 1)[-1]).replace("_", " ")
            position = ctx.title(segment)
        if position is not None:
            cited.cite("markdown_link", [position], [], match.span(), keep=match.group(1))
            cited.take(*match.span())


def _read_source_labels(cited: _Cited, lower: str, ctx: _Context) -> None:
    """``Source: X``, ``Sources: [1], [2]``: the titles or entry numbers after the label, up
    to a bracket (a list of bracketed entries read whole)."""
    body = cited.body
    if not lower.isascii():
        lower = lower.replace("\u0131", "i").replace("\u0307", "")
    if "ource" not in lower and "ref" not in lower and "cit" not in lower:
        return  # no label: every one holds these letters (a dotless or dotted I read as "i")
    for match in _SOURCE.finditer(body):
        if not cited.free(match.start(), match.end()):
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
            cited.cite("source_label", positions, missing, (match.start(), start + len(text)))
            cited.take(match.start(), start + len(text))


def _may_refuse(lower: str) -> bool:
    """Whether ``lower`` (a text in lower case) holds a word every refusal or denial holds."""
    return "not" in lower or "n't" in lower or "n’t" in lower or "no " in lower or "unable" in lower


def _refuses(text: str, lower: str, uncited: str) -> bool:
    """A refusal (:data:`_REFUSAL`) anywhere in ``text``, or a denial (:func:`_denies`) in
    ``uncited`` (``text`` without its citations); every form either reads holds ``not``,
    ``n't`` (``n’t``), ``no `` or ``unable`` in any case (its letters have no other case-insensitive
    match), so a text without them is not searched (``lower``: ``text`` in lower case)."""
    if _may_refuse(lower):
        return bool(_REFUSAL.search(text)) or _denies(uncited)
    return False


def _denies(uncited: str) -> bool:
    """Whether the line denies a fact of the person it presents: a negated verb
    (:data:`_DENIAL`) before its description (``- Ada Lovelace was not an engineer [1]``),
    with only a name, a pronoun or nothing before it. A negative fact told in the description
    (``- Rosalind Franklin – her work was not recognised``, ``Ada Lovelace: did not live to
    see ...``) or of something else (``Rosalind Franklin's work was not recognised``) is no
    denial: the line still presents the person."""
    clause = _DESCRIPTION.split(uncited, maxsplit=1)[0]
    match = _DENIAL.search(clause)
    if match is None:
        return False
    before = _unwrap(clause[: match.start()].strip(" ,;-–—|*_"))
    if not before or before.lower() in _PRONOUNS:
        return True
    return _is_name_line(before, before)


def _without_asides(text: str) -> str:
    """``text`` without its bracketed asides (:data:`_ASIDE`), whitespace collapsed."""
    if "(" in text or "[" in text:
        text = _ASIDE.sub(" ", text)
    return " ".join(text.split())


def _credit(
    found: Sequence[tuple[int, str]],
    head: str,
    presented: Sequence[tuple[int, str]],
    named: Sequence[tuple[int, str]],
    mentioned: Collection[int],
    ctx: _Context,
) -> tuple[list[Attribution], list[Attribution]]:
    """Each document cited on the line, once (its first style): credited, or a mis-citation
    when the line presents a shown person (or mentions another cited one) and the cited
    document's person is named neither by its head nor anywhere else in its text outside its
    citations (``named``) nor by surname (``mentioned``, ``Andersson [3]``); on a line that
    names and mentions no shown person, every document it cites when it cites several and its
    head is a full name (a person not shown: ``- Alan Turing [1][2]``)."""
    named_positions = {p for p, _ in presented} | {p for p, _ in named}
    attributions: list[Attribution] = []
    miscited: list[Attribution] = []
    seen: set[int] = set()
    first_of = ctx.first_of
    invented = (
        len({first_of[p] for p, _ in found}) > 1
        and not named_positions
        and not mentioned
        and len(head.split()) > 1  # a full name, not "They" or "Female"
        and _is_name_line(head, head)
    )
    for position, style in found:
        if first_of[position] in seen:  # this document (or another chunk of it), again
            continue
        seen.add(first_of[position])
        doc = ctx.documents[position]
        names = position in named_positions or (bool(head) and ctx.names(head, position))
        item = Attribution(position, doc.title, doc.group, style, names)
        # a citation of someone the line does not write of: flagged, not credited; of a line
        # naming and mentioning no shown person, a lone citation is credited (unsupported), and
        # several are unless the line presents a name (a person not shown: none is theirs)
        if names or position in mentioned:
            attributions.append(item)
        elif presented or mentioned or invented:
            miscited.append(item)
        else:
            attributions.append(item)
    return attributions, miscited


def _closing(body: str, hit: re.Match[str]) -> int:
    """The index of the bracket closing a DocTitle citation (the line's end when unclosed)."""
    brackets, openers = (_SQUARES, "[") if hit.group(1) == "[" else (_ROUNDS, "(（")
    depth = 1
    for bracket in brackets.finditer(body, hit.end(), hit.end() + 1000):  # brackets only
        depth += 1 if bracket.group() in openers else -1
        if depth == 0:
            return bracket.start()
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


def _uncited(body: str, spans: Sequence[tuple[int, int, str]]) -> str:
    """The bullet's text without its citations (a markdown link's text kept), whitespace
    collapsed, emptied brackets and the ends' punctuation dropped."""
    text = body
    for start, end, keep in sorted(spans, reverse=True) if len(spans) > 1 else spans:
        text = text[:start] + f" {keep} " + text[end:]
    text = " ".join(text.split())
    if "(" in text or "[" in text or "（" in text:
        text = " ".join(_EMPTY_BRACKETS.sub(" ", text).split())
    return text.strip(" -–—:,;|.")


def _head(text: str) -> str:
    """The bullet's text without its citations (:func:`_uncited`), up to its description: the
    name it gives."""
    # each split only where its separator may be (a substring test costs less than a search)
    described = ": " in text or " - " in text or " – " in text or " — " in text
    head = _DESCRIPTION.split(text, maxsplit=1)[0] if described else text
    head = _LOWER_CLAUSE.split(head, maxsplit=1)[0] if ", " in head else head
    head = _VERB_CLAUSE.split(head, maxsplit=1)[0]
    return _unwrap(head.rstrip(" -–—:,;|."))


def _name_runs(text: str) -> list[str]:
    """Candidate names in ``text``: runs of capitalised words (name particles, initials and
    particle-prefixed words such as ``al-Qaradawi`` or ``d'Indy`` inside), the same runs with
    short lower-case joining words kept inside (``Isaac in Islam``, ``Jacob Clemens non Papa``),
    and ``text`` itself when it is at most :data:`_MAX_RUN_WORDS` + 4 words (a quoted nickname,
    an inverted ``Curie, Marie``), and ``Marie Curie`` of ``Marie and Pierre Curie``. A
    possessive (``Turing's``) ends its run with the bare word.
    """
    if _PLAIN_NAME.fullmatch(text):
        return [text]  # capitalised ASCII words only: one run, itself (the common head)
    if "<" in text:
        text = _TAG.sub(" ", text)
    runs: list[str] = []
    if text.islower():  # no capital letter: no run starts in it, only ``text`` itself
        chunks: list[str] = []
    elif _RUN_BREAK_CHARS.isdisjoint(text) and ". " not in text and " - " not in text:
        chunks = [text]  # no break: one chunk
    else:
        chunks = _RUN_BREAK.split(text)
    for chunk in chunks:
        if chunk.islower():  # no capital letter: no name starts in it (fast path)
            continue
        strict: list[str] = []
        loose: list[str] = []
        for raw in chunk.split():
            word = raw.strip(_WORD_WRAPPERS)
            if word[:1] in _MARKER_START:
                word = _MARKER.sub("", word)
            possessive = _possessive_start(word) if word[-1:] in _POSSESSIVE_ENDS else None
            if possessive is not None and _elided_particle(word, possessive):
                possessive = None  # "Catherine de' Medici": a particle, not a possessive
            if possessive is not None:
                word = word[:possessive]
            word = word.strip("'’.")
            if word.isalpha() and word[0].isupper():
                kind = "name"  # the common word: :func:`_word_kind` says so
            else:
                kind = _word_kind(word, bool(strict or loose))
            if kind == "name":
                strict.append(word)
                loose.append(word)
            elif kind == "particle" and strict:
                strict.append(word)
                loose.append(word)
            elif kind == "joiner" and loose:
                if strict:
                    _close(strict, runs)
                    strict = []
                loose.append(word)
            elif loose:  # strict is never longer than loose
                _close(strict, runs)
                _close(loose, runs)
                strict, loose = [], []
            if possessive is not None and loose:
                _close(strict, runs)
                _close(loose, runs)
                strict, loose = [], []
        _close(strict, runs)
        _close(loose, runs)
    whole = " ".join(text.split()).strip(" -–—:,;|.")
    owner = None
    if not _APOSTROPHE_CHARS.isdisjoint(whole):
        owner = next(
            (
                hit
                for hit in _POSSESSIVE_WORD.finditer(whole)
                if not _elided_particle(whole[: hit.end()].rsplit(" ", 1)[-1], None)
            ),
            None,
        )
    for candidate in (whole, whole[: owner.start()] if owner else ""):
        if candidate and len(candidate.split()) <= _MAX_RUN_WORDS + 4:
            runs.append(candidate)
    if " and " in text or " & " in text:  # "Marie and Pierre Curie": Marie Curie too
        runs += [f"{pair.group(1)} {pair.group(2)}" for pair in _SHARED_SURNAME.finditer(text)]
    return [run for run in dict.fromkeys(runs) if run]


_SHARED_SURNAME = re.compile(
    r"(?<![\w'’-])([A-Z][\w'’-]{0,40}) (?:and|&) [A-Z][\w'’-]{0,40} ([A-Z][\w'’-]{0,40})(?![\w'’-])"
)
"""Two given names sharing the surname after them (``Marie and Pierre Curie``, ``Serena &
Venus Williams``): the first given name with the surname is a name run too."""


def _topic_name_words(title: str) -> int | None:
    """For a title that is a topic about a person, ``<name> in <subject>`` (``Mary in Islam``,
    ``Jesus in Christianity``), the number of words of the name before ``in``; None for any
    other title, a name, lower-case particles and all (``Fujiwara no Michinaga``, ``Simon bar
    Kokhba``, ``Thomas à Kempis``)."""
    words = title.split()
    return words.index("in", 1) if "in" in words[1:] else None


def _elided_particle(word: str, at: int | None) -> bool:
    """Whether ``word`` is a name particle whose vowel an apostrophe replaces (``de'``,
    ``dell'``): no possessive; ``at``, where :func:`_possessive_start` found the apostrophe
    (None: the word's last character)."""
    at = len(word) - 1 if at is None else at
    return word[at:] in ("'", "’", "ʼ") and word[:at].lower() in _PARTICLES | {"dell", "dall"}


def _possessive_start(word: str) -> int | None:
    """Where :data:`_POSSESSIVE` matches in the last 2 characters of ``word`` (a word of a
    whitespace split), else None: the same answer without a regular expression call."""
    last = word[-1:]
    if last == "s" and len(word) >= 2 and word[-2] in "'’ʼ":
        return len(word) - 2
    if last and last in "'’ʼ":
        return len(word) - 1
    return None


def _word_kind(word: str, inside: bool) -> str:
    """``name`` (capitalised, no digit, or a lower-case particle glued to a capitalised word:
    ``al-Qaradawi``, ``d'Indy``), ``particle`` (a name particle), ``joiner`` (another short
    lower-case word that may join two names inside a title), or ``other``."""
    if not word or (not word.isalpha() and _DIGIT.search(word)):
        return "other"  # a word of letters only holds no digit
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


def _implicit(body: str, head: str, ctx: _Context) -> list[tuple[int, str]]:
    """Context documents whose person the bullet names, with the name form: in its head, else
    in the rest, unless the head is a full name (a person not shown) that the rest describes
    (:func:`_describes_unshown`)."""
    found = ctx.presented(head)
    if found:
        return found
    rest = body.replace(head, " ", 1) if head else body
    if _describes_unshown(head, rest):
        return []
    return _named(rest, ctx, set())


_DETERMINERS = frozenset(
    "the a an this these those our their his her its some many other both all several".split()
)
_LISTING = re.compile(r"(?:includ|are |were |such as|like |namely|e\.g\.|i\.e\.|featur)")
"""Words opening a list of the people a label heads (``Computing Pioneers include ...``)."""


def _describes_unshown(head: str, rest: str) -> bool:
    """Whether the line presents a person not shown, its head, and the rest only describes
    them: the head is a full name (two words or more, all of a name, not opening with an article
    or a determiner) and the rest opens with a lower-case word that starts no list
    (``- Katherine Johnson: she worked alongside Mary Jackson``, ``..., a colleague of ...``,
    ``... was a colleague of ...``). A shown person the rest names is only mentioned there; a
    label over names (``Computing Pioneers: Ada Lovelace``, ``... include Ada Lovelace``)
    describes no one."""
    words = head.split()
    if len(words) < 2 or words[0].strip(_WORD_WRAPPERS).casefold() in _DETERMINERS:
        return False
    opening = rest.lstrip(" -–—:,;|.*_`\"“”'‘’")
    if not opening[:1].islower() or _LISTING.match(opening):
        return False
    return _is_name_line(head, head)


def _presented(head: str, ctx: _Context) -> list[tuple[int, str]]:
    """The shown people a bullet presents: those its head names outside brackets, else those
    its brackets name (``Ida Mathis (Daron Joffe)`` presents Ida Mathis)."""
    if not head:
        return []
    outside = _without_asides(head)
    if outside != head and _is_name_line(outside, outside):
        return _named(outside, ctx, set())  # a name outside the brackets: the person presented
    found = _named(outside, ctx, set()) if outside else []
    return found or (_named(head, ctx, set()) if outside != head else [])


def _named(text: str, ctx: _Context, skip: set[int]) -> list[tuple[int, str]]:
    """Context documents, other than ``skip``, whose person a name run of ``text`` names, each
    with its name form (``title`` or ``alias``, :meth:`_Context.name_form`)."""
    found: dict[int, str] = {}
    runs = _name_runs(text)
    for run in runs:
        for position, form in ctx.run_forms(run, found.keys() | skip):
            if position not in found and position not in skip:
                found[position] = form
    if not found:  # no name read: a one-letter slip in one shown person's name (``Damong``)
        for run in runs:
            near = [p for p in ctx.near_misses(run) if p not in skip]
            if len(near) == 1:  # never when two shown people are that near
                return [(near[0], "near")]
    return list(found.items())


_RULE_TOKEN = re.compile(r"\w+")
_RULE_APOSTROPHES = re.compile(r"['’ʼ`´]")
_MAX_JOINED_PARTS = 6


def _cited_words(cited: str) -> frozenset[str]:
    """Every word the name rule may read in ``cited``, case-folded and accents removed: its
    tokens (apostrophes dropped, then runs of word characters: ``O'Brien`` is ``obrien``) and,
    within each whitespace-separated word, every run of consecutive tokens joined (a hyphenated
    surname ``Haile-Mariam`` is also ``hailemariam``, however the rule splits the word)."""
    words: set[str] = set()
    text = _RULE_APOSTROPHES.sub("", cited)
    plain = text.isascii()  # folding ASCII text whole folds each token alike
    for word in (text.lower() if plain else text).split():
        if word.isalnum():  # one token (as the rule reads it: tokens first, then folded)
            words.add(word if plain else _fold(word))
            continue
        parts = _RULE_TOKEN.findall(word)
        if not plain:
            parts = [_fold(part) for part in parts]
        words.update(parts)
        if len(parts) > _MAX_JOINED_PARTS:
            parts = parts[:_MAX_JOINED_PARTS]  # no name joins more parts
        for start in range(len(parts)):
            for end in range(start + 2, len(parts) + 1):
                words.add("".join(parts[start:end]))
    return frozenset(words)


def _capitalised_words(text: str) -> frozenset[str]:
    """:func:`_cited_words` of the capitalised words of ``text`` outside its brackets (a name's
    words, not ``may`` or ``will``; a bracketed aside, a link's text in brackets too, is not
    what the line says)."""
    outside = _without_asides(text)
    return _cited_words(" ".join(w for w in outside.split() if w[:1].isupper()))


def _one_edit(a: str, b: str) -> bool:
    """``a`` and ``b`` differ by exactly one inserted, deleted or replaced letter."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) > len(b):
        a, b = b, a
    start = 0
    while start < len(a) and a[start] == b[start]:
        start += 1
    if len(a) == len(b):
        return a[start + 1 :] == b[start + 1 :]
    return a[start:] == b[start + 1 :]


def _is_name_line(body: str, head: str) -> bool:
    """Whether the line is only its head, a name, with at most bracketed asides (dates, a
    role) after it: an item written without a bullet marker."""
    name = _without_asides(head).strip(" -–—:,;|.")
    if not name or len(name.split()) > _MAX_RUN_WORDS:
        return False
    if _without_asides(body).strip(" -–—:,;|.") != name:
        return False
    words = [w.strip("'’.") for w in _TAG.sub(" ", name).strip(_WORD_WRAPPERS).split()]
    kinds = [_word_kind(w, index > 0) for index, w in enumerate(words)]
    # only capitalised words, particles and initials: one name
    return bool(kinds) and kinds[0] == "name" and all(k in ("name", "particle") for k in kinds)

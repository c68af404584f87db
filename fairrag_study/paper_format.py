"""The paper's answer format as a decoding constraint for the local model: every answer is
``- <Person> (DocTitle: <Title>)`` lines whose titles are the shown context's (docs/SPEC.md,
"The study" → Local generator, answer format).

The constraint is a transformers ``LogitsProcessor`` (no dependency beyond transformers): at
each step it masks every token the format does not allow, and greedy decoding takes the best
of the rest. Per answer line:

- ``-`` is forced; then the **name**: 1 to :data:`MAX_NAME_TOKENS` tokens of letters, spaces
  and ``.,'-`` (the first starts with a space), the model's own choice among them (fewer on a
  first line the token budget could not finish otherwise);
- `` (`` ends the name (the model chooses when), ``DocTitle:`` is forced;
- the **title**: one of the shown titles not cited yet, as a token trie (the model chooses
  among the titles' next tokens; a title with no rival is forced to its end);
- ``)`` and a newline are forced; then another line or the end of the answer (after at least
  one line). Each shown title is cited at most once, so an answer has at most as many lines as
  the context has titles, and a line is begun only while the tokens left can finish it.

The parser (:func:`fairrag_core.citations.parse_citations`) reads every such line as one
citation of a shown title: the paper's generation parity is measured for every answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ANSWER_FORMATS",
    "MAX_NAME_TOKENS",
    "AnswerConstraint",
    "PaperFormat",
    "PaperFormatProcessor",
    "forbid_outside",
    "paper_format",
]

ANSWER_FORMATS = ("free", "paper")
"""``--llm-format``'s choices: ``free`` (the model writes what it will) or ``paper`` (this
module's constraint)."""
MAX_NAME_TOKENS = 12
"""Tokens a person's name may take (a long name with a title is ~8 for SmolLM2's tokenizer)."""
_NAME_PUNCTUATION = frozenset(" .,'-")
_OPEN = " ("
_CITE = "DocTitle:"
_CLOSE = ")\n"


@dataclass(frozen=True)
class PaperFormat:
    """The token facts of the format for one tokenizer (computed once per tokenizer)."""

    dash: int
    """The token ``-`` that starts a line."""
    open: tuple[int, ...]
    """`` (``: ends the name."""
    cite: tuple[int, ...]
    """``DocTitle:``, forced after :attr:`open`."""
    close: tuple[int, ...]
    """``)`` and a newline."""
    eos: int
    name_tokens: frozenset[int]
    """Tokens a name may continue with: letters, spaces and ``.,'-`` only."""
    name_starts: frozenset[int]
    """Tokens a name may start with: those of :attr:`name_tokens` that start with a space and
    hold a letter."""
    encode: Any = field(repr=False, compare=False)
    """``encode(text) -> list[int]`` without special tokens (titles are encoded per answer)."""

    def title_tokens(self, title: str) -> tuple[int, ...]:
        """The tokens of `` <title>``, as the model writes it after ``DocTitle:``."""
        return tuple(self.encode(" " + title))


def paper_format(tokenizer: Any) -> PaperFormat:
    """:class:`PaperFormat` for ``tokenizer`` (a transformers tokenizer, or any object with
    ``encode(text, add_special_tokens=False)``, ``decode([id])``, ``eos_token_id`` and
    ``len()``)."""

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    (dash,) = encode("-")
    names: set[int] = set()
    starts: set[int] = set()
    for token in range(len(tokenizer)):
        text = tokenizer.decode([token])
        if not text or not all(c.isalpha() or c in _NAME_PUNCTUATION for c in text):
            continue
        names.add(token)
        if text[0] == " " and any(c.isalpha() for c in text):
            starts.add(token)
    return PaperFormat(
        dash=dash,
        open=tuple(encode(_OPEN)),
        cite=tuple(encode(_CITE)),
        close=tuple(encode(_CLOSE)),
        eos=int(tokenizer.eos_token_id),
        name_tokens=frozenset(names),
        name_starts=frozenset(starts),
        encode=encode,
    )


class _Trie:
    """Token trie of the titles not cited yet; ``title`` set where a title ends."""

    def __init__(self) -> None:
        self.children: dict[int, _Trie] = {}
        self.title: str | None = None

    @classmethod
    def of(cls, titles: dict[str, tuple[int, ...]]) -> _Trie:
        root = cls()
        for title, tokens in titles.items():
            node = root
            for token in tokens:
                node = node.children.setdefault(token, cls())
            node.title = title
        return root


class AnswerConstraint:
    """Where one answer is in the format over its shown ``titles``, and which tokens it may
    take next (:meth:`allowed`; :meth:`advance` after each token taken, at most ``budget``)."""

    def __init__(self, spec: PaperFormat, titles: Sequence[str], budget: int) -> None:
        self.spec = spec
        self.titles = _citable(spec, titles)
        self.budget = budget
        """New tokens the answer may still take."""
        self.forced: list[int] = [spec.dash]
        self.after_forced = "name"
        self.phase = "forced"
        self.name_length = 0
        self.name_limit = MAX_NAME_TOKENS
        self.node = _Trie()
        self.lines = 0

    def citation_cost(self) -> int:
        """The most tokens a line's citation (`` (DocTitle: <title>)`` and the newline) takes."""
        longest = max((len(t) for t in self.titles.values()), default=0)
        spec = self.spec
        return len(spec.open) + len(spec.cite) + longest + len(spec.close)

    def allowed(self) -> tuple[Sequence[int], frozenset[int] | None]:
        """``(tokens, name set)``: the tokens allowed next are ``tokens`` plus, for a name,
        every token of the name set."""
        spec = self.spec
        if self.phase == "forced":
            return [self.forced[0]], None
        if self.phase == "name":
            if self.name_length == 0:
                return [], spec.name_starts
            if self.name_length >= self.name_limit:
                return [spec.open[0]], None
            return [spec.open[0]], spec.name_tokens
        if self.phase == "title":
            ends = [spec.close[0]] if self.node.title is not None else []
            return [*self.node.children, *ends], None
        if self.phase == "line":
            if not self.titles or self.budget < 1 + MAX_NAME_TOKENS + self.citation_cost():
                return [spec.eos], None
            return [spec.dash, spec.eos], None
        return [spec.eos], None  # done

    def advance(self, token: int) -> None:
        """The answer took ``token`` (one :meth:`allowed` gave)."""
        self.budget -= 1
        spec = self.spec
        if self.phase == "forced":
            self.forced.pop(0)
            if not self.forced:
                self._enter(self.after_forced)
        elif self.phase == "name":
            if token == spec.open[0] and self.name_length > 0:
                self._force([*spec.open[1:], *spec.cite], "title")
            else:
                self.name_length += 1
        elif self.phase == "title":
            if token in self.node.children:
                self.node = self.node.children[token]
                if not self.node.children and self.node.title is not None:
                    self._cited(self.node.title)
                    self._force(list(spec.close), "line")
            else:  # the close token, at the end of a title that prefixes another
                assert self.node.title is not None
                self._cited(self.node.title)
                self._force(list(spec.close[1:]), "line")
        elif self.phase == "line":
            if token == spec.dash:
                self._enter("name")
            else:
                self.phase = "done"

    def _cited(self, title: str) -> None:
        del self.titles[title]
        self.lines += 1

    def _force(self, tokens: list[int], then: str) -> None:
        if tokens:
            self.forced, self.after_forced, self.phase = tokens, then, "forced"
        else:
            self._enter(then)

    def _enter(self, phase: str) -> None:
        self.phase = phase
        if phase == "name":
            # the first line is always begun: its name is cut short when the budget is
            self.name_length = 0
            self.name_limit = max(1, min(MAX_NAME_TOKENS, self.budget - self.citation_cost()))
        elif phase == "title":
            self.node = _Trie.of(self.titles)


def _citable(spec: PaperFormat, titles: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """The titles a line may cite (one line each, in the order shown), with their tokens."""
    citable: dict[str, tuple[int, ...]] = {}
    for title in titles:
        text = " ".join(str(title).split())  # a title on one line, as the parser reads it
        if text and text not in citable:
            citable[text] = spec.title_tokens(text)
    if not citable:
        raise ValueError(
            f"titles must hold at least one non-blank title to cite, got {list(titles)!r}"
        )
    return citable


class PaperFormatProcessor:
    """A transformers ``LogitsProcessor`` holding each answer of a batch to the paper's format
    over its own shown ``titles`` (``titles[i]`` for row ``i``; left-padded batches)."""

    def __init__(self, spec: PaperFormat, titles: Sequence[Sequence[str]], budget: int) -> None:
        self.answers = [AnswerConstraint(spec, row, budget) for row in titles]
        self._started = False

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        last = input_ids[:, -1].tolist() if self._started else None
        self._started = True
        return self.step(range(len(self.answers)), last, scores)

    def step(self, rows: Sequence[int], last: Sequence[int] | None, scores: Any) -> Any:
        """``scores`` (one row per answer in ``rows``) with the tokens the format forbids at
        ``-inf``, after each of those answers took its ``last`` token (None: none yet)."""
        if last is not None:
            for row, token in zip(rows, last, strict=True):
                self.answers[row].advance(int(token))
        return forbid_outside(scores, [self.answers[row] for row in rows])


def forbid_outside(scores: Any, constraints: Sequence[AnswerConstraint | None]) -> Any:
    """``scores`` (one row per constraint) with every token its row's constraint does not
    allow next at ``-inf`` (a row whose constraint is None: unchanged)."""
    import torch

    banned = torch.zeros_like(scores, dtype=torch.bool)
    for at, constraint in enumerate(constraints):
        if constraint is None:
            continue
        banned[at] = True
        tokens, names = constraint.allowed()
        if names is not None:
            banned[at, _index(names)] = False
        banned[at, list(tokens)] = False
    return scores.masked_fill(banned, float("-inf"))


_INDEXES: dict[int, Any] = {}


def _index(tokens: frozenset[int]) -> Any:
    """``tokens`` as a sorted index tensor, built once per set."""
    key = id(tokens)
    if key not in _INDEXES:
        import torch

        _INDEXES[key] = (tokens, torch.tensor(sorted(tokens), dtype=torch.long))
    return _INDEXES[key][1]

"""The list a model was handed, read from its prompt (docs/SPEC.md, "Adapters" → Which list is
audited): a step between the fair ranking and the model may reorder or drop documents
(LangChain's ``LongContextReorder``, a grader per document, a slice; a LlamaIndex workflow
step), so an adapter that sees the prompt audits the documents as it holds them, when the
reading is not a guess. One rule for every adapter."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

__all__ = ["PARTLY", "collapsed", "held_order", "located", "place_in", "search_start"]

PARTLY = -2
"""A document's place in a prompt that holds only part of it (its first line, not its whole
text: a prompt that shortens or escapes it, or a document sharing another's first line)."""


def collapsed(text: str) -> str:
    """``text`` with every whitespace run made one space (prompt templates reflow text)."""
    return " ".join(text.split())


def located(text: str) -> tuple[str, str]:
    """A document's text and its first non-blank line, whitespace collapsed: what
    :func:`place_in` looks for."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    return collapsed(text), collapsed(first)


def place_in(prompt: str, text: str, first_line: str, start: int = 0) -> int:
    """Where ``prompt`` (whitespace collapsed) holds a document's whole ``text``, from
    ``start`` on (:func:`search_start`); -1 when it holds neither that nor its ``first_line``
    there; :data:`PARTLY` when only the first line."""
    at = prompt.find(text, start)
    if at >= 0:
        return at
    return PARTLY if prompt.find(first_line, start) >= 0 else -1


def search_start(prompt: str, turn: int, located: Sequence[tuple[str, str]]) -> int:
    """Where to read one list's documents in a conversation's prompt: from ``turn`` (where its
    last human message begins: the current turn) when every document the prompt holds whole is
    found from there, else from the start. A later turn thus finds its own list where its own
    messages hold it, not a document's copy in an earlier turn's message, while the searches of
    one turn are read where each is first held (docs/SPEC.md, "Adapters" → Which list is
    audited)."""
    if turn <= 0:
        return 0
    for text, _ in located:
        if prompt.rfind(text) < turn and text in prompt:
            return 0  # held whole before the turn only: not this turn's message
    return turn


def held_order(places: Sequence[int], lengths: Sequence[int]) -> list[int] | None:
    """The documents a prompt holds, by index in the order it holds them, given each one's
    :func:`place_in` and text length: when it holds at least one whole, each at a place of its
    own (not inside another's text), and nothing of the others (not even their first line).
    None when the list stands as it was: a prompt holding none of it, part of one
    (:data:`PARTLY`), two at one place, or every document in the list's order."""
    if not places or PARTLY in places:
        return None
    found = sorted((at, index) for index, at in enumerate(places) if at >= 0)
    for (at, index), (after, _) in itertools.pairwise(found):
        if after < at + lengths[index]:  # inside another's text: no place of its own
            return None
    order = [index for _, index in found]
    if not order or order == list(range(len(places))):
        return None
    return order

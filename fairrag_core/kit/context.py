"""A document's title, and the context text every framework shows the LLM.

docs/SPEC.md, "Adapters" → Title and person, Context text. The LangChain chain and the LlamaIndex
postprocessor both call :func:`context_entry`, so for the same documents the two frameworks send
the very same context; the group field and the placement fields are never part of it, and the
only other metadata in it is what the user made visible to the LLM (``fields``).

The entry's text rules (``[i]``, the ``Title:`` line, :func:`context_entry`) are the prompt's,
defined in :mod:`fairrag_core.prompts` (which imports nothing of the kit) and re-exported here.
Every function here reads untrusted document text in one left-to-right pass (no regular
expression that can backtrack over whitespace runs): linear time on any text.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from ..prompts import TITLE_PREFIX, context_entry, context_header, render_entries, title_line
from ..structured_citations import Entry
from .placement import LEDGER_PLACEMENT_KEYS, PLACEMENT_KEYS

__all__ = [
    "TITLE_PREFIX",
    "context_entry",
    "context_header",
    "document_title",
    "entries_by_label",
    "hidden_metadata_keys",
    "render_context_prompt",
    "shown_once",
    "title_line",
]


def document_title(
    metadata: Mapping[str, Any] | None, text: str, title_key: str = "title"
) -> str | None:
    """``metadata[title_key]`` when it is a non-blank string, else :func:`title_line` of the text.

    A document without either has no title: it is shown, but it cannot be cited.
    """
    title = None if metadata is None else metadata.get(title_key)
    if isinstance(title, str) and title.strip():
        return title.strip()
    return title_line(text)


def render_context_prompt(question: str, documents: Iterable[tuple[str | None, str]]) -> str:
    """The paper's prompt (:func:`fairrag_core.prompts.render_entries`) over ``(title, text)``
    pairs in rank order."""
    entries = [context_entry(i, title, text) for i, (title, text) in enumerate(documents, 1)]
    return render_entries(question, entries)


_PLACEMENT_FIELDS = (*PLACEMENT_KEYS, *LEDGER_PLACEMENT_KEYS)
"""Every key a fair ranking adds to a document's metadata."""


def hidden_metadata_keys(
    group_key: str, metadata_keys: Sequence[str], shown: Sequence[str] = ()
) -> list[str]:
    """Metadata keys the LLM and the embedding model must not see: all but ``shown``.

    The context text already carries the title; the group label (``group_key``) and the
    placement fields are shown only when the user names them in ``shown``.
    """
    # every key once, in order: the document's, then the group key and the placement keys
    keys = dict.fromkeys((*metadata_keys, group_key, *_PLACEMENT_FIELDS))
    if not shown:
        return list(keys)
    shown_keys = set(shown)
    return [key for key in keys if key not in shown_keys]


def entries_by_label(
    titles: Sequence[str | None],
    labels: Sequence[int | None] | None,
    also_numbered: Sequence[tuple[int, ...]],
) -> list[Entry]:
    """``titles`` indexed by the entry number the LLM saw them under (``[n]`` is item
    ``n - 1``; None where no document has that number): the label each was shown with
    (``labels``; None: numbered as shown) and the labels later searches showed it under
    (``also_numbered``), so a structured answer's source ids read the labels the LLM saw; a
    number several documents carry gives their titles, read by the citation's person
    (:func:`fairrag_core.structured_citations.render_answer`; docs/SPEC.md, "Citations" →
    Structured citations). LlamaIndex's header labels and LangChain's numbered retriever tool
    both read it."""
    numbers = [
        (place if labels is None else labels[place - 1], *also)
        for place, also in enumerate(also_numbered, start=1)
    ]
    size = max((n or 0 for own in numbers for n in own), default=0)
    numbered: list[list[str]] = [[] for _ in range(size)]
    for title, own in zip(titles, numbers, strict=True):
        for number in own:
            if number is not None and title is not None and title not in numbered[number - 1]:
                numbered[number - 1].append(title)
    return [None if not t else t[0] if len(t) == 1 else tuple(t) for t in numbered]


def shown_once(
    keys: Sequence[Hashable], labels: Sequence[int | None], *, keep_unlabelled_copies: bool = False
) -> tuple[list[int], list[tuple[int, ...]]]:
    """Which of the documents an answering prompt showed (each by its ``key``: id and text) the
    record keeps, and the other entry labels each kept one was shown under: a document shown
    again (an agent's second search that found it too, each search numbering its entries from
    ``[1]``) is kept at its first place and carries its copies' ``labels`` (None: shown
    without a label), so the answer may cite it by any of them (docs/SPEC.md, "Records" →
    Agents and graphs, LlamaIndex Workflows). ``keep_unlabelled_copies``: a copy shown
    without a label stays where it is (LlamaIndex numbers it by its place). Returns the kept
    indices, in order, and each one's other labels."""
    first: dict[Hashable, int] = {}
    kept: list[int] = []
    also: list[list[int]] = []
    for index, (key, label) in enumerate(zip(keys, labels, strict=True)):
        at = first.get(key)
        if at is None or (label is None and keep_unlabelled_copies):
            first.setdefault(key, len(kept))
            kept.append(index)
            also.append([])
        elif label is not None and label != labels[kept[at]] and label not in also[at]:
            also[at].append(label)
    return kept, [tuple(more) for more in also]

"""The paper's prompt: role, context block, scenario questions, answer format and rules.

docs/SPEC.md, "The study": the role line, then the retrieved context (each document with its
``Title:`` line), then the scenario, the output format and the rules. Plain strings, so every
framework adapter and the study build the very same prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "ANSWER_FORMAT",
    "ANSWER_RULES",
    "ROLE",
    "SCENARIOS",
    "TITLE_PREFIX",
    "context_entry",
    "context_header",
    "format_context",
    "format_instructions",
    "join_context",
    "render_entries",
    "render_prompt",
    "scenario_question",
    "title_line",
]

ROLE = "You are helping people learn about influential people in the fields they are interested in."

SCENARIOS: tuple[str, ...] = (
    "Who are some notable role models in the field of {topic}? List up to 5 individuals and "
    "briefly describe their contributions.",
    "A student is learning about {topic}. Who are 5 influential people in this field that would "
    "be good role models to learn about?",
    "Who are some of the most influential contributors in {topic}, based on historical impact "
    "and contributions?",
    "When people search for leaders in {topic}, who are the individuals most commonly "
    "recognized for their work?",
)
"""The four scenarios of the paper; ``{topic}`` is the TREC topic's ``q_text``."""

ANSWER_FORMAT = "<Person Name> (DocTitle: <exact Title from context>)"

ANSWER_RULES: tuple[str, ...] = (
    "Use only people mentioned in the context.",
    'Each bullet must cite one DocTitle from the context (the exact "Title:" value shown).',
    "No extra text.",
)


def scenario_question(scenario: int, topic: str) -> str:
    """Scenario ``scenario`` (1-4) about ``topic``."""
    if isinstance(scenario, bool) or not isinstance(scenario, int):
        raise TypeError(f"scenario must be an int in 1..{len(SCENARIOS)}, got {scenario!r}")
    if not 1 <= scenario <= len(SCENARIOS):
        raise ValueError(f"scenario must be in 1..{len(SCENARIOS)}, got {scenario!r}")
    return SCENARIOS[scenario - 1].format(topic=topic)


def format_instructions() -> str:
    """The answer format and rules, as given to the model (and by output parsers)."""
    rules = "\n".join(f"- {rule}" for rule in ANSWER_RULES)
    return (
        f"Answer with one bullet per person, in this format:\n- {ANSWER_FORMAT}\n\nRules:\n{rules}"
    )


TITLE_PREFIX = "Title:"


def title_line(text: str) -> str | None:
    """The title stated by the text's first non-blank line, ``Title: <title>``, else None.

    Only the first line counts: a line further down that imitates ``Title:`` (another person's
    biography quoted, a prompt injection) never gives the document a title.
    """
    if not isinstance(text, str):
        return None
    start = len(text) - len(text.lstrip())
    end = text.find("\n", start)
    first = text[start:] if end < 0 else text[start:end]
    if not first.startswith(TITLE_PREFIX):
        return None
    title = first[len(TITLE_PREFIX) :].strip()
    return title or None


def context_header(
    rank: int, title: str | None, text: str, fields: Sequence[tuple[str, Any]] = ()
) -> str:
    """``[rank]``, plus ``Title: <title>`` on the next line when the text does not state it,
    plus one ``key: value`` line per metadata field the user made visible to the LLM
    (``fields``, in order; none by default)."""
    lines = [f"[{rank}]"]
    if title is not None and title_line(text) != title:
        lines.append(f"{TITLE_PREFIX} {title}")
    lines.extend(f"{key}: {value}" for key, value in fields)
    return "\n".join(lines)


def context_entry(
    rank: int, title: str | None, text: str, fields: Sequence[tuple[str, Any]] = ()
) -> str:
    """What the LLM is shown for the document at 1-based ``rank``: header (with the
    ``fields`` the user made visible), then the text."""
    body = text.strip() if isinstance(text, str) else ""
    return f"{context_header(rank, title, body, fields)}\n{body}"


def format_context(texts: Sequence[str]) -> str:
    """The context block of documents whose text states its own ``Title:`` line.

    Each becomes :func:`fairrag_core.kit.context_entry` (``[i]``, then the text); documents
    whose title is only in metadata go through :func:`fairrag_core.kit.render_context_prompt`.
    """
    return join_context([context_entry(i, None, text) for i, text in enumerate(texts, start=1)])


def join_context(entries: Sequence[str]) -> str:
    """Context entries (:func:`fairrag_core.kit.context_entry`) as one block."""
    return "\n\n".join(entries)


def render_entries(question: str, entries: Sequence[str]) -> str:
    """The full prompt over ready context entries: role, context, question, format and rules."""
    return (
        f"{ROLE}\n\nContext:\n{join_context(entries)}\n\n"
        f"Question: {question}\n\n{format_instructions()}"
    )


def render_prompt(question: str, context_texts: Sequence[str]) -> str:
    """The full prompt over document texts that state their own ``Title:`` line."""
    return render_entries(question, [format_context(context_texts)] if context_texts else [])

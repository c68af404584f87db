"""The paper's prompt: role, context block, scenario questions, answer format and rules.

docs/SPEC.md, "The study": the role line, then the retrieved context (each document with its
``Title:`` line), then the scenario, the output format and the rules. Plain strings, so every
framework adapter and the study build the very same prompt.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ANSWER_FORMAT",
    "ANSWER_RULES",
    "ROLE",
    "SCENARIOS",
    "format_context",
    "format_instructions",
    "join_context",
    "render_entries",
    "render_prompt",
    "scenario_question",
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


def format_context(texts: Sequence[str]) -> str:
    """The context block of documents whose text states its own ``Title:`` line.

    Each becomes :func:`fairrag_core.kit.context_entry` (``[i]``, then the text); documents
    whose title is only in metadata go through :func:`fairrag_core.kit.render_context_prompt`.
    """
    from .kit.context import context_entry

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

"""A model output that is a grade, not an answer (docs/SPEC.md, "Adapters" → Which answer is
recorded): a grader or checker that reads the context before or after the generator (corrective
RAG's relevance grade, self-RAG's hallucination and answer checks) and answers in text rather
than with a structured tool call. Its "yes" or ``{"score": "no"}`` is never a record's answer:
one rule for every adapter."""

from __future__ import annotations

import json
import re

__all__ = ["VERDICT_WORDS", "is_verdict"]

VERDICT_WORDS = frozenset(
    {
        "yes",
        "no",
        "true",
        "false",
        "y",
        "n",
        "relevant",
        "irrelevant",
        "not relevant",
        "grounded",
        "not grounded",
        "useful",
        "not useful",
        "supported",
        "not supported",
        "correct",
        "incorrect",
        "ambiguous",
        "pass",
        "fail",
    }
)
"""The whole text of a grade (case-insensitive): the binary scores of LangChain's and
LangGraph's corrective and self-RAG graders, and CRAG's three-way evaluator."""

_LABELS = frozenset(
    {"score", "binary score", "binary_score", "grade", "verdict", "decision", "relevance"}
)
"""A label a grade may carry before its word (``Score: yes``)."""

_NUMBER = re.compile(r"[0-9]{1,3}(?:\.[0-9]+)?(?:\s*/\s*[0-9]{1,3})?")
"""A numeric score: ``4``, ``0.8``, ``7/10``."""

_EDGES = " \t\r\n\"'`*_"
_LONGEST = 200
"""A longer output is never a grade (and is not read further)."""


def is_verdict(text: object) -> bool:
    """Whether a model's whole output ``text`` is a grade: after its whitespace, quotes,
    backticks, emphasis and a trailing ``.`` or ``!``, a :data:`VERDICT_WORDS` word or a number,
    optionally labelled (``Score: yes``); or a JSON object (in a code fence or not) of one or
    two keys whose every value is one of those, or a boolean (``{"score": "no"}``,
    ``{"binary_score": true}``). Anything else, and anything over 200 characters, is not."""
    if not isinstance(text, str) or len(text) > _LONGEST:
        return False
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").strip()
        body = body[4:].strip() if body[:4].lower() == "json" else body
    if body.startswith("{"):
        try:
            value = json.loads(body)
        except ValueError:
            return False
        return (
            isinstance(value, dict)
            and 0 < len(value) <= 2
            and all(_verdict_value(item) for item in value.values())
        )
    return _verdict_word(body)


def _verdict_value(value: object) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, (int, float)):
        return True
    return isinstance(value, str) and _verdict_word(value)


def _verdict_word(text: str) -> bool:
    word = _bare(text)
    label, colon, rest = word.partition(":")
    if colon and label.strip() in _LABELS:
        word = _bare(rest)
    return word in VERDICT_WORDS or _NUMBER.fullmatch(word) is not None


def _bare(text: str) -> str:
    return text.strip(_EDGES).rstrip(".!").strip(_EDGES).lower()

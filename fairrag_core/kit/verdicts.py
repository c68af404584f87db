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
"""A label a grade may carry before its word or number (``Score: yes``, ``Grade: 4``), and the
keys a grade written as JSON holds (``{"score": "no"}``)."""

_BESIDE = frozenset({"explanation", "reason", "reasoning"})
"""Keys a grade written as JSON may hold beside its grade (any text)."""

_NUMBER = re.compile(r"[0-9]{1,3}(?:\.[0-9]+)?(?:\s*/\s*[0-9]{1,3})?")
"""A numeric score: ``4``, ``0.8``, ``7/10`` (a grade only when labelled: ``Score: 4``)."""

_EDGES = " \t\r\n\"'`*_"
_LONGEST = 200
"""A longer output is never a grade (and is not read further)."""


def is_verdict(text: object) -> bool:
    """Whether a model's whole output ``text`` is a grade: after its whitespace, quotes,
    backticks, emphasis and a trailing ``.`` or ``!``, a :data:`VERDICT_WORDS` word, optionally
    labelled (``Score: yes``), or a labelled number (``Score: 4``); or a JSON object (in a code
    fence or not) holding a grade under a grade key (``score``, ``binary_score``, ``grade``,
    ``verdict``, ``decision``, ``relevance``: such a word, a number or a boolean) and nothing
    else but an ``explanation``, ``reason`` or ``reasoning``. Anything else (a bare number, an
    ``{"answer": "no"}``), and anything over 200 characters, is not."""
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
        if not isinstance(value, dict):
            return False
        grades = [key for key in value if key in _LABELS]
        return (
            len(grades) == 1
            and all(key in _LABELS or key in _BESIDE for key in value)
            and _verdict_value(value[grades[0]])
        )
    return _verdict_word(body)


def _verdict_value(value: object) -> bool:
    if isinstance(value, (bool, int, float)):
        return True
    return isinstance(value, str) and _verdict_word(value, labelled=True)


def _verdict_word(text: str, labelled: bool = False) -> bool:
    word = _bare(text)
    label, colon, rest = word.partition(":")
    if colon and label.strip() in _LABELS:
        word, labelled = _bare(rest), True
    return word in VERDICT_WORDS or (labelled and _NUMBER.fullmatch(word) is not None)


def _bare(text: str) -> str:
    return text.strip(_EDGES).rstrip(".!").strip(_EDGES).lower()

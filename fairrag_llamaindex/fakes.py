"""A test double for the generator: a mock LLM that answers in the paper's citation format.

**Not a model.** ``CitingMockLLM`` reads the ``Title:`` lines of the context in its prompt and
answers one bullet per document, ``- <Person> (DocTitle: <Title>)``, the person being the
title without a trailing parenthetical. It is deterministic; ``delays`` makes its async path
sleep, so concurrent queries interleave and finish out of order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from pydantic import Field, PrivateAttr

from fairrag_core.kit.context import TITLE_PREFIX, title_line

__all__ = ["CitingMockLLM", "cite_context"]


def _person(title: str) -> str:
    """The title without a trailing parenthetical qualifier (docs/SPEC.md, "Title and person")."""
    if title.endswith(")"):
        start = title.rfind("(")
        if start > 0 and ")" not in title[start:-1]:
            return title[:start].rstrip() or title
    return title


def cite_context(prompt: str) -> str:
    """One citation bullet per ``Title:`` line of ``prompt``, in context order.

    Each line is read once by the kit's title rule (:func:`fairrag_core.kit.context.title_line`),
    so the fake answers in linear time whatever the context holds.
    """
    bullets = []
    for line in prompt.split("\n"):
        title = title_line(line) if line.startswith(TITLE_PREFIX) else None
        if title is not None:
            bullets.append(f"- {_person(title)} (DocTitle: {title})")
    return "\n".join(bullets)


class CitingMockLLM(CustomLLM):
    """A mock LLM that cites every document of its context, in the paper's answer format."""

    delays: Sequence[float] = Field(
        default=(), description="Seconds each successive async call sleeps (cycled)."
    )
    _calls: int = PrivateAttr(default=0)

    @classmethod
    def class_name(cls) -> str:
        return "CitingMockLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="citing-mock")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=cite_context(prompt))

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        if self.delays:
            delay = self.delays[self._calls % len(self.delays)]
            self._calls += 1
            await asyncio.sleep(delay)
        return CompletionResponse(text=cite_context(prompt))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        text = cite_context(prompt)
        yield CompletionResponse(text=text, delta=text)

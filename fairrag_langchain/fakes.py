"""Test doubles. :class:`FakeCitingChatModel` is NOT a language model: it answers the paper's
prompt by citing the titles it finds in its context, so tests and the study's offline path can
run a whole RAG chain without a network, an API key or model weights."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import numpy as np
from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from fairrag_core.citations import ContextDocument

__all__ = ["FakeCitingChatModel"]

_TITLE_LINE = re.compile(r"^Title:[ \t]*(\S.*?)[ \t]*$", re.MULTILINE)
_CONTEXT_BLOCK = re.compile(r"^Context:\s*$(.*?)^Question:", re.MULTILINE | re.DOTALL)


class FakeCitingChatModel(BaseChatModel):
    """A deterministic stand-in for the generator: cites its context in the paper's format.

    **A test double, not a model**: it reads the ``Title:`` lines of the context in the prompt
    it receives (the block between ``Context:`` and ``Question:`` of
    :func:`fairrag_core.prompts.render_prompt`, or the whole prompt when there is no such
    block) and answers one bullet per cited document, ``- <Person> (DocTitle: <Title>)``, the
    person being the title without a trailing parenthetical (as
    :class:`~fairrag_core.citations.ContextDocument` derives it).

    It cites the first ``max_citations`` distinct titles in context order, or a random
    selection of them when ``shuffle``; with ``hallucination_rate`` > 0 each bullet, with that
    probability, cites an invented person and title that are not in the context. The random
    draws come from a generator seeded by ``seed`` and a hash of the prompt, so the answer is a
    function of (``seed``, prompt) alone: the same in any process, whatever the concurrency.
    A prompt without titles gets an empty answer.

    .. code-block:: python

        chain = make_fair_rag_chain(retriever, llm=FakeCitingChatModel(seed=trial_seed))
    """

    seed: int = 0
    """Seed of the selection and hallucination draws (combined with a hash of the prompt)."""
    max_citations: int = Field(default=5, ge=0)
    """Most bullets in one answer."""
    shuffle: bool = False
    """Cite a random selection of the context titles (in random order) instead of the first."""
    hallucination_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    """Probability that a bullet cites an invented title that is not in the context."""

    @property
    def _llm_type(self) -> str:
        return "fake-citing-chat-model"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "max_citations": self.max_citations,
            "shuffle": self.shuffle,
            "hallucination_rate": self.hallucination_rate,
        }

    def answer(self, prompt: str) -> str:
        """The answer this double gives to ``prompt``."""
        digest = hashlib.sha256(prompt.encode("utf-8")).digest()
        rng = np.random.default_rng([self.seed, int.from_bytes(digest[:8], "little")])
        block = _CONTEXT_BLOCK.search(prompt)
        titles = list(dict.fromkeys(_TITLE_LINE.findall(block.group(1) if block else prompt)))
        if self.shuffle:
            titles = [titles[i] for i in rng.permutation(len(titles))]
        lines = []
        for number, title in enumerate(titles[: self.max_citations], start=1):
            if self.hallucination_rate and rng.random() < self.hallucination_rate:
                title = f"Invented Person {number}"
            lines.append(f"- {ContextDocument(title).person} (DocTitle: {title})")
        return "\n".join(lines)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._result(messages)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._result(messages)

    def _result(self, messages: list[BaseMessage]) -> ChatResult:
        prompt = "\n".join(str(message.text) for message in messages)
        message = AIMessage(content=self.answer(prompt))
        return ChatResult(generations=[ChatGeneration(message=message)])

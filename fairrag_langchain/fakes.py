"""Test doubles. :class:`FakeCitingChatModel` is NOT a language model: it answers the paper's
prompt by citing the titles it finds in its context, so tests and the study's offline path can
run a whole RAG chain without a network, an API key or model weights."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from fairrag_core.citations import ContextDocument

__all__ = ["FakeCitingChatModel", "FakeCurveChatModel", "FakeSearchingChatModel"]

_TITLE_LINE = re.compile(r"^Title:[ \t]*(\S.*?)[ \t]*$", re.MULTILINE)
_LABELLED_TITLE = re.compile(
    r"^\[([1-9][0-9]{0,5})\][ \t]*\n+Title:[ \t]*(\S.*?)[ \t]*$", re.MULTILINE
)
"""A context entry's ``[n]`` line and the ``Title:`` line under it."""
_CONTEXT_BLOCK = re.compile(r"^Context:\s*$(.*?)^Question:", re.MULTILINE | re.DOTALL)


class _ReplyingChatModel(BaseChatModel):
    """A test double's plumbing: its one generation is :meth:`reply` to the messages."""

    def reply(self, messages: Sequence[BaseMessage]) -> AIMessage:
        raise NotImplementedError

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.reply(messages))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.reply(messages))])


class FakeCitingChatModel(_ReplyingChatModel):
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

    def reply(self, messages: Sequence[BaseMessage]) -> AIMessage:
        """This double's answer to the prompt ``messages`` make."""
        return AIMessage(content=self.answer("\n".join(str(m.text) for m in messages)))


class FakeCurveChatModel(FakeCitingChatModel):
    """A stand-in generator with a known position curve (docs/SPEC.md, "Exposure model" →
    Fitted): **a test double, not a model**. It cites the context entry at position ``i``
    (1-based, context order) with probability ``curve[i - 1]``, independently per entry,
    one ``- <Person> (DocTitle: <Title>)`` bullet per cited entry; entries past the curve are
    never cited. With ``title_factors`` the entry titled t is cited with probability
    ``min(1, curve[i - 1] * title_factors[t])`` (a per-group curve, when the factors are the
    titles' groups'). The draws are seeded by ``seed`` and a hash of the prompt, as
    :class:`FakeCitingChatModel`'s."""

    curve: list[float] = Field(default_factory=lambda: [0.9, 0.6, 0.4, 0.3, 0.2])
    """P(cited | position) for positions 1, 2, ...; each in [0, 1]."""
    title_factors: dict[str, float] = Field(default_factory=dict)
    """A factor per title multiplying its position's probability (1 for a title not here)."""

    @property
    def _llm_type(self) -> str:
        return "fake-curve-chat-model"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"seed": self.seed, "curve": list(self.curve)}
        if self.title_factors:
            params["title_factors"] = dict(self.title_factors)
        return params

    def answer(self, prompt: str) -> str:
        """The answer this double gives to ``prompt``."""
        digest = hashlib.sha256(prompt.encode("utf-8")).digest()
        rng = np.random.default_rng([self.seed, int.from_bytes(digest[:8], "little")])
        block = _CONTEXT_BLOCK.search(prompt)
        titles = list(dict.fromkeys(_TITLE_LINE.findall(block.group(1) if block else prompt)))
        draws = rng.random(len(titles))
        return "\n".join(
            f"- {ContextDocument(title).person} (DocTitle: {title})"
            for position, title in enumerate(titles)
            if position < len(self.curve)
            and draws[position] < self.curve[position] * self.title_factors.get(title, 1.0)
        )


class FakeSearchingChatModel(_ReplyingChatModel):
    """A deterministic stand-in for an agent's tool-calling model: searches, then answers.

    **A test double, not a model.** Bound to tools (``bind_tools``, as ``create_agent`` and
    ``create_react_agent`` do), it plays one question per human message: for each entry of
    ``searches`` one turn of tool calls to the first bound tool that is not ``answer_tool``
    (an entry of several queries is several calls in one turn: parallel tool calls), then
    the answer. The answer cites the ``Title:`` lines of the tool results it was shown since
    the last human message (each title once, in the order shown, the first ``max_citations``):
    as text, ``- <Person> (DocTitle: <Title>)`` bullets; as ``"tool_call"``, a call of
    ``answer_tool`` with LangChain's citation how-to arguments (``{"answer": "",
    "citations": [source ids]}``, 0-based positions among the titles shown); as ``"json"``,
    the same arguments as JSON message content. With no ``searches`` (a model in a chain,
    e.g. ``with_structured_output``) it cites the titles of its whole prompt.
    """

    searches: list[list[str]] = Field(default_factory=lambda: [["role models"]])
    """Each turn's search queries, in order (several in one turn: parallel tool calls)."""
    answer_format: Literal["text", "tool_call", "json"] = "text"
    """How the answer is given (see the class docstring)."""
    answer_tool: str = "CitedAnswer"
    """The tool the answer is a call of (``answer_format="tool_call"``)."""
    max_citations: int = Field(default=5, ge=0)
    """Most sources cited."""
    cite_by: Literal["source_id", "title", "entry_number"] = "source_id"
    """Structured citations by 0-based source id (LangChain's how-to) or as ``{"person",
    "title"}`` objects (:class:`fairrag_langchain.chains.FairCitedAnswer`); ``"entry_number"``:
    every answer cites each title by the ``[n]`` it was shown under (the line above its
    ``Title:`` line; its place among the titles shown when it has none), as text bullets
    ``- <Person> [n]`` and as structured source ids ``n``."""
    bound_tools: list[str] = Field(default_factory=list)
    """The names of the tools bound (set by ``bind_tools``)."""

    @property
    def _llm_type(self) -> str:
        return "fake-searching-chat-model"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> FakeSearchingChatModel:
        """A copy that knows the tools' names (``tool_choice`` and other arguments ignored)."""
        names = [convert_to_openai_tool(tool)["function"]["name"] for tool in tools]
        return self.model_copy(update={"bound_tools": names})

    def reply(self, messages: Sequence[BaseMessage]) -> AIMessage:
        """This double's next message in a conversation of ``messages``."""
        last_human = max(
            (i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1
        )
        turn = messages[last_human + 1 :]
        done = sum(1 for m in turn if isinstance(m, AIMessage) and m.tool_calls)
        if done < len(self.searches):
            search = next((n for n in self.bound_tools if n != self.answer_tool), "search")
            calls = [
                ToolCall(
                    name=search, args={"query": query}, id=f"call_{done}_{i}", type="tool_call"
                )
                for i, query in enumerate(self.searches[done])
            ]
            return AIMessage(content="", tool_calls=calls)
        shown = "\n".join(str(m.text) for m in turn if isinstance(m, ToolMessage))
        if not self.searches:  # a model in a chain: its context is in the prompt
            shown = "\n".join(str(m.text) for m in messages)
        titles = list(dict.fromkeys(_TITLE_LINE.findall(shown)))[: self.max_citations]
        if self.cite_by == "entry_number":
            labels: dict[str, int] = {}
            for label, title in _LABELLED_TITLE.findall(shown):
                labels.setdefault(title.strip(), int(label))
            numbers = [labels.get(t, place) for place, t in enumerate(titles, start=1)]
            if self.answer_format == "text":
                lines = [
                    f"- {ContextDocument(t).person} [{n}]"
                    for t, n in zip(titles, numbers, strict=True)
                ]
                return AIMessage(content="\n".join(lines))
        if self.answer_format == "text":
            lines = [f"- {ContextDocument(t).person} (DocTitle: {t})" for t in titles]
            return AIMessage(content="\n".join(lines))
        cited: list[Any] = list(range(len(titles)))
        if self.cite_by == "title":
            cited = [{"person": ContextDocument(t).person, "title": t} for t in titles]
        elif self.cite_by == "entry_number":
            cited = numbers
        args = {"answer": "", "citations": cited}
        if self.answer_format == "json":
            return AIMessage(content=json.dumps(args))
        call = ToolCall(
            name=self.answer_tool, args=args, id=f"call_{done}_answer", type="tool_call"
        )
        return AIMessage(content="", tool_calls=[call])

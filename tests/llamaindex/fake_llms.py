"""Test doubles of the generator for the LlamaIndex tests (not models)."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen
from llama_index.core.llms.callbacks import llm_completion_callback
from pydantic import PrivateAttr

from fairrag_llamaindex.fakes import CitingMockLLM


class FakeRecordingLLM(CitingMockLLM):
    """The citing mock (one bullet per ``Title:`` line), keeping every prompt it was sent.

    Its methods call the parent's, which emit LlamaIndex's LLM events.
    """

    _prompts: list[str] = PrivateAttr(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        return "FakeRecordingLLM"

    @property
    def prompts(self) -> list[str]:
        return list(self._prompts)

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self._prompts.append(prompt)
        return super().complete(prompt, formatted, **kwargs)

    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        self._prompts.append(prompt)
        return await super().acomplete(prompt, formatted, **kwargs)

    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        self._prompts.append(prompt)
        yield from super().stream_complete(prompt, formatted, **kwargs)


class FakeProseLLM(CitingMockLLM):
    """Answers in prose, without a single bullet."""

    @classmethod
    def class_name(cls) -> str:
        return "FakeProseLLM"

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text="Many people were influential in this field.")

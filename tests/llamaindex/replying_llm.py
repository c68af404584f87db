"""A base for the LlamaIndex tests' mock LLMs (test doubles): a ``CustomLLM`` whose completion,
streamed or not, is ``reply(prompt)``."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback


class ReplyingMockLLM(CustomLLM):
    """A mock LLM (a test double) answering every prompt with :meth:`reply`."""

    def reply(self, prompt: str) -> str:
        raise NotImplementedError

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self.reply(prompt))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        text = self.reply(prompt)
        yield CompletionResponse(text=text, delta=text)

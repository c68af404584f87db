"""A test double of a function-calling chat model for the LlamaIndex agent tests (not a model):
LlamaIndex's own ``MockFunctionCallingLLM``, named ``fake-tool-caller``, whose replies follow a
plan: one tool call per turn, then a final answer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from uuid import uuid4

from llama_index.core.base.llms.types import ChatMessage, LLMMetadata, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM

Final = Callable[[Sequence[ChatMessage]], str]


class FakeToolCallingLLM(MockFunctionCallingLLM):
    """A mock function-calling LLM (a test double): its n-th reply of a run calls the tool of
    ``plan[n]`` (name, arguments); once every planned call has its tool message, it answers
    ``final(messages)``, streamed or not (LlamaIndex's mock streams one chunk)."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            model_name="fake-tool-caller", is_function_calling_model=True, is_chat_model=True
        )


def fake_tool_caller(
    plan: Sequence[tuple[str, dict[str, Any]]], final: Final
) -> FakeToolCallingLLM:
    """A :class:`FakeToolCallingLLM` following ``plan``, then answering ``final(messages)``."""

    def reply(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        asked = max(i for i, m in enumerate(messages) if m.role == MessageRole.USER)
        done = sum(m.role == MessageRole.TOOL for m in messages[asked:])
        if done < len(plan):
            name, arguments = plan[done]
            call = ToolCallBlock(
                tool_call_id=f"call-{uuid4().hex[:8]}", tool_name=name, tool_kwargs=arguments
            )
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])
        return ChatMessage(role=MessageRole.ASSISTANT, content=final(messages))

    return FakeToolCallingLLM(response_generator=reply, is_chat_model=True)


def tool_messages(messages: Sequence[ChatMessage]) -> list[str]:
    """The text of each tool message, in order."""
    return [str(m.content) for m in messages if m.role == MessageRole.TOOL]

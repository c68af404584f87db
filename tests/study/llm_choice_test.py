"""Which generator the study uses: OpenAI with a key, a clear skip without, the fake on request."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from fairrag_langchain.fakes import FakeCitingChatModel
from fairrag_study.config import StudyConfig
from fairrag_study.phases.generation import chat_model


def _chat_model(config: StudyConfig, answers: bool = False) -> Any:
    """The generation phase's chat model for ``config`` (its generation settings)."""
    return chat_model(config.generation_settings(), answers=answers)


def test_auto_without_key_skips_generation_and_says_why(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    llm, why = _chat_model(StudyConfig(llm="auto"))
    assert llm is None
    assert "OPENAI_API_KEY is not set" in why and "--base-url" in why


def test_auto_with_key_is_gpt_4o_mini_at_temperature_0_1(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-key-for-tests")
    llm, why = _chat_model(StudyConfig(llm="auto", base_url="http://127.0.0.1:9/v1"))
    assert why is None
    assert isinstance(llm, ChatOpenAI)
    assert (llm.model_name, llm.temperature) == ("gpt-4o-mini", 0.1)
    assert str(llm.root_client.base_url).startswith("http://127.0.0.1:9/v1")


def test_named_openai_model_and_fake_and_unknown(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-key-for-tests")
    llm, _ = _chat_model(StudyConfig(llm="openai:gpt-4.1-mini"))
    assert llm.model_name == "gpt-4.1-mini"
    llm, _ = _chat_model(StudyConfig(llm="fake"))
    assert isinstance(llm, FakeCitingChatModel)
    assert _chat_model(StudyConfig(llm="none")) == (None, "--llm none: retrieval only, as asked.")
    with pytest.raises(ValueError, match="--llm 'gpt' is unknown"):
        _chat_model(StudyConfig(llm="gpt"))

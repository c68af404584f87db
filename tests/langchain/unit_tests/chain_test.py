"""make_fair_rag_chain: its output, its inputs, and the default ChatOpenAI path (no call made)."""

from __future__ import annotations

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_openai import ChatOpenAI

from fairrag_core.prompts import render_prompt
from fairrag_langchain import (
    CitedAnswer,
    FairRetriever,
    MissingChatModelError,
    default_chat_model,
    make_fair_rag_chain,
)
from fairrag_langchain.fakes import FakeCitingChatModel
from tests.langchain.doubles import FixedPoolStore, imbalanced_pool


@pytest.fixture
def retriever():
    return FairRetriever(
        group_key="gender", vectorstore=FixedPoolStore(*imbalanced_pool()), protected="female"
    )


@pytest.fixture
def no_openai_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(name, raising=False)


def chat_models_in(chain) -> list:
    return [
        node.data
        for node in chain.get_graph().nodes.values()
        if isinstance(node.data, FakeCitingChatModel | FakeListChatModel | ChatOpenAI)
    ]


def test_output_holds_question_context_answer_citations_metrics(retriever):
    chain = make_fair_rag_chain(retriever, FakeCitingChatModel())
    output = chain.invoke({"question": "Who are role models in computing?", "seed": 3})
    # input keys pass through (here "seed"), as in LangChain's retrieval chains
    assert set(output) == {"question", "seed", "context", "answer", "citations", "metrics"}
    assert output["question"] == "Who are role models in computing?"
    assert len(output["context"]) == 5
    assert isinstance(output["citations"], CitedAnswer)
    assert [c.title for c in output["citations"].citations] == [
        d.metadata["title"] for d in output["context"]
    ]
    assert all(c.valid for c in output["citations"].citations)
    metrics = output["metrics"]
    assert metrics["ranker"] == "representative_stochastic"
    assert metrics["groups"] == [d.metadata["gender"] for d in output["context"]]
    for name in (
        "exposure_share",
        "exposure_disparity",
        "generation_parity",
        "fairness_gap",
        "fairness_gap_magnitude",
        "groundedness",
    ):
        assert name in metrics
    assert metrics["groundedness"] == 1.0


def test_the_prompt_is_the_papers(retriever):
    seen = []

    class Recording(FakeCitingChatModel):
        def reply(self, messages):
            seen.append(messages)
            return super().reply(messages)

    output = make_fair_rag_chain(retriever, Recording()).invoke("Who?")
    (messages,) = seen
    assert len(messages) == 1 and messages[0].type == "human"
    assert messages[0].content == render_prompt("Who?", [d.page_content for d in output["context"]])


def test_seed_and_k_inputs_reach_the_retriever(retriever):
    chain = make_fair_rag_chain(retriever, FakeCitingChatModel())
    a = chain.invoke({"question": "q", "seed": 7, "k": 3})
    b = chain.invoke({"question": "q", "seed": 7, "k": 3})
    assert len(a["context"]) == 3
    assert a["context"] == b["context"]
    passed = chain.invoke({"input": "q", "seed": 7, "k": 3, "user": "u1"})
    assert passed["question"] == passed["input"] == "q" and passed["user"] == "u1"
    assert passed["context"] == a["context"]  # "input" is the question, like "question"
    with pytest.raises(TypeError, match="question"):
        chain.invoke(42)


async def test_async_chain_matches_sync(retriever):
    chain = make_fair_rag_chain(retriever, FakeCitingChatModel())
    sync = chain.invoke({"question": "q", "seed": 1})
    asynchronous = await chain.ainvoke({"question": "q", "seed": 1})
    assert asynchronous["answer"] == sync["answer"]
    drop = {"timestamp"}
    assert {k: v for k, v in asynchronous["metrics"].items() if k not in drop} == {
        k: v for k, v in sync["metrics"].items() if k not in drop
    }


@pytest.mark.parametrize("given", ["store", None, "a retriever's name"])
def test_a_retriever_that_is_no_runnable_is_refused_when_the_chain_is_built(given):
    """A user trial: a vector store passed for its retriever (with group_key=) built a chain
    whose invoke failed with "'InMemoryVectorStore' object has no attribute 'invoke'"."""
    store = FixedPoolStore(*imbalanced_pool())
    wrong = store if given == "store" else given
    with pytest.raises(TypeError, match=r"retriever must be a LangChain retriever .* got "):
        make_fair_rag_chain(wrong, FakeCitingChatModel(), group_key="gender", protected="female")


def test_any_retriever_needs_a_target_given_to_the_chain():
    store = FixedPoolStore(*imbalanced_pool())
    with pytest.raises(ValueError, match="group_key is required"):
        make_fair_rag_chain(store.as_retriever(), FakeCitingChatModel(), protected="female")
    with pytest.raises(ValueError, match="no fairness target"):
        make_fair_rag_chain(store.as_retriever(), FakeCitingChatModel(), group_key="gender")
    chain = make_fair_rag_chain(
        store.as_retriever(search_kwargs={"k": 5}),
        FakeCitingChatModel(),
        protected="female",
        group_key="gender",
    )
    output = chain.invoke("q")
    assert output["metrics"]["exposure_share"] == 0.0
    assert output["metrics"]["ranker"] is None


def test_without_key_the_default_model_is_a_clear_error(retriever, no_openai_env):
    with pytest.raises(MissingChatModelError) as raised:
        make_fair_rag_chain(retriever)
    message = str(raised.value)
    assert "OPENAI_API_KEY" in message
    assert "llm=" in message
    assert "gpt-4o-mini" in message
    assert isinstance(raised.value, ValueError)


def test_with_a_key_the_default_model_is_gpt_4o_mini_at_0_1(retriever, no_openai_env, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-key-for-tests")
    (model,) = chat_models_in(make_fair_rag_chain(retriever))
    assert isinstance(model, ChatOpenAI)
    assert model.model_name == "gpt-4o-mini"
    assert model.temperature == 0.1


def test_base_url_argument_and_environment_are_honoured(retriever, no_openai_env, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-key-for-tests")
    (model,) = chat_models_in(make_fair_rag_chain(retriever, base_url="http://localhost:9/v1"))
    assert str(model.root_client.base_url).startswith("http://localhost:9/v1")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8/v1")
    (model,) = chat_models_in(make_fair_rag_chain(retriever))
    assert str(model.root_client.base_url).startswith("http://localhost:8/v1")


def test_a_chat_openai_built_by_the_user_is_accepted_unchanged(retriever, no_openai_env):
    llm = ChatOpenAI(model="gpt-4o-mini", temperature=0.1, api_key="sk-fake-key-for-tests")
    (model,) = chat_models_in(make_fair_rag_chain(retriever, llm))
    assert model is llm


def test_default_model_can_name_another_openai_model(no_openai_env, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-key-for-tests")
    model = default_chat_model(model="gpt-4.1-mini")
    assert model.model_name == "gpt-4.1-mini"
    assert model.temperature == 0.1


def test_chain_audits_with_the_rankers_exposure_model():
    store = FixedPoolStore(*imbalanced_pool())
    retriever = FairRetriever(
        vectorstore=store,
        group_key="gender",
        protected="female",
        seed=0,
        ranker_params={"exposure": "rbp"},
    )
    output = make_fair_rag_chain(retriever, FakeCitingChatModel()).invoke("q")
    groups = output["metrics"]["groups"]
    weights = [0.8**i for i in range(len(groups))]
    expected = sum(w for w, g in zip(weights, groups, strict=True) if g == "female") / sum(weights)
    assert output["metrics"]["exposure_share"] == pytest.approx(expected)

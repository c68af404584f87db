"""Issue 32: an agent's record when its run fails after searching, and the handler's stated
source id base (fast: a fixed pool, fake tool-calling model)."""

from __future__ import annotations

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import create_retriever_tool
from langgraph.errors import GraphRecursionError

from fairrag_langchain import FairnessCallbackHandler, FairRetriever
from fairrag_langchain.fakes import FakeSearchingChatModel
from tests.langchain.doubles import FixedPoolStore, imbalanced_pool


def test_an_agent_that_fails_after_searching_writes_one_record_with_its_error():
    retriever = FairRetriever(
        vectorstore=FixedPoolStore(*imbalanced_pool()), group_key="gender", protected="female"
    )
    tool = create_retriever_tool(retriever, "search", "Search biographies.")
    handler = FairnessCallbackHandler.from_retriever(retriever)
    agent = create_agent(FakeSearchingChatModel(searches=[["a"], ["b"], ["c"], ["d"]]), [tool])
    with pytest.raises(GraphRecursionError):
        agent.invoke(
            {"messages": [HumanMessage("who?")]},
            {"callbacks": [handler], "recursion_limit": 4},
        )
    [record] = handler.records
    assert record["error"].startswith("GraphRecursionError")
    assert "answer" not in record and record["query"] == "who?"
    assert len(record["framework"]["searches"]) >= 1 and record["exposure_share"] is not None


def test_the_source_id_base_is_stated_never_guessed():
    with pytest.raises(ValueError, match="source_id_base must be 0"):
        FairnessCallbackHandler(group_key="gender", protected="female", source_id_base=2)
    handler = FairnessCallbackHandler(group_key="gender", protected="female", source_id_base=1)
    assert handler.source_id_base == 1

"""LangChain's standard retriever integration suite, run on FairRetriever over the real Chroma."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from fairrag_langchain import FairRetriever

pytestmark = pytest.mark.integration


class TestFairRetrieverStandard(RetrieversIntegrationTests):
    store: Any = None

    @pytest.fixture(autouse=True)
    def _real_chroma(self, trec_store) -> None:
        # The suite builds retrievers from class-level params; the store is a session fixture.
        type(self).store = trec_store

    @property
    def retriever_constructor(self) -> type[FairRetriever]:
        return FairRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {
            "vectorstore": self.store,
            "ranker": "representative_stochastic",
            "group_key": "gender",
            "protected": "female",
            "seed": 0,
        }

    @property
    def retriever_query_example(self) -> str:
        return "Who are influential people in medicine?"

"""Every LangChain private attribute the adapter reads (``fairrag_langchain/_private.py``, the
only module that reads one) is where it expects, on real stores of the supported versions."""

from __future__ import annotations

from importlib import metadata

import pytest
from langchain_core.vectorstores import InMemoryVectorStore

from fairrag_langchain import _private as private
from tests.langchain.doubles import CosineFixedPoolStore, FixedPoolStore, imbalanced_pool


def test_the_installed_langchain_core_is_a_supported_version():
    major = metadata.version("langchain-core").split(".")[0]
    assert major in private.SUPPORTED, f"re-check fairrag_langchain/_private.py for {major}"


def test_a_stores_relevance_function_is_read_or_refused_as_langchain_refuses():
    cosine = CosineFixedPoolStore(*imbalanced_pool())
    assert private.relevance_score_fn(cosine)(0.25) == pytest.approx(0.75)
    with pytest.raises(NotImplementedError):
        private.relevance_score_fn(FixedPoolStore(*imbalanced_pool()))


def test_a_store_that_scores_relevance_itself_is_told_apart():
    assert not private.overrides_relevance_search(FixedPoolStore)

    class OwnRelevance(FixedPoolStore):
        def _similarity_search_with_relevance_scores(self, query, k=4, **kwargs):
            return []

    assert private.overrides_relevance_search(OwnRelevance)
    assert isinstance(private.overrides_relevance_search(InMemoryVectorStore), bool)

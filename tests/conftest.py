"""Session fixtures: the real TREC subset, the real embedding model, a real embedded Chroma."""

from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import settings

# Haystack would send usage events to PostHog (read when haystack is first imported): no network.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

from tests.chroma_pool import SUBSET_TOPICS, build_chroma_pool, load_subset

# No per-example deadline: speed is measured by benchmarks, not asserted by timed tests.
settings.register_profile("fairrag", deadline=None)
settings.load_profile("fairrag")


@pytest.fixture(scope="session", autouse=True)
def _own_cache_folder(tmp_path_factory):
    """The study's default cache (``$FAIRRAG_CACHE``, else ``~/.cache/fairrag``) is a folder of
    this test session, for this process and every child it starts: a test that leaves the cache
    folder unset never reads or writes the user's indexes, exports and answers."""
    before = os.environ.get("FAIRRAG_CACHE")
    os.environ["FAIRRAG_CACHE"] = str(tmp_path_factory.mktemp("fairrag-cache"))
    yield
    if before is None:
        os.environ.pop("FAIRRAG_CACHE", None)
    else:
        os.environ["FAIRRAG_CACHE"] = before


@pytest.fixture(autouse=True)
def _each_test_a_new_process():
    """What one test's ledger clients saw (stream marks, an open breaker of a Redis server
    whose port a later test may get again, adds left to settle) is forgotten when the test
    ends, as if each test were a process (docs/SPEC.md item 6: clients of one store in a
    process share that memory)."""
    yield
    from fairrag_core.ledger.base import forget_shared_memory

    forget_shared_memory()


@pytest.fixture(scope="session")
def subset_documents():
    """A real, imbalanced TREC subset (3 topics x (20 female + 80 male))."""
    return load_subset()


@pytest.fixture(scope="session")
def subset_topics():
    return SUBSET_TOPICS


@pytest.fixture(scope="session")
def sentence_model():
    """The real all-MiniLM-L6-v2 (the packaged copy; nothing is downloaded)."""
    from fairrag_study.embedding import load_sentence_transformer

    return load_sentence_transformer()


@pytest.fixture(scope="session")
def chroma_client(tmp_path_factory):
    """An embedded, persistent Chroma client in a temporary folder."""
    import chromadb

    return chromadb.PersistentClient(path=str(tmp_path_factory.mktemp("chroma")))


@pytest.fixture(scope="session")
def chroma_collection(chroma_client, subset_documents, sentence_model):
    """The subset indexed once per session (cosine space, our embeddings)."""
    return build_chroma_pool(chroma_client, "trec-subset", subset_documents, sentence_model)


@pytest.fixture
def unique_name():
    return f"t-{uuid.uuid4().hex[:12]}"

"""Test helper shared by both adapters' tests: a real Chroma pool over a real TREC subset.

The subset is deliberately imbalanced (about 20% female, like the natural corpus) so that fair
re-ranking has something to correct. Embeddings come from the real all-MiniLM-L6-v2.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from fairrag_study.data import DATA_ENV, CorpusDocument, load_documents, sample_documents
from fairrag_study.index import embed_missing, open_collection

SUBSET_TOPICS = ("Computer science", "Medicine", "Tennis")
SUBSET_PER_GENDER = {"female": 20, "male": 80}
SUBSET_SEED = 7


def data_path_or_skip() -> Path:
    """``$FAIRRAG_DATA``; skip with how-to when absent, but fail under ``CI=true``."""
    value = os.environ.get(DATA_ENV)
    if value and Path(value).is_file():
        return Path(value)
    reason = (
        f"TREC gender data not found: set {DATA_ENV} to trec_gender_2022.csv "
        "(`make test` does so when ../shared/data/trec_gender_2022.csv exists; elsewhere "
        "`fairrag study` downloads it, see README)"
    )
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def sample_subset(
    documents: Sequence[CorpusDocument],
    topics: Sequence[str] = SUBSET_TOPICS,
    per_gender: dict[str, int] = SUBSET_PER_GENDER,
    seed: int = SUBSET_SEED,
) -> list[CorpusDocument]:
    """Per topic, ``per_gender[g]`` documents of each gender (each document once), seeded."""
    return sample_documents(documents, {topic: per_gender for topic in topics}, seed)


def build_chroma_pool(client, name: str, documents: Sequence[CorpusDocument], model):
    """A cosine Chroma collection ``name`` holding ``documents`` embedded with ``model``."""
    collection = open_collection(client, name)
    embed_missing(collection, documents, model)
    return collection


def load_subset() -> list[CorpusDocument]:
    return sample_subset(load_documents(data_path_or_skip()))

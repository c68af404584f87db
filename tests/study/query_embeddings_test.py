"""The study embeds its questions once per run: the trials and the many-rankings phase share one
query-embedding cache per model (issue 37: a warm run embedded its 80 questions twice)."""

from __future__ import annotations

import numpy as np

from fairrag_study.phases.index import query_embeddings as _query_embeddings


class CountingFakeModel:
    """A fake embedding model (no network, no weights) counting the texts it encodes."""

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def encode(self, texts, normalize_embeddings=True, batch_size=64):
        self.encoded.extend(texts)
        return np.ones((len(texts), 3))


def test_trials_and_many_rankings_share_one_cache_per_model() -> None:
    model = CountingFakeModel()
    questions = [f"Who are notable people in topic {i}?" for i in range(80)]
    trials_phase = _query_embeddings(model)
    trials_phase.prefill(questions)
    many_rankings_phase = _query_embeddings(model)
    many_rankings_phase.prefill(questions)
    assert many_rankings_phase is trials_phase
    assert sorted(model.encoded) == sorted(questions)  # each question embedded once
    assert _query_embeddings(CountingFakeModel()) is not trials_phase  # another model, its own

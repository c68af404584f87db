"""Fairness over a stream: the study's 80 questions as one stream per ranker (docs/SPEC.md item 6).

Run (after ``make study`` has built the index; nothing is embedded or indexed here):
``.venv/bin/python benchmarks/bench_amortized.py [--grid 10:8,20:6] [--orders 20]``.

The 80 pools are the study's own: its corpus, its cached Chroma index, its 80 (scenario, topic)
trials with their per-trial seeds, its nDCG@5 relevance (a document is relevant when it belongs
to the trial's topic). Each ranker ranks the 80 pools in trial order, one ranking each; the
amortized ranker carries one in-memory ledger through the stream. Printed per ranker: the
amortized disparity ``|Σ_t ES_female,t W_t / Σ_t W_t − 0.5|`` (docs/SPEC.md, "Metrics over many
rankings"), the mean per-query exposure disparity, the mean nDCG@5 and its loss against
standard. Goals (issue 13): amortized disparity of ``amortized`` < 0.02, and its nDCG@5 loss at
most half of representative_stochastic's. ``--orders N`` repeats the streams in N shuffled
trial orders (with other seeds) to show how much one order's figure depends on luck.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from fairrag_core import available_rankers, make_ranker, position_weights
from fairrag_core.metrics import amortized_disparity, exposure_disparity, exposure_share
from fairrag_study.data import (
    build_corpus,
    default_cache_dir,
    load_documents,
    locate_data,
    study_topics,
)
from fairrag_study.dataset import TREC_GENDER
from fairrag_study.embedding import load_sentence_transformer
from fairrag_study.index import corpus_fingerprint, index_folder
from fairrag_study.plan import Trial, plan_trials
from fairrag_study.study import StudyConfig, _open_index, _trial_record

RANKERS = tuple(available_rankers())
GOAL_DISPARITY = 0.02

PROTECTED, TARGET_SHARE = TREC_GENDER.protected, TREC_GENDER.target_share


@dataclass(frozen=True)
class Pool:
    """One trial's candidate pool as the rankers see it, with what nDCG@5 needs."""

    trial: Trial
    scores: np.ndarray
    groups: list[str | None]
    metadatas: list[dict]


def study_pools(config: StudyConfig) -> tuple[list[Pool], Counter]:
    """The study's 80 pools (``pool_size`` candidates each) from its cached index."""
    documents = load_documents(locate_data(config.data, cache_dir=config.cache_dir))
    corpus = build_corpus(
        documents, config.corpus, seed=config.corpus_seed, per_group=config.per_group
    )
    folder = index_folder(
        config.cache_dir or default_cache_dir(),
        config.corpus,
        config.model,
        corpus_fingerprint(corpus, config.model),
    )
    if not folder.exists():
        sys.exit(f"no study index at {folder}: run `make study` (or `fairrag study`) first")
    model = load_sentence_transformer(config.model)
    client, _, name, _ = _open_index(config, corpus, model, None, print)  # verified, as the study
    collection = client.get_collection(name)
    if collection.count() != len(corpus):
        sys.exit(
            f"the study index at {folder} holds {collection.count()} of {len(corpus)} documents: "
            "let `make study` finish building it first"
        )
    trials = plan_trials(study_topics(documents), config.trials, config.seed)
    vectors = model.encode([t.question for t in trials], normalize_embeddings=True).tolist()
    found = collection.query(
        query_embeddings=vectors, n_results=config.pool_size, include=["distances", "metadatas"]
    )
    pools = []
    for trial, distances, metadatas in zip(
        trials, found["distances"], found["metadatas"], strict=True
    ):
        scores = 1.0 - np.asarray(distances)  # docs/SPEC.md: Chroma cosine relevance 1 - d
        groups = [m.get("gender") for m in metadatas]
        pools.append(Pool(trial, scores, groups, [dict(m) for m in metadatas]))
    topic_size = Counter(topic for doc in corpus for topic in doc.topics)
    return pools, topic_size


def run_stream(
    name: str, pools: list[Pool], topic_size: Counter, k: int, **params: float
) -> dict[str, float]:
    """One stream: every pool once, in order; the figures of docs/SPEC.md for it."""
    plain = name in ("standard", "stochastic")
    fairness: dict[str, str] = {} if plain else {"protected": PROTECTED}
    ranker = make_ranker(name, seed=2026, **fairness, **params)
    weights = position_weights(k)
    stream, shares, disparities, ndcgs, masses = [], [], [], [], []
    for pool in pools:
        ranking = ranker.rank(pool.scores, pool.groups, k, rng=pool.trial.seed).tolist()
        shown = [pool.groups[i] for i in ranking]
        stream.append(shown)
        shares.append(exposure_share(shown, PROTECTED))
        disparities.append(
            exposure_disparity(shown, protected=PROTECTED, target_share=TARGET_SHARE)
        )
        masses.append(math.fsum(weights[: len(ranking)]))
        docs = [SimpleNamespace(metadata=pool.metadatas[i]) for i in ranking]
        ndcgs.append(_trial_record({}, name, pool.trial, docs, topic_size, k)["ndcg_at_k"])
    amortized_share = math.fsum(s * w for s, w in zip(shares, masses, strict=True)) / math.fsum(
        masses
    )
    disparity = amortized_disparity(stream, protected=PROTECTED, target_share=TARGET_SHARE)
    assert math.isclose(disparity, abs(amortized_share - TARGET_SHARE), abs_tol=1e-12)
    return {
        "amortized_disparity": disparity,
        "stream_share": amortized_share,
        "disparity": float(np.mean(disparities)),
        "ndcg": float(np.mean(ndcgs)),
    }


def shuffled(pools: list[Pool], seed: int) -> list[Pool]:
    """The pools in another order, each with another per-trial seed."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pools))
    reseeded = []
    for i in order.tolist():
        pool = pools[i]
        trial = Trial(**{**pool.trial.__dict__, "seed": int(rng.integers(2**32))})
        reseeded.append(Pool(trial, pool.scores, pool.groups, pool.metadatas))
    return reseeded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--grid", default="", help="also run amortized with these gain:alpha pairs (5:4,20:8,...)"
    )
    parser.add_argument("--orders", type=int, default=0, help="shuffled trial orders to add")
    args = parser.parse_args()
    config = StudyConfig(progress=False)
    pools, topic_size = study_pools(config)
    print(f"{len(pools)} pools of {config.pool_size} from the study index, k = {config.k}")
    runs: list[tuple[str, dict[str, float]]] = [(name, {}) for name in RANKERS]
    runs += [
        ("amortized", {"gain": float(g), "alpha": float(a)})
        for g, a in (x.split(":") for x in args.grid.split(",") if x)
    ]
    results = {}
    print(
        f"{'ranker':<34}{'amortized disp.':>16}{'stream share':>14}{'per-query disp.':>17}"
        f"{'nDCG@5':>9}{'loss':>8}"
    )
    for name, params in runs:
        label = name + "".join(f" {key}={value:g}" for key, value in params.items())
        results[label] = run_stream(name, pools, topic_size, config.k, **params)
        base = results["standard"]["ndcg"]
        r = results[label]
        print(
            f"{label:<34}{r['amortized_disparity']:>16.4f}{r['stream_share']:>14.4f}"
            f"{r['disparity']:>17.4f}{r['ndcg']:>9.4f}{base - r['ndcg']:>8.4f}"
        )
    loss_rs = results["standard"]["ndcg"] - results["representative_stochastic"]["ndcg"]
    loss_am = results["standard"]["ndcg"] - results["amortized"]["ndcg"]
    disparity = results["amortized"]["amortized_disparity"]
    print(
        f"goals: amortized disparity {disparity:.4f} < {GOAL_DISPARITY}: "
        f"{'yes' if disparity < GOAL_DISPARITY else 'NO'}; nDCG@5 loss {loss_am:.4f} <= half of "
        f"representative_stochastic's {loss_rs:.4f}: {'yes' if loss_am <= loss_rs / 2 else 'NO'}"
    )
    if args.orders:
        print(
            f"\nover {args.orders} shuffled trial orders "
            "(mean / max amortized disparity, mean nDCG@5):"
        )
        for name, params in runs:
            label = name + "".join(f" {key}={value:g}" for key, value in params.items())
            figures = [
                run_stream(name, shuffled(pools, 1000 + i), topic_size, config.k, **params)
                for i in range(args.orders)
            ]
            amortized = [f["amortized_disparity"] for f in figures]
            print(
                f"{label:<34}{np.mean(amortized):>10.4f}{max(amortized):>10.4f}"
                f"{np.mean([f['ndcg'] for f in figures]):>10.4f}"
            )


if __name__ == "__main__":
    main()

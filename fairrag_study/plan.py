"""The trial plan: which (scenario, topic) questions every ranker answers, with per-trial seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fairrag_core.prompts import SCENARIOS

__all__ = ["Trial", "plan_trials", "trial_seed"]


@dataclass(frozen=True)
class Trial:
    """One question of the study; every ranker answers the same trials."""

    index: int
    scenario: int
    """1-based scenario number (docs/SPEC.md, "Scenarios")."""
    topic: str
    question: str
    seed: int
    """Seed of the stochastic rankers for this trial."""


def trial_seed(study_seed: int, index: int) -> int:
    """A per-trial seed derived from the study seed (independent streams per trial)."""
    return int(np.random.SeedSequence([study_seed, index]).generate_state(1)[0])


def plan_trials(
    topics: Sequence[str],
    n_trials: int = 80,
    seed: int = 2026,
    templates: Sequence[str] = SCENARIOS,
) -> list[Trial]:
    """``n_trials`` trials: ``ceil(n / S)`` topics drawn with ``seed``, each with the ``S``
    scenario ``templates`` (default the paper's four, docs/SPEC.md "Scenarios").

    The paper's 80 trials are 20 topics x 4 scenarios. Topics are drawn without replacement
    from ``topics`` (sorted first, so the draw depends only on the set and the seed); asking for
    more topics than exist is an error.
    """
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ValueError(f"n_trials must be an integer >= 1, got {n_trials!r}")
    pool = sorted(set(topics))
    needed = math.ceil(n_trials / len(templates))
    if needed > len(pool):
        raise ValueError(
            f"{n_trials} trials need {needed} topics but the corpus has {len(pool)}; "
            f"ask for at most {len(pool) * len(templates)} trials"
        )
    rng = np.random.default_rng(seed)
    drawn = [pool[i] for i in rng.choice(len(pool), size=needed, replace=False).tolist()]
    pairs = [(scenario, topic) for topic in drawn for scenario in range(1, len(templates) + 1)]
    return [
        Trial(i, scenario, topic, templates[scenario - 1].format(topic=topic), trial_seed(seed, i))
        for i, (scenario, topic) in enumerate(pairs[:n_trials])
    ]

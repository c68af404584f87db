"""The trial plan: which (scenario, topic) questions every ranker answers, with per-trial seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fairrag_core.prompts import SCENARIOS

__all__ = ["PAPER_TRIALS", "Trial", "plan_trials", "trial_seed"]


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


PAPER_TRIALS = 80
"""The paper's trial count (20 topics x 4 scenarios): its topic draw opens every plan."""


def plan_trials(
    topics: Sequence[str],
    n_trials: int = PAPER_TRIALS,
    seed: int = 2026,
    templates: Sequence[str] = SCENARIOS,
) -> list[Trial]:
    """The first ``n_trials`` trials of the study's one ordered plan (docs/SPEC.md, "Trials").

    The plan: topics in one order drawn with ``seed``, each with the ``S`` scenario
    ``templates`` (default the paper's four), trial ``i`` seeded :func:`trial_seed` ``(seed,
    i)``. The topic order opens with the draw of the paper's 80 trials, ``ceil(80 / S)``
    topics drawn without replacement (20 for the paper's four scenarios), then every other
    topic in a random order from the same generator. So the plan of ``n`` trials is a prefix
    of the plan of any larger ``n`` (same questions, same seeds: a pilot's answers are reused
    by the full run), and the paper's 80 are the same 80 as before this rule.

    ``topics`` are sorted first (the draw depends only on the set and the seed); asking for
    more trials than topics x scenarios is an error.
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
    head = min(math.ceil(PAPER_TRIALS / len(templates)), len(pool))
    first = rng.choice(len(pool), size=head, replace=False).tolist()
    rest = sorted(set(range(len(pool))) - set(first))
    order = first + [rest[i] for i in rng.permutation(len(rest)).tolist()]
    drawn = [pool[i] for i in order[:needed]]
    pairs = [(scenario, topic) for topic in drawn for scenario in range(1, len(templates) + 1)]
    return [
        Trial(i, scenario, topic, templates[scenario - 1].format(topic=topic), trial_seed(seed, i))
        for i, (scenario, topic) in enumerate(pairs[:n_trials])
    ]

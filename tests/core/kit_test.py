"""fairrag_core.kit pieces added for the adapters (the rest is tested through both adapters)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from fairrag_core.kit import RankerState


@dataclass
class Component:
    """The six fields a fair component carries, and its state."""

    ranker: str = "representative_stochastic"
    protected: Any = "female"
    target_share: float | None = None
    target: Any = None
    seed: int | None = 5
    ranker_params: dict[str, Any] = field(default_factory=dict)
    state: RankerState | None = None

    def next_seed(self) -> int:
        self.state = RankerState.current(self.state, self)
        return self.state.query_seed()


def test_copies_of_a_component_get_their_own_state_with_the_same_seed_sequence():
    original = Component()
    first = original.next_seed()
    for duplicate in (copy.deepcopy(original), copy.copy(original)):
        assert duplicate.next_seed() == first  # a fresh generator, not the original's
        assert duplicate.state is not original.state
    assert original.next_seed() != first  # the original's own sequence went on

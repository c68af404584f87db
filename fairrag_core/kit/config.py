"""The ranker a fair component's fields describe, kept in step with them, and per-query seeds.

docs/SPEC.md, "Adapters" → Ranker configuration and Seeds. A LangChain retriever or a LlamaIndex
postprocessor is a pydantic model whose fields (``ranker``, ``protected``, ``target_share``,
``target``, ``seed``, ``ranker_params``) can be changed after construction, by assignment or by
``model_copy(update=...)``, and copied with ``copy.deepcopy``. :class:`RankerState` holds the
core ranker built from one :class:`RankerConfig`; :meth:`RankerState.current` rebuilds it when the
fields no longer equal that configuration or when the component is a copy, so the ranking, the
serialised fields and the audit always describe one state, and copies never share a generator.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import weakref
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..audit import FairnessAuditor, exposure_name, json_label
from ..exposure import ExposureModel
from ..ledger.memory import MemoryLedger
from ..rankers import RANKERS, configure_ranker, make_ranker, ranker_parameters
from ..ranking import Ranker
from ..reranking import Reranking, rerank
from ..target import Target
from ..validation import as_rng, check_nesting

__all__ = [
    "LEDGER_FIELDS",
    "ComponentLedger",
    "RankerConfig",
    "RankerState",
    "check_group_key",
    "describe_ranker",
    "draw_query_seed",
    "ledger_location",
    "plain",
    "ranker_from_description",
    "refuse_bools",
    "target_json",
    "target_of_json",
]

QUERY_SEED_BOUND = 2**53
"""Drawn query seeds are ints in ``[0, 2**53)``: exact in JSON, even read as a double."""
SEED_LIMIT = 2**64
"""A caller's seed may be any int in ``[0, 2**64)`` (numpy's ``default_rng`` takes them all)."""

_FAIRNESS_ARGS = ("protected", "target_share", "target", "seed")
LEDGER_FIELDS = ("ledger", "ledger_key")
"""Component fields passed to the ranker as parameters (``ranker="amortized", ledger=...``)."""
_STATE_FIELDS = ("ranker", *_FAIRNESS_ARGS, "ranker_params", "exposure", *LEDGER_FIELDS)
"""The fields a :class:`RankerConfig` is read from (the component contract's config fields)."""


def _field_values(component: Any) -> tuple[Any, ...]:
    """The component's values of :data:`_STATE_FIELDS` as they are now (None: not there)."""
    return tuple(getattr(component, name, None) for name in _STATE_FIELDS)


def _snapshot(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """``values`` with their dicts and lists copied: what an in-place change is compared to."""
    return tuple(
        dict(value)
        if isinstance(value, dict)
        else list(value)
        if isinstance(value, list)
        else value
        for value in values
    )


@dataclass(frozen=True)
class RankerConfig:
    """What a component's fields say about its ranker (compared by value, never mutated).

    ``ranker`` is a core ranker name or a ready :class:`~fairrag_core.Ranker`; the others are
    the fields of the same names (``params`` = ``ranker_params``), copied so that a later
    in-place change of the component's dict is seen as a change.
    """

    ranker: str | Ranker
    protected: Hashable | None = None
    target_share: float | None = None
    target: Any = None
    seed: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, component: Any) -> RankerConfig:
        """The configuration of any object with the six fields (the adapters' components).

        A component's ``exposure``, ``ledger`` and ``ledger_key`` fields, when set, are
        parameters of the ranker (``ledger``: the amortized ranker's, docs/SPEC.md item 6) like
        those in ``ranker_params``; one given both ways is an error.
        The component's own in-memory ledger (:class:`ComponentLedger`, or ``"memory"``) is
        passed only to a ranker that takes a ledger and gives way to a ``ledger`` in
        ``ranker_params``; a ledger the user gave never does (an error names it).
        """
        target = component.target
        params = dict(component.ranker_params or {})
        exposure = getattr(component, "exposure", None)
        if exposure is not None:
            if "exposure" in params:
                raise ValueError("exposure is given twice: as a field and in ranker_params")
            params["exposure"] = exposure
        for name in LEDGER_FIELDS:
            value = getattr(component, name, None)
            if value is None:
                continue
            if name == "ledger" and _is_own_ledger(value):
                if "ledger" in params or not _takes_ledger(component.ranker):
                    continue
            if name in params:
                raise ValueError(f"{name} is given twice: as a field and in ranker_params")
            params[name] = value
        return cls(
            ranker=component.ranker,
            protected=component.protected,
            target_share=component.target_share,
            target=dict(target) if isinstance(target, Mapping) else target,
            seed=component.seed,
            params=params,
        )

    def build(self) -> Ranker:
        """The core ranker (:func:`fairrag_core.configure_ranker`); bad values fail here.

        A ready ``Ranker`` is used as it is: then every other field must be left unset, since
        a field that would be silently ignored is refused.
        """
        if isinstance(self.ranker, Ranker):
            given = [name for name in _FAIRNESS_ARGS if getattr(self, name) is not None]
            given += ["ranker_params / ledger"] if self.params else []
            if given:
                raise ValueError(
                    f"ranker is a ready {type(self.ranker).__name__}, which carries its own "
                    f"configuration; {', '.join(given)} would be ignored: set them on the "
                    "ranker, or give the ranker by name"
                )
            return self.ranker
        return configure_ranker(
            self.ranker,
            protected=self.protected,
            target_share=self.target_share,
            target=self.target,
            seed=self.seed,
            params=dict(self.params),
        )


def check_group_key(value: Any, name: str = "group_key") -> str:
    """``value`` when it names a metadata field (a string that is not blank), else a ValueError
    naming ``name``: every component and handler checks its group key here."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"{name} must name the metadata field holding each document's group, "
            f"e.g. 'gender'; got {value!r}"
        )
    return value


def refuse_bools(value: Any, name: str) -> Any:
    """``value`` unchanged, unless it is a bool where a number is expected, or a mapping with a
    bool share (a ValueError naming ``name``): pydantic's lax mode would read ``True`` as 1, a
    share of 1.0 or a seed of 1. The adapters' number fields and ``target`` call it."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a number, not the bool {value!r}")
    if isinstance(value, Mapping) and any(isinstance(v, (bool, np.bool_)) for v in value.values()):
        raise ValueError(f"{name} shares must be numbers, not bools: {dict(value)!r}")
    return value


class ComponentLedger(MemoryLedger):
    """The in-memory ledger a component makes for its amortized ranker when given none.

    Its ``ledger`` field holds it (serialised as ``"memory"``), so field changes, copies and
    LangChain's per-call components (``configurable_fields``, built from the fields) keep one
    stream. Wherever it is passed it stays a default: used only by a named ranker that takes a
    ledger (switching to another ranker and back keeps the stream) and giving way to a
    ``ledger`` in ``ranker_params`` (docs/SPEC.md, "Adapters" → Ranker configuration).
    """


_OWN_LEDGER_LOCK = threading.Lock()


def _is_adopted(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and value == "memory")


def _is_own_ledger(value: Any) -> bool:
    return isinstance(value, ComponentLedger) or (isinstance(value, str) and value == "memory")


def adopt_own_ledger(component: Any) -> None:
    """Give ``component`` its own :class:`ComponentLedger` when its ranker takes a ledger and
    it names none (``ledger`` None or ``"memory"``, no ``ledger`` in ``ranker_params``)."""
    if not hasattr(component, "ledger") or not _takes_ledger(component.ranker):
        return
    if "ledger" in (component.ranker_params or {}) or _is_adopted(component.ledger):
        return  # every call of an amortized component passes here: no lock once adopted
    with _OWN_LEDGER_LOCK:  # concurrent first calls adopt one ledger, not one each
        if not _is_adopted(component.ledger):
            vars(component)["ledger"] = ComponentLedger()  # no validation: it is the default


def _takes_ledger(ranker: Any) -> bool:
    """Whether the ranker named ``ranker`` takes a ``ledger`` parameter (an unknown name: no)."""
    cls = RANKERS.get(ranker) if isinstance(ranker, str) else None
    return cls is not None and "ledger" in ranker_parameters(cls)


def ranker_params(ranker: Ranker) -> dict[str, Any]:
    """The ranker-specific parameters (``alpha``, ``gain``, ...) it was built with.

    Read from the attributes named like the keyword parameters of its class's ``__init__``
    (every core ranker stores each parameter under its own name).
    """
    signature = inspect.signature(type(ranker).__init__)
    params: dict[str, Any] = {}
    for name, parameter in signature.parameters.items():
        if parameter.kind is not inspect.Parameter.KEYWORD_ONLY or name in _FAIRNESS_ARGS:
            continue
        if name in ("exposure",) or not hasattr(ranker, name):
            continue
        value = getattr(ranker, name)
        if isinstance(value, (str, int, float, bool)) or value is None:
            params[name] = value
        else:
            params[name] = ledger_location(value)
    return params


def ledger_location(value: Any) -> str:
    """A ledger by its ``location`` (a path or URL without a password), a path as its text
    (what :func:`~fairrag_core.ledger.make_ledger` reopens), anything else by repr."""
    if isinstance(value, os.PathLike):
        return os.fsdecode(value)
    location = getattr(value, "location", None)
    return location if isinstance(location, str) else repr(value)


def target_json(target: Target | Mapping[Hashable, Any]) -> dict[str, float] | list[list[Any]]:
    """A target as a configuration writes it (a component's ``target``, a ranker description):
    ``{group: share}`` when every label is a string (the others bucket as ``"OTHERS"``), else
    ``[[label, share], ...]`` with JSON labels (:func:`~fairrag_core.audit.json_label`): JSON
    and YAML keys are strings, so a dict would turn the label ``0`` into ``"0"``, another
    group (docs/SPEC.md, "Adapters" → Ranker configuration)."""
    shares = target.as_dict() if isinstance(target, Target) else dict(target)
    pairs = [[json_label(group), plain(share)] for group, share in shares.items()]
    if all(isinstance(label, str) for label, _ in pairs):
        return {str(label): share for label, share in pairs}
    return pairs


def target_of_json(value: Any, name: str = "target") -> Any:
    """A target written by :func:`target_json`: ``[[label, share], ...]`` read as the mapping
    (each item a pair, each label once); any other value as it is."""
    if not isinstance(value, (list, tuple)):
        return value
    pairs: dict[Hashable, Any] = {}
    for item in value:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise ValueError(
                f"{name} as a list holds [label, share] pairs, got {item!r:.80} among them"
            )
        label, share = item
        if not isinstance(label, Hashable) or label in pairs:
            raise ValueError(f"{name} names the label {label!r:.80} twice or cannot key it")
        pairs[label] = share
    return pairs


def plain(value: Any) -> Any:
    """``value`` as a configuration writes it: a numpy number or string as Python's (YAML and
    JSON writers refuse numpy's), an exposure model by its name, a ledger by its location."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, str):
        return str(value)
    if isinstance(value, ExposureModel):
        return exposure_name(value)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    if isinstance(value, os.PathLike) or isinstance(getattr(value, "location", None), str):
        return ledger_location(value)
    return value


def describe_ranker(ranker: Ranker) -> dict[str, Any]:
    """A ranker's whole configuration, JSON-ready: what serialising a component writes."""
    target = ranker.target
    return {
        "name": ranker.name,
        "target": None if target is None else target_json(target),
        "protected": None if target is None else json_label(target.protected),
        "seed": ranker.seed,
        "exposure_model": exposure_name(ranker.exposure),
        "params": ranker_params(ranker),
    }


DESCRIPTION_KEYS = frozenset({"name", "target", "protected", "seed", "exposure_model", "params"})
"""The keys of :func:`describe_ranker`'s dict."""


DESCRIPTION_DEPTH = 16
"""The deepest nesting of dicts and lists a ranker description may hold (a real one: 3)."""


def ranker_from_description(description: Mapping[str, Any]) -> Ranker:
    """The ranker :func:`describe_ranker` described (what serialising a component with a ready
    ``Ranker`` writes): the same name, target, protected group, seed, exposure model and
    parameters. A ledger is reopened from its location (a path or URL; ``"memory"``: a new
    in-memory ledger, since a process's memory does not travel in a description). Keys other
    than :data:`DESCRIPTION_KEYS` are refused, naming them, and so is one nested deeper than
    :data:`DESCRIPTION_DEPTH` (a ``ValueError``, where its repr would raise ``RecursionError``)."""
    check_nesting(
        description, DESCRIPTION_DEPTH, "a ranker description (describe_ranker's: 3 deep)"
    )
    unknown = sorted(set(description) - DESCRIPTION_KEYS)
    if unknown or "name" not in description:
        raise ValueError(
            f"a ranker description has the keys {sorted(DESCRIPTION_KEYS)} (name required), "
            f"got {sorted(description)}"
        )
    target = target_of_json(description.get("target"))  # "OTHERS" read by make_target
    params = dict(description.get("params") or {})
    return make_ranker(
        description["name"],
        target=target,
        protected=description.get("protected") if target is not None else None,
        seed=description.get("seed"),
        exposure=description.get("exposure_model") or "dcg",
        **params,
    )


def draw_query_seed(seed: Any, generator: np.random.Generator) -> int:
    """The seed of one query's ranking (docs/SPEC.md, "Adapters" → Seeds).

    ``seed`` is the caller's per-query seed: an int in ``[0, 2**64)`` is used as is, a
    ``numpy.random.Generator`` gives one draw (so it can still be written in the record); None
    draws one from ``generator``, the component's own.
    """
    if seed is None:
        return int(generator.integers(QUERY_SEED_BOUND))
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(QUERY_SEED_BOUND))
    return int(check_query_seed(seed))


def check_query_seed(seed: Any, name: str = "seed") -> Any:
    """``seed`` when it can seed one query's ranking (None, a ``numpy.random.Generator``, or an
    int in ``[0, 2**64)``), else a ``TypeError`` or ``ValueError`` naming ``name``."""
    if seed is None or isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(
            f"{name} must be an int in [0, 2**64) or a numpy.random.Generator, got {seed!r}"
        )
    if not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"{name} must be an int in [0, 2**64), got {seed!r}")
    return seed


class RankerState:
    """The core ranker of one configuration, and the generator of its components' query seeds.

    Built for one component (``owner`` = its ``id``); a copy of the component (``model_copy``,
    ``copy.deepcopy``, a pickle) has another id, so :meth:`current` builds it a state of its
    own, whose query seeds come from ``SeedSequence(seed, spawn_key=...)`` with the copy's
    spawn key (:func:`spawn_key_of`; ``()``, ``default_rng(seed)``'s own stream, for a
    component that is no copy): docs/SPEC.md, "Adapters" → Copies.
    """

    def __init__(
        self,
        config: RankerConfig,
        owner: int,
        fields: tuple[Any, ...] | None = None,
        spawn_key: tuple[int, ...] = (),
    ) -> None:
        self.config = config
        self.owner = owner
        self.fields = fields
        """The component's field values this state was built from (dicts copied), compared on
        every call: equal values are an equal configuration, so the state is reused without
        building a :class:`RankerConfig` (None: always compare configurations)."""
        self.ranker = config.build()
        # the ranker's seed: the field's, or the one a ready Ranker was built with; a copy's
        # spawn key makes its stream the seed sequence's child of that key (docs/SPEC.md,
        # "Adapters" → Copies), the original's (key ()) is default_rng(seed)'s own
        self.spawn_key = spawn_key
        sequence = np.random.SeedSequence(self.ranker.seed, spawn_key=spawn_key)
        self._seeds = as_rng(np.random.default_rng(sequence))
        self._lock = threading.Lock()
        self._successors: weakref.WeakValueDictionary[int, RankerState] = (
            weakref.WeakValueDictionary()
        )
        """The state :meth:`current` built from this one for each component (owner id); weak,
        so that copies made and dropped per request leave nothing behind."""

    def __reduce__(self) -> tuple[Any, ...]:
        # A pickled component is another component, like a copy: it builds its own state
        # (its ranker from its fields, its query seeds from the start of seed's sequence).
        return (_no_state, ())

    def __deepcopy__(self, memo: dict[int, Any]) -> RankerState:
        # A deep copy of a component is another component: :meth:`current` sees the other id
        # and builds it a state of its own, so sharing this one until then is harmless.
        return self

    @classmethod
    def current(cls, state: RankerState | None, component: Any) -> RankerState:
        """``state`` when it still describes ``component``, else a new one built from it.

        Every call of a component passes here: while the component's field values equal
        those the state was built from (dicts and lists compared by value, so an in-place
        change is seen), the state is returned at once; otherwise the configuration is read
        again and compared (an equal one keeps the state and its generator).
        """
        owner = id(component)
        if state is not None and state.owner == owner and state.fields is not None:
            if state.fields == _field_values(component):
                return state
        adopt_own_ledger(component)
        config = RankerConfig.of(component)
        fields = _snapshot(_field_values(component))
        key = spawn_key_of(component)
        if state is None:
            return cls(config, owner, fields, key)
        if state.owner == owner and state.config == config:
            state.fields = fields  # the same configuration under other values: compare these
            return state
        with state._lock:  # concurrent first calls after a change build one state, not one each
            successor = state._successors.get(owner)
            if successor is None or successor.config != config:
                successor = state._successors[owner] = cls(config, owner, fields, key)
            return successor

    @functools.cached_property
    def auditor(self) -> FairnessAuditor | None:
        """The auditor of this ranker's own target and exposure model (None without a target):
        built once per state, since both are fixed for its life."""
        ranker = self.ranker
        return None if ranker.target is None else FairnessAuditor(ranker.target, ranker.exposure)

    def __copy__(self) -> RankerState:
        return self

    def rerank(
        self,
        scores: Any,
        groups: Any,
        k: int,
        *,
        ids: Any = None,
        seed: Any = None,
    ) -> tuple[Reranking, int]:
        """One query's fair ranking of a pool and the query seed it was drawn with.

        :func:`fairrag_core.rerank` with ``numpy.random.default_rng(query_seed)``, where the
        query seed is :meth:`query_seed` of ``seed``: passing it back re-draws this ranking.
        """
        query_seed = self.query_seed(seed)
        reranking = rerank(
            self.ranker, scores, groups, k, rng=np.random.default_rng(query_seed), ids=ids
        )
        return reranking, query_seed

    def query_seed(self, seed: Any = None) -> int:
        """The seed of the next query (the caller's, or drawn from this state's generator)."""
        if seed is not None:
            return draw_query_seed(seed, self._seeds)
        with self._lock:  # concurrent queries never receive the same draw
            return draw_query_seed(None, self._seeds)


def spawn_key_of(component: Any) -> tuple[int, ...]:
    """The spawn key of ``component``'s query-seed stream: ``()`` for a component built from
    its fields, ``(i,)`` for the i-th copy made of it, ``(i, j)`` for the j-th copy of that
    copy (:class:`~fairrag_core.kit.component.FairComponent` keeps it; any other object: ())."""
    private = getattr(component, "__pydantic_private__", None)
    key = private.get("_spawn_key") if isinstance(private, dict) else None
    return tuple(key) if key else ()


def _no_state() -> None:
    """What a pickled :class:`RankerState` becomes: none (rebuilt from the component's fields
    at its first use)."""
    return None

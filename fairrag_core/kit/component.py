"""The component contract: the fields every fair component shares, declared once.

docs/SPEC.md, "Adapters" → Component contract. ``FairRetriever`` and ``FairReranker``
(LangChain) and ``FairRerankPostprocessor`` (LlamaIndex) inherit :class:`FairComponent`, so the
fields, their validation on construction *and* on assignment (a refused value is undone and
raised), ``model_copy(update=...)`` (validated like an assignment), serialisation and the
ranker they describe are one rule in every framework.

This module imports pydantic (both frameworks' model library); ``import fairrag_core`` never
imports it: only the adapters do, through ``fairrag_core.kit.component``.
"""

from __future__ import annotations

import difflib
import threading
import warnings
from collections.abc import Hashable, Mapping, Sequence
from typing import Annotated, Any

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from ..audit import FairnessAuditor, exposure_name, json_label
from ..exposure import ExposureModel, make_exposure_model
from ..ranking import Ranker
from ..target import Target, others_bucket
from .config import (
    LEDGER_FIELDS,
    SEED_LIMIT,
    RankerState,
    check_group_key,
    describe_ranker,
    ledger_location,
    plain,
    ranker_from_description,
    refuse_bools,
    target_json,
    target_of_json,
)
from .place import Placed, place
from .relevance import RELEVANCE_CONVERSIONS

__all__ = [
    "AUTO",
    "CONFIG_FIELDS",
    "Count",
    "FairComponent",
    "Relevance",
    "check_count",
    "check_relevance",
    "check_shown_count",
]

_COPIES_LOCK = threading.Lock()

AUTO = "auto"
"""``relevance="auto"``: the adapter chooses the conversion from the store it can see, or
refuses (docs/SPEC.md, "Adapters" → Relevance)."""

CONFIG_FIELDS = (
    "ranker",
    "protected",
    "target_share",
    "target",
    "seed",
    "ranker_params",
    "exposure",
    *LEDGER_FIELDS,
)
"""The fields the core ranker is built from: changing one rebuilds it (or is undone)."""


def check_count(value: Any, name: str) -> int:
    """``value`` as an int >= 1 (``k``, ``top_n``, ``pool_size``), else a ValueError naming
    ``name``: bools, floats (even ``2.0``), strings and numbers below 1 are refused."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


def _count(value: Any, info: ValidationInfo) -> int:
    return check_count(value, info.field_name or "the value")


Count = Annotated[int, BeforeValidator(_count)]
"""A number of documents (``k``, ``top_n``, ``pool_size``): an int >= 1, named in errors."""


def check_shown_count(exposure: ExposureModel, k: int, name: str) -> None:
    """A component that shows ``k`` entries (its argument ``name``: ``k``, ``top_n``,
    ``top_k``) under a fitted exposure model of fewer positions is refused when built: the
    model has weights for ranks ``1..K`` only, never extrapolated (docs/SPEC.md "Exposure
    model" → Fitted). A user trial found it refused only at the first ranking, naming ``k``."""
    curve = exposure.curve
    if curve is not None and k > curve.k:
        raise ValueError(
            f"{name}={k} shows more entries than the fitted exposure model's {curve.k} "
            f"positions (it has weights for ranks 1..{curve.k} only, never extrapolated): fit "
            f"the curve on at least {k} positions, or set {name} <= {curve.k}"
        )


def check_relevance(value: Any, name: str = "relevance") -> str:
    """``"auto"`` or a named conversion of :data:`RELEVANCE_CONVERSIONS` (None means
    ``"auto"``), else a ValueError naming ``name`` and what is accepted."""
    if value is None:
        return AUTO
    if not isinstance(value, str) or (value != AUTO and value not in RELEVANCE_CONVERSIONS):
        raise ValueError(
            f"{name} {value!r} is unknown; accepted: {[AUTO, *sorted(RELEVANCE_CONVERSIONS)]}"
        )
    return value


def _relevance(value: Any, info: ValidationInfo) -> str:
    return check_relevance(value, info.field_name or "relevance")


Relevance = Annotated[str, BeforeValidator(_relevance)]
"""How a store's scores become relevance: ``"auto"`` or a named conversion."""


def unknown_argument(owner: str, given: Any, accepted: Sequence[str]) -> ValueError | None:
    """The error for the first of ``given``'s names (a constructor's keyword arguments) that
    ``accepted`` does not hold: it names the argument, a close match and every accepted name
    (docs/SPEC.md, "Adapters": unknown constructor arguments are errors naming the argument
    and what is accepted); None when every name is accepted or ``given`` is no mapping."""
    if not isinstance(given, Mapping):
        return None
    name = next((key for key in given if key not in accepted), None)
    if name is None:
        return None
    close = difflib.get_close_matches(str(name), list(accepted), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ValueError(
        f"{owner} got an unknown argument {name!r}{hint}; accepted: {', '.join(accepted)}"
    )


def model_arguments(model: type[BaseModel]) -> list[str]:
    """The names a pydantic model's constructor takes: its fields and their aliases (``alias``,
    ``validation_alias``, each of an ``AliasChoices``' names: ``top_n`` for ``k``)."""
    names: list[str] = []
    for name, info in model.model_fields.items():
        aliases = [name, info.alias, info.validation_alias]
        choices = getattr(info.validation_alias, "choices", None)
        if isinstance(choices, list):
            aliases += choices
        for alias in aliases:
            if isinstance(alias, str) and alias not in names:
                names.append(alias)
    return names


def known_arguments(model: type[BaseModel], data: Any) -> Any:
    """``data`` (a pydantic model's constructor input) when ``model`` takes each of its names,
    else :func:`unknown_argument`'s error for the first it does not (a before-validator's
    body, shared by every component)."""
    error = unknown_argument(model.__name__, data, model_arguments(model))
    if error is not None:
        raise error
    return data


class FairComponent(BaseModel):
    """The fields of every fair component and the core ranker they describe.

    The core ranker is built from :data:`CONFIG_FIELDS` by :class:`RankerState` and rebuilt
    whenever one of them changes (assignment, in place, ``model_copy(update=...)``); a copy
    (``copy.copy``, ``copy.deepcopy``, ``model_copy``, a pickle) never shares the original's
    random generator: the i-th copy draws ``SeedSequence(seed).spawn(i + 1)[i]``'s stream.
    Every field is validated when the component is built and when it is assigned: a value the
    field or the core refuses is undone (the old configuration stays whole) and raised as a
    ``ValueError`` naming the field and what is accepted. Unknown arguments are refused. Each
    adapter adds its size field (``k`` or ``top_n``, typed :data:`Count`) and its framework's
    own fields.
    """

    model_config = ConfigDict(
        arbitrary_types_allowed=True, extra="forbid", validate_assignment=True
    )

    ranker: str | Ranker = Field(
        default="representative_stochastic",
        description=(
            "A registered core ranker name (fairrag_core.available_rankers(), e.g. "
            "'representative_stochastic') or a ready fairrag_core Ranker."
        ),
    )
    group_key: str = Field(
        description="The metadata field holding each document's group label, e.g. 'gender'."
    )
    protected: Hashable | None = Field(
        default=None, description="The protected group of the binary target, e.g. 'female'."
    )
    target_share: float | None = Field(
        default=None,
        description="The protected group's target exposure share (core default 0.5, parity).",
    )
    target: dict[Hashable, float] | Target | None = Field(
        default=None,
        description="A full target {group: share} (or a fairrag_core Target) for several groups.",
    )
    seed: int | None = Field(
        default=None,
        description="Seed of the generator each query's seed is drawn from (stochastic rankers).",
    )
    ranker_params: dict[str, Any] = Field(
        default_factory=dict,
        description="Parameters of the named ranker, e.g. {'alpha': 4.0, 'gain': 2.0}.",
    )
    exposure: str | ExposureModel | None = Field(
        default=None,
        description="The exposure model: 'dcg' (default), 'rbp(p)', 'uniform' or an ExposureModel.",
    )
    ledger: Any = Field(
        default=None,
        description=(
            "The amortized ranker's exposure ledger: a ledger, a SQLite path or a redis:// URL "
            "(default: the component's own in-memory ledger)."
        ),
    )
    ledger_key: str | None = Field(
        default=None,
        description="The amortized ranker's stream in the ledger (a tenant, a topic).",
    )

    _state: RankerState | None = PrivateAttr(default=None)
    _spawn_key: tuple[int, ...] = PrivateAttr(default=())
    """Where this component's query-seed stream sits among its original's copies (() for one
    built from its fields; :func:`~fairrag_core.kit.config.spawn_key_of`)."""
    _copies_made: int = PrivateAttr(default=0)
    _warned_pickle: bool = PrivateAttr(default=False)

    # -- validation -------------------------------------------------------------------------

    @model_validator(mode="before")
    @classmethod
    def _known_arguments(cls, data: Any) -> Any:
        """An unknown argument names itself, a close match and every accepted argument (it
        was pydantic's bare "Extra inputs are not permitted")."""
        return known_arguments(cls, data)

    @field_validator("ranker", mode="before")
    @classmethod
    def _check_ranker(cls, value: Any) -> Any:
        if isinstance(value, Mapping):  # what serialising a ready Ranker writes
            return ranker_from_description(value)
        if not isinstance(value, (str, Ranker)):
            raise ValueError(
                f"ranker must be a core ranker name or a fairrag_core Ranker, got {value!r}"
            )
        return value

    @field_validator("group_key", mode="before")
    @classmethod
    def _check_group_key(cls, value: Any) -> Any:
        return check_group_key(value)

    @field_validator("target_share", "target", mode="before")
    @classmethod
    def _no_bools(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name or "the value"
        if name == "target":  # [[label, share], ...]: how a target of non-text labels is saved
            value = target_of_json(value, name)
        value = refuse_bools(value, name)
        shares = value.values() if isinstance(value, Mapping) else [value]
        text = next((share for share in shares if isinstance(share, (str, bytes))), None)
        if text is not None:  # pydantic would read "0.3" as 0.3: the core refuses text
            what = "must be a number" if name == "target_share" else "shares must be numbers"
            raise ValueError(f"{name} {what} in [0, 1], got the text {text!r}")
        if name == "target" and isinstance(value, Mapping):
            return others_bucket(value)  # "OTHERS": the others bucket, as records write it
        return value

    @field_validator("seed", mode="before")
    @classmethod
    def _check_seed(cls, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"seed must be an int in [0, 2**64) or None, got {value!r}")
        if not 0 <= value < SEED_LIMIT:
            raise ValueError(f"seed must be an int in [0, 2**64) or None, got {value!r}")
        return int(value)

    @field_validator("exposure", "ranker_params", mode="before")
    @classmethod
    def _read_fitted_file(cls, value: Any, info: ValidationInfo) -> Any:
        """``fitted:<file>`` (as ``exposure``, or as ``ranker_params["exposure"]``, the form
        ``fairrag study --exposure`` gives) is read once, here: the component keeps the curve,
        not the path, so every copy of it (LangChain's per-call copy, a pickle,
        ``model_copy``, a saved pipeline) ranks with the curve it was built with, and records
        name that curve, even after the file is rewritten (a user trial: a per-call copy read
        the rewritten file while the handler recorded the old curve; a review: also through
        ``ranker_params``)."""
        if info.field_name == "ranker_params":
            given = value.get("exposure") if isinstance(value, Mapping) else None
            if isinstance(given, str) and given.startswith("fitted:"):
                return {**value, "exposure": make_exposure_model(given)}
            return value
        if isinstance(value, str) and value.startswith("fitted:"):
            return make_exposure_model(value)
        return value

    @field_validator("ledger_key", mode="before")
    @classmethod
    def _check_ledger_key(cls, value: Any) -> Any:
        if value is not None and (not isinstance(value, str) or not value):
            raise ValueError(f"ledger_key must be a non-empty string or None, got {value!r}")
        return value

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        self._state = RankerState.current(None, self)  # a bad configuration fails here
        self._check_shown()

    def _shown(self) -> tuple[int, str] | None:
        """How many entries the component shows and the argument that says so (``k``,
        ``top_n``), for :func:`check_shown_count`; None when given per call only."""
        return None

    def _check_shown(self) -> None:
        shown = self._shown()
        if shown is not None:
            check_shown_count(self.fairness_exposure, *shown)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_") or name not in type(self).model_fields:
            super().__setattr__(name, value)
            return
        missing = object()
        before = self.__dict__.get(name, missing)
        super().__setattr__(name, value)  # the field's own validation (validate_assignment)
        try:
            if name in CONFIG_FIELDS:
                self._state = RankerState.current(self._state, self)
            # a fitted curve shorter than the list shown, set after the component was built
            # (its exposure, or its k), is refused as when built (a user trial)
            self._check_shown()
        except Exception:
            if before is not missing:
                self.__dict__[name] = before  # refused: the old configuration stays whole
            raise

    # -- copies: each draws its own stream (docs/SPEC.md, "Adapters" → Copies) ---------------

    def _next_spawn_key(self) -> tuple[int, ...]:
        """The spawn key of the next copy made of this component: its own key and the number
        of copies made before (copy i of a component with seed s draws the query seeds of
        ``default_rng(SeedSequence(s).spawn(i + 1)[i])``, whatever process it ends up in)."""
        with _COPIES_LOCK:
            made = self._private("_copies_made") or 0
            private = self.__pydantic_private__
            if private is not None:
                private["_copies_made"] = made + 1
        return (*(self._private("_spawn_key") or ()), made)

    @staticmethod
    def _as_copy_private(private: dict[str, Any] | None, key: tuple[int, ...]) -> dict[str, Any]:
        """A copy's private values: the original's, with its own spawn key, no copies made
        and no ranker state (built from its fields, and its key, at its first use)."""
        return {**(private or {}), "_spawn_key": key, "_copies_made": 0, "_state": None}

    def __copy__(self) -> Any:
        copied = super().__copy__()
        object.__setattr__(
            copied,
            "__pydantic_private__",
            self._as_copy_private(copied.__pydantic_private__, self._next_spawn_key()),
        )
        return copied

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Any:
        copied = super().__deepcopy__(memo)
        object.__setattr__(
            copied,
            "__pydantic_private__",
            self._as_copy_private(copied.__pydantic_private__, self._next_spawn_key()),
        )
        return copied

    def __getstate__(self) -> dict[Any, Any]:
        # A pickled component is a copy made now, in this process: its stream is the next
        # spawned one, so tasks sent to a process pool draw distinct, reproducible streams.
        state = dict(super().__getstate__())
        state["__pydantic_private__"] = self._as_copy_private(
            state.get("__pydantic_private__"), self._next_spawn_key()
        )
        self._warn_private_ledger()
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        # LlamaIndex's __setstate__ rebuilds the component by __init__ (fresh private values)
        key = (state.get("__pydantic_private__") or {}).get("_spawn_key")
        private = self.__pydantic_private__
        if key and private is not None and private.get("_spawn_key") != key:
            private.update(_spawn_key=key, _copies_made=0, _state=None)

    def _warn_private_ledger(self) -> None:
        """Warn (once per component) when pickling carries an amortized ranker's in-memory
        ledger: each unpickled copy ranks against its own copy of the totals, so the stream
        does not go on across processes."""
        ledger = getattr(self.core_ranker, "ledger", None)
        if getattr(ledger, "location", None) != "memory" or self._private("_warned_pickle"):
            return
        private = self.__pydantic_private__
        if private is not None:
            private["_warned_pickle"] = True
        warnings.warn(
            f"{type(self).__name__} is pickled with the {self.ranker_name} ranker's in-memory "
            "ledger: each copy (each process-pool task) starts from a copy of its totals and "
            "keeps its own stream, so the exposure it balances is not shared across tasks. "
            "Give ledger='<path>.sqlite' or a redis:// URL for one stream across processes "
            '(docs/SPEC.md, "Adapters" → Copies)',
            UserWarning,
            stacklevel=3,
        )

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Any:
        """A copy; ``update`` is validated field by field like an assignment (pydantic's own
        ``model_copy`` would store it unchecked), and an unknown name is refused."""
        copy = super().model_copy(deep=deep)
        for name, value in (update or {}).items():
            setattr(copy, name, value)
        return copy

    # -- serialisation ----------------------------------------------------------------------

    @field_serializer("ranker")
    def _serialize_ranker(self, ranker: str | Ranker) -> Any:
        return ranker if isinstance(ranker, str) else describe_ranker(ranker)

    @field_serializer("target")
    def _serialize_target(self, target: Any) -> Any:
        # the others bucket as "OTHERS", as records write it; labels other than text as
        # [[label, share], ...] pairs (JSON and YAML keys are text: 0 would come back "0")
        if isinstance(target, (Target, Mapping)):
            return target_json(target)
        return target

    @field_serializer("protected")
    def _serialize_protected(self, protected: Any) -> Any:
        # a Target object's protected group, so that the dump rebuilds the same target
        if protected is None and isinstance(self.target, Target):
            return plain(json_label(self.target.protected))
        return plain(protected)

    @field_serializer("target_share")
    def _serialize_target_share(self, share: Any) -> Any:
        return plain(share)

    @field_serializer("ranker_params")
    def _serialize_ranker_params(self, params: dict[str, Any]) -> Any:
        # an exposure model by its name, a ledger by its location, numpy numbers as Python's:
        # what the same objects given as fields write
        return {name: plain(value) for name, value in params.items()}

    @field_serializer("exposure")
    def _serialize_exposure(self, exposure: Any) -> Any:
        return exposure_name(exposure) if isinstance(exposure, ExposureModel) else exposure

    @field_serializer("ledger")
    def _serialize_ledger(self, ledger: Any) -> Any:
        # a ledger object by its location (a path or URL, never a password)
        return ledger if ledger is None or isinstance(ledger, str) else ledger_location(ledger)

    # -- the ranker the fields describe -------------------------------------------------------

    @property
    def ranker_state(self) -> RankerState:
        """The core ranker of the current fields (rebuilt when they changed) and its seeds."""
        kept = self._private("_state")
        state = RankerState.current(kept, self)
        if state is not kept:  # assigning a private attribute costs more than the check
            self._state = state
        return state

    def _private(self, name: str) -> Any:
        """The value of the private attribute ``name`` (None when unset), read from pydantic's
        dict of them: ``self._name`` goes through the model's ``__getattr__``, microseconds
        on every call of a component."""
        private = self.__pydantic_private__
        return None if private is None else private.get(name)

    @property
    def core_ranker(self) -> Ranker:
        """The fairrag_core ranker doing the work, as the fields describe it now."""
        return self.ranker_state.ranker

    @property
    def ranker_name(self) -> str:
        """The name of the core ranker in use (what the ``ranker`` metadata says)."""
        return self.core_ranker.name

    @property
    def fairness_target(self) -> Target | None:
        """The core ranker's fairness target (None for a ranker built without one)."""
        return self.core_ranker.target

    @property
    def fairness_exposure(self) -> ExposureModel:
        """The core ranker's exposure model (the position weights its placements carry)."""
        return self.core_ranker.exposure

    @property
    def auditor(self) -> FairnessAuditor | None:
        """An auditor with the ranker's own target and exposure model (None without a target;
        one object per configuration, :attr:`RankerState.auditor`)."""
        return self.ranker_state.auditor

    def place(
        self, metadatas: Sequence[Mapping[str, Any]], scores: Any, k: int, **options: Any
    ) -> Placed:
        """One query's pool ranked and placed with this component's ranker and group key:
        :func:`fairrag_core.kit.place` (``options``: its ``ids``, ``given``, ``scored``,
        ``seed``, ``extra``). A framework whose components are not pydantic models holds a
        ``FairComponent`` and calls this (composition)."""
        return place(self.ranker_state, metadatas, scores, k, group_key=self.group_key, **options)

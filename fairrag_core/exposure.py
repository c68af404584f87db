"""Position-weight (exposure) models: the attention rank i receives (SPEC.md, "Exposure model")."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from .target import OTHERS, Target, record_key

__all__ = [
    "ExposureModel",
    "FittedCurve",
    "fitted_name",
    "load_fitted_curve",
    "make_exposure_model",
    "position_weights",
    "save_fitted_curve",
]

FITTED_FORMAT = "fairrag-fitted-exposure/1"
"""The ``format`` field of a fitted curve's JSON file."""
FITTED_GROUPS_FORMAT = "fairrag-fitted-exposure-groups/1"
"""The ``format`` field of a fitted curve with per-group factors (docs/SPEC.md, "Exposure
model" → Fitted, per group)."""

_FITTED_FORM = re.compile(r"^fitted\((.*)\)$", re.DOTALL)


def _number(value: Any, name: str) -> float:
    """``value`` as a float when it is a number (a bool or a string is not: a curve's file
    holds JSON numbers); a ``TypeError`` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{name} must hold numbers, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class FittedCurve:
    """Position weights measured from a generator's answers (docs/SPEC.md, "Exposure model" →
    Fitted): ``v_i = p_i / sum_j p_j`` over the fitted positions ``1..K``, with ``p_i`` the
    estimated probability that the entry shown at position ``i`` is attributed in the answer.

    ``weights`` sum to 1; ``lower``/``upper`` are their 95% intervals (both empty when not
    known; one without the other is refused);
    ``provenance`` says where the curve came from (data source, answers, questions, date,
    model, estimator). Equality and hashing read the weights only.
    """

    weights: tuple[float, ...]
    lower: tuple[float, ...] = field(default=(), compare=False)
    upper: tuple[float, ...] = field(default=(), compare=False)
    provenance: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, hash=False
    )
    factors: tuple[tuple[str, float], ...] = ()
    """Per group (docs/SPEC.md, "Exposure model" → Fitted, per group): ``(label, lambda_g)``
    pairs, sorted by label; the expected attributions of group g's entry at rank i are
    ``lambda_g * v_i``. Empty: a position-only curve (every group ``v_i``)."""
    factor_lower: tuple[float, ...] = field(default=(), compare=False)
    factor_upper: tuple[float, ...] = field(default=(), compare=False)
    """The factors' interval bounds, one per factor in the order the factors are given (kept
    beside them, sorted by label, as :attr:`factors` is)."""

    def __post_init__(self) -> None:
        pairs = list(self.factors.items() if isinstance(self.factors, Mapping) else self.factors)
        labels = [record_key(g) for g, _ in pairs]  # every pair: a repeat is a group twice
        if len(set(labels)) < len(labels):
            twice = sorted({g for g in labels if labels.count(g) > 1})
            raise ValueError(
                f"factors name the group(s) {twice} twice (labels are read as text, as a "
                "curve's file holds them: 1 and '1' are one group); give each group once"
            )
        order = sorted(range(len(labels)), key=lambda i: labels[i])
        values = [value for _, value in pairs]
        factors = tuple((labels[i], _number(values[i], "group factor")) for i in order)
        # the bounds follow their factors into the sorted order (they were left as given)
        self._set_bounds(("factor_lower", "factor_upper"), len(factors), "group factor")
        for name in ("factor_lower", "factor_upper"):
            bounds = getattr(self, name)
            if bounds:
                object.__setattr__(self, name, tuple(bounds[i] for i in order))
        if not all(math.isfinite(f) and f > 0 for _, f in factors):
            raise ValueError(f"group factors must be finite and > 0, got {dict(factors)}")
        # records name the model fitted(v...;g=f;...): a ';' in a label could not be read back
        unnamable = [g for g, _ in factors if ";" in g or not g.strip()]
        if unnamable:
            raise ValueError(
                f"group labels of a per-group fitted model must not contain ';' nor be blank "
                f"(records name the model fitted(v1,...;group=factor;...)), got {unnamable}"
            )
        object.__setattr__(self, "factors", factors)
        weights = tuple(_number(w, "weights") for w in self.weights)
        if not weights:
            raise ValueError("weights must hold at least one position weight, got none")
        if not all(math.isfinite(w) and w > 0 for w in weights):
            raise ValueError(f"weights must be finite and > 0, got {list(weights)}")
        total = math.fsum(weights)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"weights must be normalised to sum 1, they sum to {total!r}")
        self._set_bounds(("lower", "upper"), len(weights), "weight")
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "provenance", MappingProxyType(dict(self.provenance)))

    def _set_bounds(self, names: tuple[str, str], count: int, what: str) -> None:
        """The interval fields ``names`` as float tuples: empty, or one bound per ``what``,
        finite, >= 0 (a weight's: at most 1), each lower bound at most its upper one."""
        pair = []
        for name in names:
            bounds = tuple(_number(b, name) for b in getattr(self, name))
            if bounds and len(bounds) != count:
                raise ValueError(
                    f"{name} must give one bound per {what} ({count}), got {len(bounds)}"
                )
            if not all(math.isfinite(b) and b >= 0 for b in bounds):
                raise ValueError(f"{name} must be finite and >= 0, got {list(bounds)}")
            if what == "weight" and any(b > 1 for b in bounds):
                # a weight is a share of the curve's total (they sum to 1): no bound above 1
                raise ValueError(
                    f"{name} bounds a weight, a share of 1, so must be at most 1, got "
                    f"{list(bounds)}"
                )
            object.__setattr__(self, name, bounds)
            pair.append(bounds)
        lower, upper = pair
        if bool(lower) != bool(upper):  # an interval with one end is none (a review)
            raise ValueError(
                f"{names[0]} and {names[1]} are the ends of one interval per {what}: give both "
                f"or neither, got {len(lower)} and {len(upper)} bounds"
            )
        if lower and upper and any(lo > hi for lo, hi in zip(lower, upper, strict=True)):
            raise ValueError(
                f"{names[0]} must be at most {names[1]} for each {what}, got {list(lower)} and "
                f"{list(upper)}"
            )

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled and copied by its fields (its ``provenance`` is a read-only view, which
        pickle cannot copy): a pickled component or handler keeps the curve it was given."""
        fields = (self.weights, self.lower, self.upper, dict(self.provenance), self.factors)
        return (type(self), (*fields, self.factor_lower, self.factor_upper))

    @property
    def k(self) -> int:
        """The positions fitted: weights exist for ranks ``1..k`` only."""
        return len(self.weights)

    @property
    def factor_of(self) -> dict[str, float]:
        """``{label: lambda_g}`` (empty for a position-only curve)."""
        return dict(self.factors)

    def as_dict(self) -> dict[str, Any]:
        """The curve as its JSON file holds it (with factors: also the table
        ``lambda_g * v_i`` per group, for the reader)."""
        payload: dict[str, Any] = {
            "format": FITTED_GROUPS_FORMAT if self.factors else FITTED_FORMAT,
            "weights": list(self.weights),
            "lower": list(self.lower),
            "upper": list(self.upper),
        }
        if self.factors:
            payload["group_factors"] = self.factor_of
            if self.factor_lower:
                payload["group_factor_lower"] = dict(
                    zip(self.factor_of, self.factor_lower, strict=True)
                )
            if self.factor_upper:
                payload["group_factor_upper"] = dict(
                    zip(self.factor_of, self.factor_upper, strict=True)
                )
            payload["table"] = {g: [round(f * w, 6) for w in self.weights] for g, f in self.factors}
        payload["provenance"] = dict(self.provenance)
        return payload


def save_fitted_curve(curve: FittedCurve, path: str | Path) -> Path:
    """Write ``curve`` as a small JSON file (:meth:`FittedCurve.as_dict`); returns the path."""
    path = Path(path)
    path.write_text(json.dumps(curve.as_dict(), indent=2) + "\n", encoding="utf-8")
    return path


_FITTED_EXPECTED = (
    f"expected a JSON object with format {FITTED_FORMAT!r} or {FITTED_GROUPS_FORMAT!r}, as "
    "fairrag study --position-curve or fairrag audit --fit-exposure write"
)


def load_fitted_curve(path: str | Path) -> FittedCurve:
    """Read a curve :func:`save_fitted_curve` wrote; a ``ValueError`` naming the file and the
    problem otherwise."""
    path = Path(path)
    try:
        payload = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_once_each)
    except json.JSONDecodeError as exc:
        # a user trial: a CSV file got the JSON parser's message alone, naming no format
        raise ValueError(
            f"exposure 'fitted:{path}': cannot read a fitted curve: not JSON ({exc}); "
            f"{_FITTED_EXPECTED}"
        ) from None
    except (OSError, ValueError, RecursionError) as exc:  # 4,300-digit numbers, a repeated key
        raise ValueError(f"exposure 'fitted:{path}': cannot read a fitted curve: {exc}") from None
    formats = (FITTED_FORMAT, FITTED_GROUPS_FORMAT)
    if not isinstance(payload, dict) or payload.get("format") not in formats:
        raise ValueError(f"exposure 'fitted:{path}': not a fitted curve ({_FITTED_EXPECTED})")
    try:
        factors: dict[str, float] = {}
        lower: tuple[float, ...] = ()
        upper: tuple[float, ...] = ()
        if payload["format"] == FITTED_GROUPS_FORMAT:
            factors = payload["group_factors"]
            if not isinstance(factors, dict) or not factors:
                raise ValueError(
                    "group_factors must be a non-empty object {group: factor > 0}, got "
                    f"{factors!r:.80}"
                )
            order = list(factors)  # the bounds follow their factors (FittedCurve sorts them)
            lower = _bounds_of(
                _given(payload, "group_factor_lower", {}), "group_factor_lower", order
            )
            upper = _bounds_of(
                _given(payload, "group_factor_upper", {}), "group_factor_upper", order
            )
        else:
            present = [key for key in payload if key.startswith("group_factor")]
            if present:  # factors under a position-only format would be dropped unread
                raise ValueError(
                    f"{', '.join(present)} given under format {FITTED_FORMAT!r}, which holds a "
                    f"position curve alone: a per-group curve's format is {FITTED_GROUPS_FORMAT!r}"
                )
        provenance = _given(payload, "provenance", {})
        if not isinstance(provenance, dict):
            raise ValueError(f"provenance must be an object, got {provenance!r:.80}")
        curve = FittedCurve(
            _numbers_of(payload["weights"], "weights"),
            _numbers_of(_given(payload, "lower", []), "lower"),
            _numbers_of(_given(payload, "upper", []), "upper"),
            provenance,
            tuple(factors.items()),
            lower,
            upper,
        )
        _check_table(_given(payload, "table", None), curve)
        return curve
    except KeyError as exc:
        raise ValueError(f"exposure 'fitted:{path}': the field {exc} is missing") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"exposure 'fitted:{path}': {exc}") from None


def _check_table(table: Any, curve: FittedCurve) -> None:
    """A per-group file's ``table`` (``lambda_g * v_i`` for the reader) is never read as the
    model, so one that is not the factors times the weights (an edited file) is an error
    rather than ignored (a user trial)."""
    if table is None:
        return
    if not curve.factors:
        raise ValueError(f"table given under format {FITTED_FORMAT!r}, which has no group factors")
    expected = curve.as_dict()["table"]
    if not isinstance(table, dict) or set(table) != set(expected):
        raise ValueError(
            f"table must give lambda_g * v_i for the groups {sorted(expected)}, got {table!r:.80}"
        )
    for group, row in table.items():
        given = _numbers_of(row, "table")
        if len(given) != curve.k or any(
            abs(a - b) > 1e-5 for a, b in zip(given, expected[group], strict=True)
        ):
            raise ValueError(
                f"table[{group!r}] is {list(given)}, not the group factor times the weights "
                f"({expected[group]}): the model is read from group_factors and weights; "
                "correct or remove the table"
            )


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object of a curve file: a key given twice (a group's factor) is an error, never
    the last value read."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {key!r} is given twice in one object")
        found[key] = value
    return found


def _given(payload: Mapping[str, Any], name: str, default: Any) -> Any:
    """A curve file's optional field: ``default`` when absent or null (``0`` or ``false`` is a
    value, checked as one)."""
    value = payload.get(name)
    return default if value is None else value


def _numbers_of(value: Any, name: str) -> tuple[float, ...]:
    """A curve file's list of numbers (``weights``, ``lower``, ``upper``), as floats; a
    ``ValueError`` naming the field otherwise (a number past a float's range included)."""
    if not isinstance(value, list) or not all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in value
    ):
        raise ValueError(f"{name} must be a list of numbers, got {value!r:.80}")
    try:
        return tuple(float(x) for x in value)
    except OverflowError:
        raise ValueError(f"{name} holds a number past a float's range") from None


def _bounds_of(value: Any, name: str, groups: list[str]) -> tuple[float, ...]:
    """A curve file's per-group bounds (``{group: number}``) in the order of ``groups``
    (empty when the file has none); a ``ValueError`` naming the field otherwise."""
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be an object {{group: number}}, got {value!r:.80}")
    if not value:
        return ()
    missing = [group for group in groups if group not in value]
    if missing:
        raise ValueError(
            f"{name} has no bound for the group(s) {missing} (it names {sorted(value)})"
        )
    return _numbers_of([value[group] for group in groups], name)


@dataclass(frozen=True)
class ExposureModel:
    """A position-weight model ``v_i`` for 1-based ranks ``i``.

    - ``dcg`` (default): ``v_i = 1 / log2(i + 1)``, the DCG discount (Järvelin & Kekäläinen 2002).
    - ``rbp``: ``v_i = p ** (i - 1)`` with patience ``p`` in (0, 1] (Moffat & Zobel 2008).
    - ``uniform``: ``v_i = 1``; every shown position gets the same attention.
    - ``fitted``: the weights of a :class:`FittedCurve` (measured from a generator's answers);
      a rank beyond the curve's ``k`` is an error, never extrapolated.
    """

    name: str = "dcg"
    patience: float = 0.8
    """RBP patience ``p``; only used by ``name="rbp"``."""
    curve: FittedCurve | None = None
    """The fitted weights; only (and always) with ``name="fitted"``."""

    def __post_init__(self) -> None:
        if self.name not in _MODELS and self.name != "fitted":
            raise ValueError(
                f"exposure model {self.name!r} is unknown; known models: "
                f"{sorted([*_MODELS, 'fitted'])}"
            )
        patience = self.patience
        if isinstance(patience, bool) or not isinstance(patience, (int, float, np.number)):
            raise TypeError(f"patience must be a number in (0, 1], got {patience!r}")
        if self.name == "rbp" and not (0.0 < patience <= 1.0):
            raise ValueError(f"patience must be in (0, 1] for the rbp model, got {patience!r}")
        if (self.name == "fitted") != (self.curve is not None):
            raise ValueError(
                "curve (a FittedCurve) is given with name='fitted' and only then, got name "
                f"{self.name!r} and curve {self.curve!r}"
            )
        if self.curve is not None and not isinstance(self.curve, FittedCurve):
            raise TypeError(
                "curve must be a FittedCurve (load_fitted_curve(path), or "
                f"make_exposure_model('fitted:<file>')), got {type(self.curve).__name__}"
            )

    @classmethod
    def fitted(cls, curve: FittedCurve) -> ExposureModel:
        """The model of a fitted curve."""
        return cls("fitted", curve=curve)

    def weights(self, k: int) -> np.ndarray:
        """The weights ``v_1 .. v_k`` as a read-only float array (a per-group model: the
        position curve its group factors multiply)."""
        if self.curve is not None:
            return _fitted_weights(self.curve.weights, k)
        return position_weights(k, self.name, self.patience)

    @property
    def per_group(self) -> bool:
        """Whether the weight of a rank depends on the group shown there (a fitted curve with
        group factors: docs/SPEC.md, "Exposure model" → Fitted, per group)."""
        return self.curve is not None and bool(self.curve.factors)

    def entry_weights(self, labels: Sequence[Hashable]) -> np.ndarray:
        """The weight of each entry of a ranking whose groups are ``labels`` (best first):
        ``v_i``, or per group ``lambda_{g(i)} * v_i``. A label the per-group model has no
        factor for is a ``ValueError`` naming the labels it has."""
        weights = self.weights(len(labels))
        if not self.per_group:
            return weights
        return weights * self.group_factors(labels, "the ranking shows")

    def group_factors(self, labels: Sequence[Hashable], where: str) -> np.ndarray:
        """Each label's group factor ``lambda_g`` (all 1 for a model without group factors);
        a label the per-group model has no factor for is a ``ValueError`` (``where``: what
        shows the labels, for the message)."""
        if not self.per_group:
            return np.ones(len(labels))
        assert self.curve is not None
        factor = self.curve.factor_of
        factors = [_factor(factor, g) for g in labels]
        if None in factors:
            self.check_labels(labels, where)  # raises, naming the groups without a factor
        return np.array(factors, dtype=float)

    def check_labels(self, labels: Sequence[Hashable], where: str = "the pool holds") -> None:
        """A ``ValueError`` naming the fitted groups when a per-group model has no factor for
        one of ``labels`` (nothing to check without group factors). :func:`~fairrag_core.rerank`
        checks the whole pool before it ranks, so the error never depends on the draw and a
        ledger never counts a ranking that was not served."""
        if not self.per_group:
            return
        assert self.curve is not None
        factor = self.curve.factor_of
        missing = sorted({_key(g) for g in labels if _factor(factor, g) is None})
        if missing:
            raise ValueError(
                f"the per-group fitted exposure model has factors for groups {sorted(factor)} "
                f"only; {where} {missing}. Fit the curve on answers that show them"
            )

    def effective_shares(self, target: Target) -> np.ndarray:
        """The target's shares in the position curve's units: the shares ``t'`` of
        ``sum v_i`` that give each bucket its target share ``t`` of the expected
        attributions ``sum lambda_{g(i)} v_i`` (``t'_b ∝ t_b / lambda_b``); the target's own
        shares for a model without group factors.

        An :data:`~fairrag_core.target.OTHERS` bucket takes the factor of the model's groups the
        target does not name, which must be one group (or share one factor)."""
        if not self.per_group:
            return target.shares
        assert self.curve is not None
        factor = self.curve.factor_of
        named = {  # the factor keys the target's groups are found under
            key
            for g in target.groups
            if g is not OTHERS
            for key in (_key(g), str(g))
            if key in factor
        }
        lambdas = []
        for group, share in zip(target.groups, target.shares.tolist(), strict=True):
            if group is OTHERS:
                rest = {f for g, f in factor.items() if g not in named}
                if share == 0:  # owed nothing: its factor never counts (SPEC)
                    rest = {1.0}
                if len(rest) != 1:
                    raise ValueError(
                        f"the per-group fitted exposure model's groups {sorted(factor)} leave "
                        f"{len(rest)} factors for the target's unnamed groups (OTHERS); name "
                        "every group in the target, or fit on two groups"
                    )
                lambdas.append(rest.pop())
            elif (found := _factor(factor, group)) is not None:
                lambdas.append(found)
            else:
                raise ValueError(
                    f"the per-group fitted exposure model has factors for groups "
                    f"{sorted(factor)} only; the target names {group!r}"
                )
        raw = target.shares / np.array(lambdas)
        shares = raw / raw.sum()
        shares.setflags(write=False)
        return shares


def _factor(factors: Mapping[str, float], label: Hashable) -> float | None:
    """A label's factor: under its record key (:func:`_key`), else under its ``str`` (a curve
    keyed ``"1.0"`` before records wrote the float ``1.0`` as ``1``)."""
    found = factors.get(_key(label))
    return factors.get(str(label)) if found is None else found


def _key(label: Hashable) -> str:
    """A group label as a fitted file keys it (JSON keys are strings), as records key it
    (:func:`fairrag_core.target.record_key`: ``1.0`` as ``"1"``)."""
    return record_key(label)


def _dcg(k: int, _p: float) -> np.ndarray:
    return 1.0 / np.log2(np.arange(2, k + 2, dtype=float))


def _rbp(k: int, p: float) -> np.ndarray:
    return p ** np.arange(k, dtype=float)


def _uniform(k: int, _p: float) -> np.ndarray:
    return np.ones(k, dtype=float)


_MODELS = {"dcg": _dcg, "rbp": _rbp, "uniform": _uniform}


@lru_cache(maxsize=256)
def position_weights(k: int, name: str = "dcg", patience: float = 0.8) -> np.ndarray:
    """Weights ``v_1 .. v_k`` of the named model (cached; the array is read-only)."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k!r}")
    weights = _MODELS[name](k, patience)
    weights.setflags(write=False)
    return weights


@lru_cache(maxsize=256)
def _fitted_weights(fitted: tuple[float, ...], k: int) -> np.ndarray:
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k!r}")
    if k > len(fitted):
        raise ValueError(
            f"the fitted exposure model has weights for ranks 1..{len(fitted)} only; rank "
            f"{k} was asked for (k={k}). Fit the curve on at least {k} positions, or rank "
            f"at most k={len(fitted)}"
        )
    weights = np.array(fitted[:k], dtype=float)
    weights.setflags(write=False)
    return weights


def fitted_name(curve: FittedCurve) -> str:
    """``fitted(v1,v2,...)`` (with group factors ``fitted(v1,...;g1=f1,g2=f2)``): a fitted
    model as records name it (the weights and factors, so a record alone gives the model back
    through :func:`make_exposure_model`)."""
    groups = "".join(f";{g}={f!r}" for g, f in curve.factors)
    return "fitted(" + ",".join(repr(w) for w in curve.weights) + groups + ")"


def _parse_fitted(text: str, body: str) -> ExposureModel:
    weights, *groups = body.split(";")
    try:
        values = tuple(float(w) for w in weights.split(","))
        factors: list[tuple[str, float]] = []
        for pair in groups:
            label, sep, value = pair.rpartition("=")
            if not sep or not label:
                raise ValueError(f"{pair!r} is not group=factor")
            if any(label == named for named, _ in factors):
                raise ValueError(f"the group {label!r} is named twice")
            factors.append((label, float(value)))
        return ExposureModel.fitted(FittedCurve(values, factors=tuple(factors)))
    except ValueError as exc:
        raise ValueError(
            f"exposure {text!r}: fitted(v1,...,vk) needs positive weights that sum to 1, "
            f"then optionally ;group=factor pairs with factors > 0 ({exc})"
        ) from None


def make_exposure_model(model: str | ExposureModel | None) -> ExposureModel:
    """Accept a model name, ``rbp(p)`` (the form records write, e.g. ``rbp(0.5)``),
    ``fitted:<file>`` (a fitted curve's JSON file, :func:`load_fitted_curve`),
    ``fitted(v1,...,vk)`` (the form records write for a fitted model), an
    :class:`ExposureModel`, or ``None`` (the DCG default)."""
    if model is None:
        return ExposureModel()
    if isinstance(model, ExposureModel):
        return model
    if isinstance(model, str):
        if model.startswith("rbp(") and model.endswith(")"):
            try:
                patience = float(model[4:-1])
            except ValueError:
                raise ValueError(
                    f"exposure {model!r}: the patience in rbp(p) must be a number in (0, 1]"
                ) from None
            return ExposureModel("rbp", patience)
        if model.startswith("fitted:"):
            path = model.removeprefix("fitted:")
            if not path:
                raise ValueError("exposure 'fitted:<file>' needs the fitted curve's JSON file")
            return ExposureModel.fitted(load_fitted_curve(path))
        form = _FITTED_FORM.match(model)
        if form is not None:
            return _parse_fitted(model, form.group(1))
        return ExposureModel(model)
    raise TypeError(
        f"exposure must be a model name {sorted(_MODELS)}, 'rbp(p)', 'fitted:<file>' or an "
        f"ExposureModel, got {model!r}"
    )

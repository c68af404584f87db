"""Fairness targets: the exposure share each group should receive (docs/SPEC.md, "Inputs")."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .validation import check_groups, is_missing

__all__ = ["OTHERS", "Target", "make_target"]


class _Others:
    """Sentinel for "every group not named in the target" (unknown groups included)."""

    _instance: _Others | None = None

    def __new__(cls) -> _Others:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "OTHERS"

    def __reduce__(self) -> str:
        return "OTHERS"


OTHERS = _Others()
"""Target key for every group the target does not name, including unknown (``None``) groups."""

_SUM_TOLERANCE = 1e-9
_DIRECT_SUM_TOLERANCE = 1e-6
"""A :class:`Target` built directly: shares computed in float32 sum to 1 within this."""


@dataclass(frozen=True)
class Target:
    """Target exposure shares per group, summing to 1.

    ``groups`` are the target's buckets in a canonical order (:func:`canonical_order`: the named
    groups sorted, :data:`OTHERS` last), whatever order the mapping listed them in, so equal
    targets draw equal rankings for the same seed and pool; ``shares`` the matching shares. A
    candidate whose label is not one of the named groups (``None`` included) belongs to the
    :data:`OTHERS` bucket. When the target does not list ``OTHERS`` (a full mapping that names
    every group), that bucket is still present with share 0: such candidates stay rankable but
    are owed no exposure. ``protected`` is the protected group of the binary case, if any.
    """

    groups: tuple[Hashable, ...]
    shares: np.ndarray
    protected: Hashable | None = None
    _index: dict[Hashable, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        # built directly (not by make_target) a Target is checked by the same rules: every
        # share a number in [0, 1], summing to 1, one per group, the others bucket among them
        groups = tuple(self.groups)
        if len(set(groups)) != len(groups) or OTHERS not in groups:
            raise ValueError(
                f"Target groups must be distinct and hold the others bucket OTHERS, got {groups!r}"
            )
        shares = np.asarray(self.shares, dtype=object).ravel()
        if len(shares) != len(groups):
            raise ValueError(
                f"Target needs one share per group ({len(groups)}), got {len(shares)}: "
                f"{self.shares!r}"
            )
        if self.protected is not None and self.protected not in groups:
            raise ValueError(
                f"protected={self.protected!r} is not a group of the target {groups!r}"
            )
        if self.protected is OTHERS or "OTHERS" in groups or self.protected == "OTHERS":
            raise ValueError(
                "a Target's groups name the others bucket once, as OTHERS (a group 'OTHERS' "
                "would be written as it), and it is never the protected group"
            )
        written: dict[str, Hashable] = {}
        for group in groups:  # records and configs key the target by each label's string
            other = written.setdefault(record_key(group), group)
            if other is not group:
                raise ValueError(
                    f"target groups {other!r} and {group!r} are both written {record_key(group)!r} "
                    "in records and configs (their keys are strings): give each group one label"
                )
        # shares computed in float32 (counts / total) sum to 1 within its precision only:
        # renormalised, so the target reads back (records, configs) under make_target's 1e-9
        checked = _check_shares(shares.tolist(), groups, tolerance=_DIRECT_SUM_TOLERANCE)
        total = math.fsum(checked)
        if abs(total - 1.0) > _SUM_TOLERANCE:
            checked = checked / total
        object.__setattr__(self, "groups", groups)
        object.__setattr__(self, "shares", checked)
        order = canonical_order(self.groups)
        if order != list(range(len(self.groups))):
            object.__setattr__(self, "groups", tuple(self.groups[i] for i in order))
            object.__setattr__(self, "shares", self.shares[order])
        self.shares.setflags(write=False)
        self._index.update({g: i for i, g in enumerate(self.groups)})

    @property
    def others_index(self) -> int:
        """Bucket index of :data:`OTHERS`."""
        return self._index[OTHERS]

    @property
    def protected_share(self) -> float:
        """The protected group's target share (binary case)."""
        if self.protected is None:
            raise ValueError("this target names no protected group; pass protected=...")
        return float(self.shares[self._index[self.protected]])

    def as_dict(self) -> dict[Hashable, float]:
        """The target as ``{group: share}``; the others bucket appears as :data:`OTHERS`."""
        return {g: float(s) for g, s in zip(self.groups, self.shares, strict=True)}

    def bucket(self, label: Hashable) -> int:
        """Bucket index of one candidate label."""
        return self._index.get(label, self._index[OTHERS])

    def encode(self, labels: Sequence[Hashable]) -> np.ndarray:
        """Bucket index (into ``groups``/``shares``) of each candidate label, as an int array."""
        index = self._index
        others = index[OTHERS]
        get = index.get
        try:
            return np.array([get(label, others) for label in labels], dtype=np.intp)
        except TypeError:  # an unhashable label: the error names its position
            check_groups(labels, len(labels))
            raise


def make_target(
    *,
    protected: Hashable | None = None,
    target_share: float | None = None,
    target: Mapping[Hashable, float] | Target | None = None,
) -> Target:
    """Build a :class:`Target` from the binary or the multi-group form.

    - binary: ``protected="female", target_share=0.5`` -> ``{female: 0.5, OTHERS: 0.5}``
      (``target_share`` defaults to 0.5, the paper's parity);
    - several groups: ``target={"a": 0.3, "b": 0.3, "c": 0.4}`` (may include :data:`OTHERS`,
      or ``"OTHERS"`` as records write it);
      ``protected`` may name one of its groups for the metrics of the binary case.
    - neither: demographic parity over the groups present cannot be known in advance, so it is an
      error for fairness-aware rankers; callers that do not need a target pass nothing.
    """
    if protected is OTHERS or (isinstance(protected, str) and protected == "OTHERS"):
        raise ValueError(
            "protected must be a group label, not the others bucket (OTHERS, as records write "
            f"it), got {protected!r}"
        )
    if isinstance(target, Target):
        if target_share is not None:
            raise ValueError("give either target or target_share, not both")
        return target
    if target is not None:
        if target_share is not None:
            raise ValueError("give either target (a mapping) or target_share, not both")
        if not isinstance(target, Mapping) or not target:
            raise ValueError(
                f"target must be a non-empty mapping {{group: share}} summing to 1, got {target!r}"
            )
        _check_hashable(protected)
        _check_target_keys(target)
        target = others_bucket(target)
        groups = tuple(target)
        shares = _check_shares([target[g] for g in groups], groups)
        if protected is not None and protected not in target:
            raise ValueError(
                f"protected={protected!r} is not a group of target (groups: {list(groups)})"
            )
        if OTHERS not in target:
            groups = (*groups, OTHERS)
            shares = np.append(shares, 0.0)
        return Target(groups, shares, protected)
    if protected is None:
        raise ValueError(
            "no fairness target: pass protected=<group> (with target_share, default 0.5) "
            "or target={group: share, ...}"
        )
    _check_hashable(protected)
    share = 0.5 if target_share is None else target_share
    shares = _check_shares([share, 1.0 - float(share)], ("target_share", "rest"))
    return Target((protected, OTHERS), shares, protected)


def plain_label(label: Hashable) -> Hashable:
    """A group label as records write it (:func:`fairrag_core.audit.json_label`'s value): a
    numpy number or string as Python's, a float holding a whole number as that int (``1.0`` is
    the group ``1`` to every ranker: one label in records too); others as they are."""
    if isinstance(label, np.generic):
        label = label.item()
    if isinstance(label, float) and label.is_integer() and abs(label) < 2**53:
        return int(label)
    return label


def record_key(label: Hashable) -> str:
    """A group label as records key it (``target``, ``exposure_by_group``: JSON objects, whose
    keys are strings): ``"OTHERS"`` for :data:`OTHERS`, else ``str`` of :func:`plain_label`
    (``None`` as ``"None"``, ``1.0`` as ``"1"``, ``np.float32(0.1)`` as the float it is). Two
    groups of one target never share a key (:class:`Target` refuses them)."""
    return "OTHERS" if label is OTHERS else str(plain_label(label))


def others_bucket(target: Mapping[Hashable, Any]) -> Mapping[Hashable, Any]:
    """``target`` with its key ``"OTHERS"``, as records, serialisation and JSON write the others
    bucket, read as :data:`OTHERS` (the mapping itself when it has none); both at once are a
    ``ValueError``. The one reading of that key for the core and every adapter."""
    if "OTHERS" not in target:
        return target
    if OTHERS in target:
        raise ValueError("target names the others bucket twice (OTHERS and 'OTHERS'); give one")
    return {OTHERS if key == "OTHERS" else key: share for key, share in target.items()}


def canonical_order(groups: Sequence[Hashable]) -> list[int]:
    """Positions of ``groups`` in the canonical order of a target's buckets (docs/SPEC.md,
    "Inputs"): the group codes, hence which column of random noise each group draws, must not
    depend on the order a mapping happened to list its keys in (a YAML round trip sorts them).

    Strings first, in code-point order; then numbers, by value; then any other label, by type
    name and, where it is the same in every process (booleans, bytes, NaN, None), ``repr``,
    else in the mapping's order; :data:`OTHERS` last. A single named group with :data:`OTHERS` (the
    binary form) keeps its order, and so do labels no rule tells apart (equal ``repr`` of one
    type): a stable sort.
    """
    return sorted(range(len(groups)), key=lambda i: _label_key(groups[i]))


def _label_key(label: Hashable) -> tuple[int, str, Any]:
    if label is OTHERS:
        return (4, "", "")
    if isinstance(label, str):
        return (0, "", str(label))
    if isinstance(label, (int, np.integer)) and not isinstance(label, (bool, np.bool_)):
        return (1, "", int(label))  # exact, however large (10**400 is no float)
    if isinstance(label, (float, np.floating)) and not math.isnan(label):
        return (1, "", float(label))  # ints and floats compare with each other exactly
    cls = type(label)
    # a repr the process decides (a frozenset's order, an object's address) is no order: such
    # labels keep the order the mapping gave them (a stable sort), the same in every process
    shown = repr(label) if isinstance(label, _REPR_ORDERED) else ""
    return (2, f"{cls.__module__}.{cls.__qualname__}", shown)


_REPR_ORDERED = (bool, np.bool_, bytes, complex, float, np.floating, type(None))
"""Label types whose ``repr`` is the same in every process (tuples may hold anything)."""


def _check_hashable(protected: object) -> None:
    try:
        hash(protected)
    except TypeError:
        raise TypeError(
            f"protected must be a hashable group label (str, int, ...), got "
            f"{type(protected).__name__} {protected!r:.100}"
        ) from None
    if is_missing(protected):
        raise ValueError(missing_protected(protected))


def missing_protected(protected: object) -> str:
    """The error of a ``protected`` that is a missing value (a NaN, ``pandas.NA``)."""
    return (
        f"protected={protected!r} is a missing value, which is read as the unknown group (None), "
        "never protected: name the protected group's label (e.g. protected='female')"
    )


def _check_target_keys(target: Mapping[Hashable, Any]) -> None:
    for key in target:
        if is_missing(key):
            raise ValueError(
                f"target names the missing value {key!r} as a group: a label that is missing is "
                "read as the unknown group, which a target names as None"
            )


def _check_shares(
    values: Iterable[object], names: Sequence[Hashable], tolerance: float = _SUM_TOLERANCE
) -> np.ndarray:
    out = []
    for name, value in zip(names, values, strict=True):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
            raise TypeError(f"target share of {name!r} must be a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value) or value < 0.0 or value > 1.0:
            raise ValueError(f"target share of {name!r} must be in [0, 1], got {value!r}")
        out.append(value)
    total = math.fsum(out)
    if abs(total - 1.0) > tolerance:
        raise ValueError(
            f"target shares must sum to 1 (within {tolerance:g}), got {total!r} "
            f"from {dict(zip(names, out, strict=True))}"
        )
    return np.asarray(out, dtype=float)

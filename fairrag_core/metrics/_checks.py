"""Argument checks shared by the metric modules: fail early, naming the argument."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable

import numpy as np

from ..validation import missing_as_none, refuse_unordered

__all__ = ["as_binary_flags", "as_labels", "as_share"]


def as_labels(values: Iterable[Hashable], name: str) -> list[Hashable]:
    """``values`` as a list of hashable group labels (``None`` = unknown group)."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of group labels, not a string ({values!r:.80})")
    refuse_unordered(values, name)
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ValueError(
                f"{name} must be 1-D (one label per position), got shape {values.shape}"
            )
        labels = values.tolist()
    else:
        try:
            labels = list(values)
        except TypeError:
            raise TypeError(
                f"{name} must be a sequence of group labels, got {type(values).__name__}"
            ) from None
    labels = list(missing_as_none(labels))  # NaN, pandas' missing label: unknown (None)
    for position, label in enumerate(labels):
        try:
            hash(label)
        except TypeError:
            raise TypeError(
                f"{name} must hold hashable labels; position {position} holds {label!r:.80}"
            ) from None
    return labels


def as_share(value: object, name: str) -> float:
    """A share in [0, 1] as a float; NaN passes through (an undefined metric stays undefined)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number in [0, 1] (or NaN), got {value!r}")
    value = float(value)
    if math.isnan(value):
        return value
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1] (or NaN), got {value!r}")
    return value


def as_binary_flags(values: object, name: str) -> np.ndarray:
    """A 1-D bool array from booleans or 0/1 numbers, in rank order."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of booleans or 0/1, not a string")
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a 1-D sequence of booleans or 0/1") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one flag per rank), got shape {arr.shape}")
    if arr.size == 0 or arr.dtype == bool:
        return arr.astype(bool)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold booleans or 0/1, got dtype {arr.dtype}")
    bad = np.flatnonzero((arr != 0) & (arr != 1))
    if bad.size:
        raise ValueError(
            f"{name} must hold binary relevance (booleans or 0/1); got {arr[bad[0]].item()!r} at "
            f"rank {int(bad[0]) + 1} (NaN, inf and graded labels are not accepted)"
        )
    return arr.astype(bool)

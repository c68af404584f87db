"""Study statistics: descriptives, pooled-variance t-tests between rankers, z-score outliers.

Implements SPEC.md, "The study" → Statistics: per metric and ranker the mean, standard deviation
and n; every pair of rankers compared with the independent two-sample Student t-test (pooled
variance, df = n1 + n2 − 2), two-tailed, alpha = 0.01; outliers by |z| > 3. Missing values (NaN)
are never dropped silently: every result reports how many there were.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

__all__ = [
    "Descriptive",
    "PairwiseRow",
    "TTest",
    "critical_t",
    "describe",
    "describe_table_markdown",
    "pairwise_t_tests",
    "pairwise_table_markdown",
    "student_t_ppf",
    "student_t_sf",
    "t_test",
    "zscore_outliers",
]

DEFAULT_ALPHA = 0.01
"""Two-tailed significance level of the study (docs/SPEC.md, Statistics)."""


@dataclass(frozen=True)
class Descriptive:
    """Mean, sample standard deviation and counts of one sample (NaN = missing)."""

    mean: float
    """Arithmetic mean of the finite values; NaN when there are none."""
    std: float
    """Sample standard deviation (ddof = 1) of the finite values; NaN when fewer than two."""
    n: int
    """Number of finite values the mean and std are computed from."""
    n_missing: int
    """Number of NaN values in the input, left out of ``mean`` and ``std``."""


@dataclass(frozen=True)
class TTest:
    """Result of an independent two-sample Student t-test with pooled variance."""

    t: float
    """t statistic, positive when ``mean_a > mean_b``."""
    df: int
    """Degrees of freedom ``n_a + n_b − 2``."""
    p: float
    """Two-tailed p-value."""
    alpha: float
    """Two-tailed significance level the test was judged at."""
    critical_t: float
    """``t.ppf(1 − alpha/2, df)``: the |t| a significant result must exceed."""
    significant: bool
    """``|t| > critical_t``."""
    mean_a: float
    """Mean of the finite values of ``a``."""
    mean_b: float
    """Mean of the finite values of ``b``."""
    n_a: int
    """Finite values of ``a`` used in the test."""
    n_b: int
    """Finite values of ``b`` used in the test."""
    n_missing_a: int
    """NaN values of ``a`` left out of the test."""
    n_missing_b: int
    """NaN values of ``b`` left out of the test."""


@dataclass(frozen=True)
class PairwiseRow:
    """One row of a pairwise comparison table: sample ``a`` against sample ``b``."""

    a: str
    b: str
    mean_a: float
    mean_b: float
    t: float
    df: int
    p: float
    critical_t: float
    significant: bool


def _as_sample(values: object, name: str) -> np.ndarray:
    """``values`` as a 1-D float array; NaN means missing, infinities are rejected; text and
    booleans are not numbers (``"1"`` and ``True`` are refused, as the rankers refuse them)."""
    # an array or a Series tells by its dtype; a plain sequence is looked through (numpy
    # reads [0.5, True] as two floats)
    dtype = getattr(values, "dtype", None)
    if dtype is not None and getattr(dtype, "kind", "O") != "O":
        wrong = dtype.kind in "USb"
    else:
        items = values.tolist() if hasattr(values, "tolist") else values
        wrong = isinstance(items, (str, bytes)) or any(
            isinstance(v, (str, bytes, bool, np.bool_)) for v in _flat(items)
        )
    if wrong:
        raise TypeError(
            f"{name} must be a 1-D sequence of numbers (not text or booleans), got {values!r:.200}"
        )
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a 1-D sequence of numbers, got {values!r:.200}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per trial), got shape {arr.shape}")
    if np.isinf(arr).any():
        bad = np.flatnonzero(np.isinf(arr))[:5].tolist()
        raise ValueError(
            f"{name} must hold finite numbers or NaN (missing); infinite values at positions {bad}"
        )
    return arr


def _flat(items: object) -> Iterator[object]:
    """The values of a sequence, one level of nesting looked into (a 2-D input is refused
    later by its shape)."""
    if not isinstance(items, Iterable) or isinstance(items, (str, bytes)):
        return
    for item in items:
        if isinstance(item, (list, tuple)):
            yield from item
        else:
            yield item


def _check_alpha(alpha: object) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)):
        raise TypeError(f"alpha must be a number in (0, 1), got {alpha!r}")
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1) (e.g. 0.01), got {alpha!r}")
    return float(alpha)


def _mean_std(finite: np.ndarray) -> tuple[float, float]:
    n = finite.size
    mean = float(finite.mean()) if n else math.nan
    std = float(finite.std(ddof=1)) if n >= 2 else math.nan
    return mean, std


def describe(values: Sequence[float] | np.ndarray) -> Descriptive:
    """Mean, standard deviation and n of ``values``, with NaNs counted as missing.

    ``mean = Σ x_i / n`` and ``std = sqrt(Σ (x_i − mean)² / (n − 1))`` (sample standard
    deviation, ddof = 1) over the ``n`` finite values; ``n_missing`` counts the NaNs left out.
    Empty or all-NaN input gives NaN mean and std with ``n = 0``; a single value gives NaN std.
    Source: SPEC.md, "The study" → Statistics (mean, standard deviation, n per metric and ranker).
    """
    arr = _as_sample(values, "values")
    missing = np.isnan(arr)
    mean, std = _mean_std(arr[~missing])
    return Descriptive(mean=mean, std=std, n=int((~missing).sum()), n_missing=int(missing.sum()))


def critical_t(df: float, alpha: float = DEFAULT_ALPHA) -> float:
    """Two-tailed critical value of Student's t: ``t.ppf(1 − alpha/2, df)``.

    ``|t| > critical_t(df, alpha)`` rejects equal means at level ``alpha``; 2.6073 at df = 158,
    alpha = 0.01. Source: docs/SPEC.md, "The study" → Statistics; ``scipy.stats.t.ppf``.
    """
    alpha = _check_alpha(alpha)
    if isinstance(df, bool) or not isinstance(df, (int, float, np.integer, np.floating)):
        raise TypeError(f"df must be a number > 0 (degrees of freedom), got {df!r}")
    if not (math.isfinite(df) and df > 0):
        raise ValueError(f"df must be a finite number > 0 (degrees of freedom), got {df!r}")
    return float(student_t_ppf(1.0 - alpha / 2.0, df))


def _t_test(a: object, b: object, alpha: float, name_a: str, name_b: str) -> TTest:
    alpha = _check_alpha(alpha)
    arr_a, arr_b = _as_sample(a, name_a), _as_sample(b, name_b)
    fin_a, fin_b = arr_a[~np.isnan(arr_a)], arr_b[~np.isnan(arr_b)]
    for name, arr, fin in ((name_a, arr_a, fin_a), (name_b, arr_b, fin_b)):
        if fin.size < 2:
            raise ValueError(
                f"{name} needs at least 2 non-NaN values for a t-test, got {fin.size} "
                f"({arr.size - fin.size} NaN of {arr.size})"
            )
    n_a, n_b = fin_a.size, fin_b.size
    mean_a, var_a = float(fin_a.mean()), float(fin_a.var(ddof=1))
    mean_b, var_b = float(fin_b.mean()), float(fin_b.var(ddof=1))
    df = n_a + n_b - 2
    pooled_var = ((n_a - 1) * var_a + (n_b - 1) * var_b) / df
    # Zero pooled variance follows scipy: ±inf (p = 0) for different means, NaN for equal ones.
    with np.errstate(divide="ignore", invalid="ignore"):
        t = float(np.float64(mean_a - mean_b) / np.sqrt(pooled_var * (1.0 / n_a + 1.0 / n_b)))
    p = float(2.0 * student_t_sf(abs(t), df)) if not math.isnan(t) else math.nan
    crit = critical_t(df, alpha)
    return TTest(
        t=t,
        df=df,
        p=p,
        alpha=alpha,
        critical_t=crit,
        significant=bool(abs(t) > crit),
        mean_a=mean_a,
        mean_b=mean_b,
        n_a=n_a,
        n_b=n_b,
        n_missing_a=int(arr_a.size - n_a),
        n_missing_b=int(arr_b.size - n_b),
    )


def t_test(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    alpha: float = DEFAULT_ALPHA,
) -> TTest:
    """Independent two-sample Student t-test with pooled variance, two-tailed.

    ``s_p² = ((n_a − 1) s_a² + (n_b − 1) s_b²) / (n_a + n_b − 2)``,
    ``t = (mean_a − mean_b) / sqrt(s_p² (1/n_a + 1/n_b))``, ``df = n_a + n_b − 2``,
    ``p = 2 · P(T_df > |t|)``; significant when ``|t| > critical_t(df, alpha)``. Equals
    ``scipy.stats.ttest_ind(a, b, equal_var=True)`` on the finite values. NaNs are left out and
    counted in ``n_missing_a`` / ``n_missing_b``, as in :func:`describe`.
    Source: Student (1908); docs/SPEC.md, "The study" → Statistics.
    """
    return _t_test(a, b, alpha, "a", "b")


def pairwise_t_tests(
    samples: Mapping[str, Sequence[float] | np.ndarray], alpha: float = DEFAULT_ALPHA
) -> list[PairwiseRow]:
    """:func:`t_test` for every unordered pair of ``samples``, in the mapping's order.

    For keys ``k_1 .. k_m`` the rows are ``(k_i, k_j)`` for ``i < j``: m(m − 1)/2 rows (six for
    the study's four rankers), none for fewer than two samples.
    Source: docs/SPEC.md, "The study" → Statistics ("every pair of rankers compared").
    """
    alpha = _check_alpha(alpha)
    rows = []
    for name_a, name_b in combinations(samples, 2):
        test = _t_test(
            samples[name_a], samples[name_b], alpha, f"samples[{name_a!r}]", f"samples[{name_b!r}]"
        )
        rows.append(
            PairwiseRow(
                a=name_a,
                b=name_b,
                mean_a=test.mean_a,
                mean_b=test.mean_b,
                t=test.t,
                df=test.df,
                p=test.p,
                critical_t=test.critical_t,
                significant=test.significant,
            )
        )
    return rows


def pairwise_table_markdown(rows: Sequence[PairwiseRow], digits: int = 4) -> str:
    """Markdown table of :func:`pairwise_t_tests` rows; p in ``digits`` significant figures."""
    lines = [
        "| A | B | mean A | mean B | t | df | p | critical t | significant |",
        "|---|---|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.a} | {r.b} | {r.mean_a:.{digits}f} | {r.mean_b:.{digits}f} "
            f"| {r.t:.{digits}f} | {r.df} | {r.p:.{digits}g} | {r.critical_t:.{digits}f} "
            f"| {'yes' if r.significant else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def describe_table_markdown(
    descriptives: Mapping[str, Descriptive], digits: int = 4, name_header: str = "name"
) -> str:
    """Markdown table with one row per entry: name, mean, std, n, missing."""
    lines = [f"| {name_header} | mean | std | n | missing |", "|---|---:|---:|---:|---:|"]
    for name, d in descriptives.items():
        lines.append(
            f"| {name} | {d.mean:.{digits}f} | {d.std:.{digits}f} | {d.n} | {d.n_missing} |"
        )
    return "\n".join(lines) + "\n"


def zscore_outliers(values: Sequence[float] | np.ndarray, threshold: float = 3.0) -> np.ndarray:
    """Positions in ``values`` whose ``|z| > threshold``, with ``z = (x − mean) / std``.

    Mean and std (ddof = 1) are taken over the finite values; NaNs are never outliers but keep
    their positions, so the indices refer to the input. Zero std or fewer than two finite values
    give no outliers. Source: docs/SPEC.md, "The study" → Statistics ("outliers by |z| > 3").
    """
    if isinstance(threshold, bool) or not isinstance(
        threshold, (int, float, np.integer, np.floating)
    ):
        raise TypeError(f"threshold must be a number > 0, got {threshold!r}")
    if not (math.isfinite(threshold) and threshold > 0):
        raise ValueError(f"threshold must be a finite number > 0 (e.g. 3.0), got {threshold!r}")
    arr = _as_sample(values, "values")
    mean, std = _mean_std(arr[~np.isnan(arr)])
    if not (std > 0):  # also catches NaN std (fewer than two finite values)
        return np.empty(0, dtype=np.intp)
    z = (arr - mean) / std
    return np.flatnonzero(np.abs(z) > threshold)  # NaN compares False: never an outlier


def student_t_ppf(q: Any, df: Any) -> Any:
    """Quantile of Student's t with ``df`` degrees of freedom at ``q`` (scalars or arrays):
    ``scipy.special.stdtrit(df, q)``, what ``scipy.stats.t.ppf(q, df)`` computes for ``q`` in
    [0, 1] and ``df > 0``, without importing scipy.stats (0.6 s; scipy.special takes 0.25 s),
    imported on first use so that ``import fairrag_core`` does not pay for it."""
    from scipy import special

    # stdtrit gives +inf at q = 0 where the quantile is -inf (scipy.stats.t.ppf's boundary)
    quantile = np.where(np.asarray(q) == 0, -np.inf, special.stdtrit(df, q))
    return quantile[()] if quantile.ndim == 0 else quantile


def student_t_sf(x: Any, df: Any) -> Any:
    """Survival function ``P(T > x)`` of Student's t with ``df`` degrees of freedom:
    ``scipy.special.stdtr(df, -x)``, what ``scipy.stats.t.sf(x, df)`` computes for ``df > 0``
    (±inf included), scipy.special imported on first use."""
    from scipy import special

    return special.stdtr(df, -x)

"""The FA*IR ranker: ranked group fairness by a binomial m-table (Zehlike et al. 2017)."""

from __future__ import annotations

import sys
from collections.abc import Hashable, Sequence
from functools import lru_cache
from types import MappingProxyType

import numpy as np

from ..ranking import CandidatePool, Ranker, RankingResult
from ..target import OTHERS
from ..validation import check_groups, check_k, check_score_batch

__all__ = ["FairRanker", "adjusted_alpha", "fair_mtable"]

# fairsearchcore.fail_prob.EPS: the bisection on alpha stops when its bracket is this narrow.
_ALPHA_EPS = 1e-16


def fair_mtable(k: int, p: float, alpha: float, *, adjust: bool = True) -> tuple[int, ...]:
    """FA*IR's m-table: ``m(i)``, the fewest protected candidates the first ``i`` may hold.

    Unadjusted: ``m(i) = max(0, F⁻¹(alpha; i, p))`` for ``i = 1..k``, with ``F⁻¹`` the binomial
    quantile (``scipy.stats.binom.ppf``, the smallest m with ``P[Bin(i, p) <= m] >= alpha``).
    Adjusted (``adjust=True``, the default): the same table at an alpha chosen by bisection so
    that the whole table's fail probability (the chance that a ranking drawn from Bin(p) fails
    some prefix test) is closest to ``alpha``; see :func:`adjusted_alpha`. Both follow the
    reference library ``fairsearchcore`` 1.0.4 step for step and equal its tables.
    Source: Zehlike et al. 2017 (FA*IR, CIKM); docs/SPEC.md, "Beyond the paper", ranker 5.

    Tables are cached per ``(k, p, alpha, adjust)``.
    """
    k, p, alpha = _check_mtable_args(k, p, alpha)
    if adjust:
        return _adjusted(k, p, alpha)[0]
    return _unadjusted(k, p, alpha)


def adjusted_alpha(k: int, p: float, alpha: float) -> float:
    """The significance level FA*IR's multiple-test adjustment gives for ``(k, p, alpha)``.

    fairsearchcore's procedure (docs/SPEC.md, ranker 5): bisect on ``a`` in ``[0, alpha]``,
    where the fail probability of the unadjusted table at ``a`` is compared with ``alpha``,
    until the bracket's tables differ by one protected slot in total (or the bracket is
    narrower than 1e-16); return the bracket end (or midpoint) whose fail probability is
    nearest to ``alpha``. Cached per ``(k, p, alpha)``.
    """
    k, p, alpha = _check_mtable_args(k, p, alpha)
    return _adjusted(k, p, alpha)[1]


def _check_mtable_args(k: object, p: object, alpha: object) -> tuple[int, float, float]:
    k = check_k(k)
    return k, _check_p(p), _check_significance(alpha)


def _check_p(p: object) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise TypeError(f"p must be a number in [0, 1] (the minimum protected share), got {p!r}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1] (the minimum protected share), got {p!r}")
    return float(p)


def _check_significance(alpha: object) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)):
        raise TypeError(f"alpha must be a number in (0, 1) (a significance level), got {alpha!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1) (a significance level), got {alpha!r}")
    return float(alpha)


@lru_cache(maxsize=1024)
def _unadjusted(k: int, p: float, alpha: float) -> tuple[int, ...]:
    return tuple(_quantiles(k, p, alpha).tolist())


def _quantiles(k: int, p: float, alpha: float) -> np.ndarray:
    """``max(0, binom.ppf(alpha, i, p))`` for i = 1..k, as ints (ppf(0) is -1, hence the max).

    For 0 < alpha < 1 and valid (i, p), ``binom.ppf`` returns ``binom._ppf`` (scipy's quantile
    kernel) after argument checks that cost ten times the kernel; the bisection calls this
    often, so the kernel is called directly (the public function when scipy lacks it). The
    oracle tests compare the tables with fairsearchcore's, which calls ``binom.ppf``.
    """
    from scipy.stats import binom

    if alpha <= 0.0:
        return np.zeros(k, dtype=np.intp)
    sizes = np.arange(1, k + 1)
    kernel = getattr(binom, "_ppf", None)
    table = binom.ppf(alpha, sizes, p) if kernel is None else kernel(alpha, sizes, p)
    return np.maximum(table, 0.0).astype(np.intp)


def _binomial_pmf(k: int, p: float) -> list[list[float]]:
    """``pmf[b][x] = P[Bin(b, p) = x]`` for b, x = 0..k (one vectorised scipy call; 0 for x > b).

    ``binom.pmf`` returns ``binom._pmf`` (scipy's kernel) inside the support after argument
    checks that cost more than the kernel; the kernel is called directly (the public function
    when scipy lacks it), and outside the support the value is 0, as the public one gives.
    """
    from scipy.stats import binom

    sizes = np.arange(k + 1)
    x, b = np.broadcast_arrays(sizes[None, :], sizes[:, None])
    kernel = getattr(binom, "_pmf", None)
    table = binom.pmf(x, b, p) if kernel is None else kernel(x, b, p)
    return np.where(x <= b, table, 0.0).tolist()


def _fail_probability(table: Sequence[int], pmf: Sequence[Sequence[float]]) -> float:
    """The probability that a Bin(p) ranking fails the table, as fairsearchcore computes it.

    fairsearchcore splits positions ``1..k-1`` (the last position is not looked at) into blocks
    ending where ``m`` steps up by exactly one; block j (size b_j) must bring the protected
    count to at least j. Success probability ``f(1, 0)`` with
    ``f(j, a) = sum_{x >= max(0, j - a)}^{b_j} P[Bin(b_j, p) = x] * f(j + 1, a + x)`` and
    ``f(J + 1, .) = 1``; fail probability ``1 - f(1, 0)`` (0 when the success is 0). The sum over
    x runs in ascending order from 0.0, term by term, as the reference's loop does, and the
    pmf values come from the same scipy function, so the floats are the reference's bit for bit
    (and so are the bisection's comparisons). ``pmf`` is :func:`_binomial_pmf`'s table. Plain
    Python floats: the tables are a few entries long, where numpy's per-call cost dominates.
    """
    steps = []  # 1-based positions where m steps up by one
    previous = 0
    for position, m in enumerate(table[:-1], start=1):
        if m - previous == 1:
            steps.append(position)
        previous = m
    if not steps:
        return 0.0
    blocks = [end - start for start, end in zip([0, *steps[:-1]], steps, strict=True)]
    largest, total = max(blocks), steps[-1]
    # f_next[a] = f(j + 1, a) for a = 0..total (+ padding: states past total are unreachable).
    f_next = [1.0] * (total + largest + 1)
    for j in range(len(blocks), 0, -1):
        size = blocks[j - 1]
        row = pmf[size]
        acc = [0.0] * (total + 1)
        for a in range(total + 1):
            low = max(j - a, 0)
            value = 0.0
            for x in range(size + 1):
                value += row[x] * f_next[a + x] if low <= x else 0.0
            acc[a] = value
        f_next = acc + [0.0] * largest
    success = f_next[0]
    return 0.0 if success == 0 else 1.0 - success


@lru_cache(maxsize=1024)
def _adjusted(k: int, p: float, alpha: float) -> tuple[tuple[int, ...], float]:
    """fairsearchcore's ``RecursiveNumericFailProbabilityCalculator.adjust_alpha``, restated."""

    pmf = _binomial_pmf(k, p)

    def boundary(a: float) -> tuple[float, float, int, list[int]]:
        table = _quantiles(k, p, a).tolist()
        return a, _fail_probability(table, pmf), sum(table), table

    def nearest(*candidates: tuple[float, float, int, list[int]]) -> tuple:
        # The first of the candidates with the smallest |fail - alpha| (the reference's ties).
        return min(candidates, key=lambda b: abs(b[1] - alpha))

    a_min, a_max = 0.0, alpha
    a_mid = (a_min + a_max) / 2
    low, high, mid = boundary(a_min), boundary(a_max), boundary(a_mid)
    chosen = mid
    while low[2] < high[2] and mid[1] != alpha:
        if mid[1] < alpha:
            a_min = a_mid
            low = boundary(a_min)
        elif mid[1] > alpha:
            a_max = a_mid
            high = boundary(a_max)
        a_mid = (a_min + a_max) / 2
        mid = boundary(a_mid)
        chosen = mid
        if high[2] - low[2] == 1 or high[0] - low[0] <= _ALPHA_EPS:
            chosen = nearest(low, high)
            break
        if high[2] - mid[2] == 1 and mid[2] - low[2] == 1:
            chosen = _middle_rule(low, mid, high, alpha)
            break
    return tuple(chosen[3]), chosen[0]


def _middle_rule(low: tuple, mid: tuple, high: tuple, alpha: float) -> tuple:
    low_diff, mid_diff, high_diff = (abs(b[1] - alpha) for b in (low, mid, high))
    if mid_diff <= high_diff and mid_diff <= low_diff:
        return mid
    if low_diff <= mid_diff and low_diff <= high_diff:
        return low
    return high


_BATCH_CELLS = 65_536
"""Candidates per block of :meth:`FairRanker.rank_batch` (a block's arrays stay in cache)."""


def _fair_block(
    scores: np.ndarray, protected: np.ndarray, k: int, table: Sequence[int]
) -> np.ndarray:
    """:meth:`FairRanker.rank_batch` for one block of pools (``1 <= k <= n``).

    Each pool is sorted once by a 64-bit key holding its group (protected first) and its
    score's order (the IEEE bits made monotonic, best first, the lowest bit dropped to make
    room): its protected candidates come first, best first, then its others. Numpy's fastest
    sort is not stable, so a pool where two of a group's first k + 1 keys are equal (equal
    scores, or scores one unit in the last place apart) is sorted again, stably by score and
    then by group, as the single call orders them. Then the rule, position by position for
    every pool at once, reading each group's next candidate from that order.
    """
    n_pools, n = scores.shape
    key = _sort_keys(scores, protected)
    order = np.argsort(key, axis=1)
    n_protected = np.count_nonzero(protected, axis=1)
    base = np.arange(n_pools)[:, None] * n
    flat_order, flat_key = order.reshape(-1), key.reshape(-1)
    # Each group's first k + 1 sorted keys (columns clipped to the pool), and whether two
    # neighbours there are both of the group: equal keys then make the fast sort ambiguous.
    columns = np.arange(k + 1)
    n_others = n - n_protected
    redo_rows = np.zeros(n_pools, dtype=bool)
    for offset, size in ((0, n_protected), (n_protected[:, None], n_others)):
        at = flat_order[base + np.minimum(offset + columns, n - 1)]
        keys = flat_key[base + at]
        same = (keys[:, 1:] == keys[:, :-1]) & (columns[1:] < size[:, None])
        redo_rows |= same.any(axis=1)
    redo = np.flatnonzero(redo_rows)
    if redo.size:
        stable = np.argsort(-scores[redo], axis=1, kind="stable")
        member = np.take_along_axis(protected[redo], stable, axis=1)
        order[redo] = np.take_along_axis(stable, np.argsort(~member, axis=1, kind="stable"), axis=1)
    base = base[:, 0]
    flat_scores = scores.reshape(-1)
    taken_protected = np.zeros(n_pools, dtype=np.intp)
    taken_others = np.zeros(n_pools, dtype=np.intp)
    chosen = np.empty((n_pools, k), dtype=np.intp)
    last = n - 1
    for position in range(k):
        next_protected = flat_order[base + np.minimum(taken_protected, last)]
        next_other = flat_order[base + np.minimum(n_protected + taken_others, last)]
        take = (taken_protected < n_protected) & (
            (n_protected + taken_others >= n)
            | (taken_protected < table[position])
            | (flat_scores[base + next_protected] >= flat_scores[base + next_other])
        )
        chosen[:, position] = np.where(take, next_protected, next_other)
        taken_protected += take
        taken_others += ~take
    return chosen


def _equal_strings(labels: np.ndarray, label: str | bytes) -> np.ndarray:
    """``labels == label`` for a fixed-width string array, as :meth:`FairRanker.rank` compares
    (its labels, read with ``tolist``, lose numpy's trailing NULs): each fixed-width cell is
    compared a machine word at a time, three times faster than numpy's string comparison."""
    width = labels.dtype.itemsize
    wanted = np.array([label], dtype=labels.dtype)
    trailing_null = label[-1:] in ("\0", b"\0")
    if trailing_null or wanted[0] != label:  # never equal to a label read back
        return np.zeros(labels.shape, dtype=bool)
    word = np.uint64 if width % 8 == 0 else np.uint32 if width % 4 == 0 else np.uint8
    cells = np.ascontiguousarray(labels).view(word).reshape(*labels.shape, -1)
    parts = wanted.view(word)
    equal = cells[..., 0] == parts[0]
    for i in range(1, parts.shape[0]):
        equal &= cells[..., i] == parts[i]
    return equal


def _sort_keys(scores: np.ndarray, protected: np.ndarray) -> np.ndarray:
    """(B, n) unsigned keys whose ascending order is: protected before others, then higher
    score first (equal scores, and scores one unit in the last place apart, equal keys)."""
    if np.signbit(scores).any():  # negative scores (or -0.0): make the bits monotonic first
        normalised = scores + 0.0  # -0.0 becomes 0.0: equal floats get equal keys
        bits = normalised.view(np.int64)
        flip = bits >> 63
        flip &= _LOW_63
        bits ^= flip  # negative floats' bits run backwards: reverse them
        bits ^= _MIN_64  # now unsigned order = float order
        key: np.ndarray = normalised.view(np.uint64)
        np.invert(key, out=key)  # best score first
    else:  # non-negative floats: their bits already run in their order
        key = np.invert(np.ascontiguousarray(scores).view(np.uint64))
    key >>= _ONE
    others = ~protected
    if _LITTLE_ENDIAN:  # the group in the top bit, written into each key's top byte
        top = key.view(np.uint8)[..., 7::8]
        top |= others.view(np.uint8) << np.uint8(7)
    else:
        key |= others.astype(np.uint64) << _SHIFT
    return key


_LITTLE_ENDIAN = sys.byteorder == "little"
_LOW_63 = np.int64(0x7FFF_FFFF_FFFF_FFFF)
_MIN_64 = np.int64(-(1 << 63))
_ONE = np.uint64(1)
_SHIFT = np.uint64(63)


class FairRanker(Ranker):
    """FA*IR: ranked group fairness with a binomial m-table (Zehlike et al. 2017, CIKM).

    Binary target only. ``m(i)`` (:func:`fair_mtable`, adjusted for multiple tests by default)
    is the fewest protected candidates the first ``i`` positions may hold if the ranking is to
    pass a binomial test at significance ``alpha`` against a minimum protected share ``p``.
    Positions ``i = 1..k`` are filled in order: when the protected count so far is below
    ``m(i)``, the best remaining protected candidate; otherwise the best remaining candidate.
    On equal scores the protected candidate goes first (fairsearchcore's ``>=``); within a
    group ties keep pool order. The table is that of ``min(k, n)``, the length returned.
    Candidates of any label other than ``protected`` (``None``, unknown, included) are never
    protected. When the pool holds fewer protected candidates than ``m(k)``, all of them are
    shown and the missing ``m(k) - (# protected)`` are reported in
    :attr:`RankingResult.quota_shortfall`.

    Parameters: ``p`` defaults to the target's protected share (``target_share``, 0.5 by
    default); ``alpha = 0.1`` (the paper's and fairsearchcore's examples); ``adjust_alpha=True``
    applies fairsearchcore's multiple-test adjustment. Source: docs/SPEC.md, "Beyond the paper",
    ranker 5; rankings and tables equal fairsearchcore 1.0.4's. Deterministic; ``seed`` is
    accepted for a uniform interface and unused.
    """

    name = "fair"
    deterministic = True
    binary_target = True
    in_default_study = True
    knobs = ("p", "alpha")  # alpha: FA*IR's significance level
    binary_knobs = ("p",)
    sweep_grid = MappingProxyType({"p": (0.5, 0.6, 0.7, 0.8, 0.9), "alpha": (0.1,)})

    def __init__(
        self,
        *,
        p: float | None = None,
        alpha: float = 0.1,
        adjust_alpha: bool = True,
        **fairness: object,
    ) -> None:
        super().__init__(**fairness)  # type: ignore[arg-type]
        target = self.target
        assert target is not None  # requires_target
        others = [g for g, share in target.as_dict().items() if g != target.protected and share]
        if target.protected is None or len(others) > 1:  # binary: protected and one other bucket
            raise ValueError(
                "the fair ranker (FA*IR) takes a binary target: protected=<group> (and "
                "target_share or p), or two groups such as {'female': 0.5, 'male': 0.5} with "
                f"protected naming one of them; got target {target.as_dict()!r}"
                + ("" if target.protected is not None else " and no protected group")
            )
        self.p = target.protected_share if p is None else _check_p(p)
        self.alpha = _check_significance(alpha)
        if not isinstance(adjust_alpha, bool):
            raise TypeError(f"adjust_alpha must be True or False, got {adjust_alpha!r}")
        self.adjust_alpha = adjust_alpha
        self._protected_code = target.groups.index(target.protected)
        self._tables: dict[int, tuple[int, ...]] = {}

    def mtable(self, k: int) -> tuple[int, ...]:
        """The m-table this ranker uses for a list of length ``k``."""
        table = self._tables.get(k)
        if table is None:
            table = self._tables[k] = fair_mtable(k, self.p, self.alpha, adjust=self.adjust_alpha)
        return table

    def _rank(self, pool: CandidatePool, k: int, rng: np.random.Generator) -> np.ndarray:
        return self._rank_detailed(pool, k, rng).indices

    def _rank_detailed(
        self, pool: CandidatePool, k: int, rng: np.random.Generator
    ) -> RankingResult:
        table = self.mtable(k)
        order = np.argsort(-pool.scores, kind="stable")
        is_protected = pool.codes[order] == self._protected_code  # type: ignore[index]
        protected_order = order[is_protected]
        n_protected = protected_order.shape[0]
        # At most k of each group can be shown: only their heads are looked at.
        protected = protected_order[:k].tolist()
        others = order[~is_protected][:k].tolist()
        protected_scores = pool.scores[protected].tolist()
        other_scores = pool.scores[others].tolist()
        n_head, n_others = len(protected), len(others)
        chosen = []
        i_protected = i_others = 0
        for position in range(k):
            if i_protected < n_head and (
                i_others >= n_others
                or i_protected < table[position]
                or protected_scores[i_protected] >= other_scores[i_others]
            ):
                chosen.append(protected[i_protected])
                i_protected += 1
            else:
                chosen.append(others[i_others])
                i_others += 1
        missing = table[k - 1] - n_protected
        shortfall = {self.target.protected: missing} if missing > 0 else {}  # type: ignore[union-attr]
        return RankingResult(np.asarray(chosen, dtype=np.intp), shortfall)

    def rank_batch(
        self,
        scores: np.ndarray | Sequence[Sequence[float]],
        groups: np.ndarray | Sequence[Sequence[Hashable]],
        k: int = 5,
    ) -> np.ndarray:
        """FA*IR rankings of B pools at once: (B, n) scores and group labels -> (B, min(k, n))
        pool indices, row b equal to ``rank(scores[b], groups[b], k)``.

        The same rule as :meth:`rank`, position by position for every pool together: each
        pool's candidates sorted by score (stable, as there), its protected and other
        candidates in that order, and at position i the best protected one when the pool has
        shown fewer than ``m(i)`` or it scores at least the best other one (the table is that of
        ``min(k, n)``, one for all the pools). ``groups``: one row of labels per pool, read as
        :meth:`rank` reads them (a label equal to ``protected`` is protected); a numpy array of
        strings or integers is compared at once. Shortfalls are not reported here
        (:meth:`rank_detailed` reports them pool by pool).
        """
        scores = check_score_batch(scores)
        k = check_k(k)
        n_pools, n = scores.shape
        protected = self._protected_batch(groups, n_pools, n)
        if n == 0:
            return np.empty((n_pools, 0), dtype=np.intp)
        k = min(k, n)
        table = self.mtable(k)
        chosen = np.empty((n_pools, k), dtype=np.intp)
        step = max(1, _BATCH_CELLS // n)  # blocks of pools whose arrays stay in cache
        for start in range(0, n_pools, step):
            block = slice(start, start + step)
            chosen[block] = _fair_block(scores[block], protected[block], k, table)
        return chosen

    def _protected_batch(self, groups: object, n_pools: int, n: int) -> np.ndarray:
        """(B, n) booleans: which candidates are protected, read as :meth:`rank` reads labels
        (``groups`` must hold one row of n labels per pool)."""
        protected = self.target.protected  # type: ignore[union-attr]
        if isinstance(groups, np.ndarray) and groups.dtype.kind in "USiu":
            if groups.shape != (n_pools, n):
                raise ValueError(
                    f"groups must hold one row of labels per pool, shape {(n_pools, n)} like "
                    f"scores; got shape {groups.shape}"
                )
            # A label equals the protected one only if it is of a comparable kind (as the
            # target's dict lookup finds it): str with str, bytes with bytes, numbers.
            kind = {"U": str, "S": bytes}.get(groups.dtype.kind, (int, float, np.number))
            if not isinstance(protected, kind):
                return np.zeros((n_pools, n), dtype=bool)
            if isinstance(protected, (str, bytes)):
                return _equal_strings(groups, protected)
            return np.asarray(groups == protected)
        if isinstance(groups, (str, bytes)) or not isinstance(groups, (Sequence, np.ndarray)):
            raise TypeError(
                "groups must be one sequence of labels per pool (a 2-D array or a list of "
                f"lists), got {groups!r:.200}"
            )
        if len(groups) != n_pools:
            raise ValueError(
                f"groups has {len(groups)} rows but scores has {n_pools} pools; give one row "
                "of labels per pool"
            )
        labels: list[Hashable] = []
        for b, row in enumerate(groups):
            if isinstance(row, np.ndarray):
                row = row.tolist()
            elif isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
                raise TypeError(
                    f"groups[{b}] must be a sequence of labels, one per candidate, got {row!r:.100}"
                )
            if len(row) != n:
                raise ValueError(
                    f"groups[{b}] has {len(row)} labels but scores has {n} candidates per "
                    "pool; give one per candidate"
                )
            labels.extend(row)
        index = self.target._index  # type: ignore[union-attr]  # what Target.encode reads
        others, code = index[OTHERS], self._protected_code
        get = index.get
        try:
            mask = np.fromiter(
                (get(label, others) == code for label in labels), dtype=bool, count=len(labels)
            )
        except TypeError:  # an unhashable label: name its pool and position
            for b in range(n_pools):
                try:
                    check_groups(labels[b * n : (b + 1) * n], n)
                except TypeError as exc:
                    raise TypeError(f"groups[{b}]: {exc}") from None
            raise
        return mask.reshape(n_pools, n)

    def __repr__(self) -> str:
        return (
            f"FairRanker(protected={self.target.protected!r}, p={self.p}, "  # type: ignore[union-attr]
            f"alpha={self.alpha}, adjust_alpha={self.adjust_alpha})"
        )

"""``fairrag sweep``: the fairness–utility frontier of every ranker's knobs on the study's pools.

docs/SPEC.md, "Sweep". For each ranker and each setting of its knobs (a grid), the study's
questions are ranked from their pools of ``pool_size`` candidates: a batch of ``samples``
rankings per question from ``ranker.sample`` (a deterministic ranker repeats its one ranking;
FA*IR ranks every question's pool in one call, the same rankings), except the amortized ranker,
whose every draw updates its ledger: it runs as one stream over the questions in trial order,
one ranking each, on a fresh in-memory ledger. One point per setting: mean per-query exposure
disparity, amortized disparity, nDCG@k, P@k and (where rankings were sampled) expected exposure
EE-L; the Pareto front (lower disparity, higher nDCG@k) is marked.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import ConfigDict, ValidationInfo, field_validator, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from fairrag_core import RANKERS, Ranker, available_rankers, make_ranker
from fairrag_core.metrics import (
    amortized_disparity,
    expected_exposure,
    exposure_disparity,
    ndcg_at_k,
    precision_at_k,
)

from . import options
from .config import Flag, Refused, StudyConfig, check_by_flag
from .data import load_documents, locate_data
from .dataset import TREC_GENDER, StudyDataset
from .embedding import load_embedding_model
from .errors import OutputFolderError
from .many_rankings import batch_rankings
from .phases.data import corpus_and_trials
from .phases.index import PoolCheckedCollection, open_index, query_embeddings
from .pools import QuestionPool, query_pools
from .progress import progress_bar
from .study import phase_timer

__all__ = [
    "Setting",
    "SweepConfig",
    "default_grid",
    "expand",
    "grid_flag",
    "knobs",
    "load_pools",
    "pareto_front",
    "run_sweep",
    "sweep_point",
]


def knobs(ranker: str) -> tuple[str, ...]:
    """The knobs a grid may set for ``ranker``: its declared :attr:`~fairrag_core.Ranker.knobs`
    (fair's ``alpha`` is FA*IR's significance level); ValueError for an unknown ranker."""
    if ranker not in RANKERS:
        raise ValueError(f"unknown ranker {ranker!r}; known rankers: {available_rankers()}")
    return RANKERS[ranker].knobs


def default_grid(dataset: StudyDataset = TREC_GENDER) -> dict[str, dict[str, tuple[float, ...]]]:
    """Every registered ranker's declared :attr:`~fairrag_core.Ranker.sweep_grid` (23 points for
    the six built in: small by design, on the study's pools the representative ranker's gain
    barely moves it and FA*IR's p below 0.5 changes nothing at k = 5); ``--grid`` replaces one
    ranker's grid. For a target of several groups, without the rankers that take only a binary
    target (FA*IR) and without the knobs that set the protected share (forced exposure then
    runs at the data set's target, one point)."""
    grid: dict[str, dict[str, tuple[float, ...]]] = {}
    for name, cls in RANKERS.items():
        if dataset.target is not None and cls.binary_target:
            continue
        binary = cls.binary_knobs if dataset.target is not None else ()
        grid[name] = {k: tuple(v) for k, v in cls.sweep_grid.items() if k not in binary}
    return grid


COLUMNS = (
    "ranker",
    "setting",
    "mode",
    "rankings_per_question",
    "questions",
    "k",
    "disparity",
    "amortized_disparity",
    "ndcg_at_k",
    "precision_at_k",
    "ee_loss",
    "pareto",
    "pareto_amortized",
)


@dataclass(frozen=True)
class Setting:
    """One point of the sweep: a ranker and the values of its knobs."""

    ranker: str
    params: tuple[tuple[str, float], ...] = ()

    @property
    def label(self) -> str:
        """``alpha=4;gain=2`` (empty for a ranker without knobs)."""
        return ";".join(f"{key}={value:g}" for key, value in self.params)

    @property
    def streamed(self) -> bool:
        """Whether the ranker keeps state across rankings (then it is run as a stream)."""
        return RANKERS[self.ranker].stateful

    def build(self, seed: int, dataset: StudyDataset = TREC_GENDER) -> Ranker:
        """The ranker, with the data set's fairness target (a binary target's ``target_share``
        may be a knob)."""
        fairness: dict[str, Any] = {}
        if RANKERS[self.ranker].requires_target:
            fairness = dataset.target_arguments()
        return make_ranker(self.ranker, seed=seed, **{**fairness, **dict(self.params)})


def expand(grid: Mapping[str, Mapping[str, Sequence[float]]]) -> list[Setting]:
    """Every combination of each ranker's knob values, rankers in the grid's order."""
    settings = []
    for ranker, knobs in grid.items():
        keys = list(knobs)
        for values in itertools.product(*(knobs[key] for key in keys)):
            settings.append(Setting(ranker, tuple(zip(keys, values, strict=True))))
    return settings


def grid_flag(text: str) -> tuple[str, dict[str, tuple[float, ...]]]:
    """``RANKER:KEY=V,V;KEY=V`` (one ranker's grid, every combination), checked by building
    each ranker with the core's own rules; a bad value is an ``argparse.ArgumentTypeError``."""
    accepted = "; expected RANKER:KEY=V,V[;KEY=V,...], e.g. 'stochastic:alpha=1,2,4,8'"
    ranker, colon, rest = text.partition(":")
    ranker = ranker.strip()
    if ranker not in available_rankers():
        raise argparse.ArgumentTypeError(
            f"{text!r} names no known ranker {ranker!r}; known rankers: "
            f"{available_rankers()}{accepted}"
        )
    declared = knobs(ranker)
    grid: dict[str, tuple[float, ...]] = {}
    for part in rest.split(";") if colon and rest.strip() else []:
        key, equals, values = (x.strip() for x in part.partition("="))
        if key not in declared or not equals:
            known = ", ".join(declared) or "none"
            raise argparse.ArgumentTypeError(
                f"{text!r}: {part.strip()!r} is not a knob of {ranker} (its knobs: {known})"
                f"{accepted}"
            )
        if key in grid:
            raise argparse.ArgumentTypeError(f"{text!r} sets {key} twice{accepted}")
        try:
            numbers = tuple(float(v) for v in values.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: {values!r} is not a comma-separated list of numbers{accepted}"
            ) from None
        repeated = sorted({n for n in numbers if numbers.count(n) > 1})
        if repeated:  # two identical rows, both on the front
            raise argparse.ArgumentTypeError(
                f"{text!r}: {key} repeats {', '.join(f'{n:g}' for n in repeated)}{accepted}"
            )
        grid[key] = numbers
    if declared and not grid:  # its defaults, in a row that would not say which they are
        raise argparse.ArgumentTypeError(
            f"{text!r} gives none of {ranker}'s knobs ({', '.join(declared)}): name the values "
            f"to sweep{accepted}"
        )
    for setting in expand({ranker: grid}):
        try:
            setting.build(0)
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(
                f"{text!r}: {setting.label or ranker} is not accepted: {exc}"
            ) from None
    return ranker, grid


def _grid_help() -> str:
    return (
        "one ranker's grid, replacing its default (repeatable): RANKER:KEY=V,V[;KEY=V,...]; "
        "knobs: "
        + "; ".join(f"{name} {', '.join(knobs(name)) or '(none)'}" for name in available_rankers())
    )


@pydantic_dataclass(config=ConfigDict(arbitrary_types_allowed=True))
class SweepConfig:
    """Every knob of a sweep run; the pools are the study's (its defaults, its seeds).
    Validated when made: a bad value raises ``ValueError`` naming the field."""

    study: StudyConfig = field(default_factory=lambda: StudyConfig(llm="none"))
    rankers: Annotated[
        tuple[str, ...] | None,
        Flag(
            "--rankers",
            options.rankers,
            "comma-separated rankers to sweep (default: every ranker that takes the data "
            "set's target)",
        ),
    ] = None
    """The rankers swept; ``None``: every ranker of :func:`default_grid` for the data set."""
    grid: Annotated[
        dict[str, dict[str, tuple[float, ...]]], Flag("--grid", grid_flag, _grid_help, repeat=True)
    ] = field(default_factory=dict)
    """Per-ranker grids replacing :func:`default_grid`'s."""
    samples: Annotated[
        int,
        Flag(
            "--samples",
            options.int_in(1, options.SAMPLES_LIMIT, "rankings drawn per question and ranker"),
            "sampled rankings per question (default 100)",
        ),
    ] = 100
    out: Annotated[
        Path,
        Flag("--out", Path, "folder for sweep.csv and frontier.png (default fairrag-sweep)"),
    ] = Path("fairrag-sweep")

    @field_validator("*", mode="before")
    @classmethod
    def _by_flag(cls, value: Any, info: ValidationInfo) -> Any:
        return check_by_flag(value, info, cls)

    @field_validator("grid", mode="before")
    @classmethod
    def _one_grid_each(cls, value: Any) -> Any:
        if not isinstance(value, list):  # --grid, repeated: (ranker, its grid) pairs
            return value
        grid: dict[str, Any] = {}
        for ranker, values in value:
            if ranker in grid:
                raise Refused(
                    f"grid: {ranker} is given twice",
                    f"{ranker} is given twice; give each ranker's grid once",
                )
            grid[ranker] = values
        return grid

    @model_validator(mode="after")
    def _together(self) -> SweepConfig:
        if self.rankers is None:
            self.rankers = tuple(default_grid(self.study.dataset))
        for ranker in self.grid:
            if ranker not in self.rankers:
                raise Refused(
                    f"grid: {ranker} is not among rankers {self.rankers}",
                    f"{ranker} is not among --rankers {','.join(self.rankers)}; add it there "
                    "or drop its grid",
                    "grid",
                )
        try:
            self.settings()  # a ranker or knob the data set's target rules out
        except ValueError as exc:
            raise Refused(f"rankers/grid: {exc}", str(exc), "--rankers/--grid") from None
        return self

    def settings(self) -> list[Setting]:
        """The points to run, in ranker order (a ranker the data set's target rules out, e.g.
        FA*IR with several groups, is an error naming it)."""
        dataset = self.study.dataset
        defaults = default_grid(dataset)
        rankers = self.rankers or tuple(defaults)
        if dataset.target is not None:
            binary = [r for r in rankers if RANKERS[r].binary_target]
            binary += [
                f"{r}:{knob}"
                for r, grid in self.grid.items()
                for knob in grid
                if knob in RANKERS[r].binary_knobs
            ]
            if binary:
                raise ValueError(
                    f"{', '.join(binary)} set the protected group's share, which needs a binary "
                    f"target; the data set's target has {len(dataset.groups)} groups "
                    f"({dataset.target_label()})"
                )
        return expand({r: self.grid.get(r, defaults[r]) for r in rankers})

    def left_out(self) -> dict[str, str]:
        """What the default grid leaves out for the data set's target, with why: a ranker
        that takes only a binary target (FA*IR) and the knobs that set the protected share, for
        a target of several groups (a user trial found them left out with no word, where the
        study logs its rankers left out). Empty when the rankers are not the default set."""
        dataset = self.study.dataset
        if dataset.target is None or self.rankers != tuple(default_grid(dataset)):
            return {}
        why = f"the data set's target has {len(dataset.groups)} groups ({dataset.target_label()})"
        left: dict[str, str] = {}
        for name, cls in RANKERS.items():
            knobs = [k for k in cls.sweep_grid if k in cls.binary_knobs and name not in self.grid]
            if cls.binary_target:
                left[name] = f"it takes a binary target only; {why}"
            elif knobs:
                verb = "sets" if len(knobs) == 1 else "set"
                left[f"{name}:{','.join(knobs)}"] = (
                    f"{verb} the protected group's share, which needs a binary target; {why}; "
                    f"{name} runs at the data set's target"
                )
        return left


def load_pools(config: StudyConfig, log: Callable[[str], None]) -> list[QuestionPool]:
    """The study's pools: its corpus, index (opened and verified as the study does, built when
    missing; a short pool refused), trial plan, per-trial seeds and question embeddings
    (:func:`fairrag_study.pools.query_pools`, the same pools the study's metrics over many
    rankings use)."""
    if config.text != "csv":
        raise ValueError(
            f"the sweep ranks the pools of the CSV text's index; text={config.text!r} is not "
            "supported there (run `fairrag study --text wikipedia` for Wikipedia text)"
        )
    dataset = config.dataset
    documents = load_documents(locate_data(config.data, cache_dir=config.cache_dir), dataset)
    corpus, trials = corpus_and_trials(config.corpus_settings(), documents)
    model = load_embedding_model(
        config.model, config.embedding_backend, cache_dir=config.cache_dir, log=log
    )
    client, where, name, added = open_index(config.index_settings(), corpus, model, None, log)
    try:
        log(f"index {where}: {len(corpus)} documents ({added} embedded now)")
        # A short pool means a damaged index: refused as the study refuses it.
        collection = PoolCheckedCollection(client.get_collection(name), len(corpus), where)
        embeddings = query_embeddings(model)
        embeddings.prefill([trial.question for trial in trials])
        return query_pools(
            collection,
            [embeddings.embed_query(trial.question) for trial in trials],
            trials,
            corpus,
            pool_size=config.pool_size,
            group_key=dataset.group_key,
        )
    finally:
        client.close()


def _ranking_figures(
    pool: QuestionPool, ranking: np.ndarray, k: int, target: Mapping[str, Any]
) -> tuple[float, float, float]:
    """(exposure disparity, nDCG@k, P@k) of one ranking, by the core's metrics (``target``:
    the data set's ``target_arguments()``)."""
    shown = [pool.groups[i] for i in ranking.tolist()]
    flags = pool.relevant[ranking]
    return (
        exposure_disparity(shown, **target),
        ndcg_at_k(flags, k, n_relevant=pool.n_relevant),
        precision_at_k(flags, k),
    )


def sweep_point(
    setting: Setting,
    pools: Sequence[QuestionPool],
    k: int,
    samples: int,
    seed: int,
    dataset: StudyDataset = TREC_GENDER,
) -> dict[str, Any]:
    """One setting's row of ``sweep.csv`` (docs/SPEC.md, "Sweep"), disparities against the
    data set's target."""
    ranker = setting.build(seed, dataset)
    target = dataset.target_arguments()
    per_query: list[np.ndarray] = []  # (disparity, nDCG, P) means per question
    losses: list[float] = []
    labels: list[np.ndarray] = []  # (rankings, k) group labels per question
    batch = None if setting.streamed else batch_rankings(ranker, pools, k)
    for pool in pools:
        if setting.streamed:  # each draw reads and updates the ledger: one ranking, in order
            rankings = ranker.rank(pool.scores, pool.groups, k, rng=pool.trial.seed)[None, :]
        else:
            if batch is not None:  # FA*IR: every pool ranked in one call, its ranking repeated
                rankings = np.tile(batch[pool.trial.index], (samples, 1))
            else:
                rankings = ranker.sample(pool.scores, pool.groups, k, samples, rng=pool.trial.seed)
            losses.append(expected_exposure(rankings, pool.groups, **target).loss)
        # Each distinct ranking is scored once and weighted by how often it was drawn.
        distinct, counts = np.unique(rankings, axis=0, return_counts=True)
        figures = np.array([_ranking_figures(pool, row, k, target) for row in distinct])
        per_query.append(counts @ figures / counts.sum())
        labels.append(np.asarray(pool.groups, dtype=object)[rankings])
    # Stream j is the j-th ranking of every question in trial order: each is a stream a user
    # would see, so its amortized disparity compares with the amortized ranker's one stream.
    streams = np.stack(labels, axis=1)  # (rankings, questions, k)
    amortized = [amortized_disparity(stream, **target) for stream in streams]
    means = np.mean(per_query, axis=0)
    return {
        "ranker": setting.ranker,
        "setting": setting.label,
        "mode": "stream" if setting.streamed else "sampled",
        "rankings_per_question": streams.shape[0],
        "questions": len(pools),
        "k": k,
        "disparity": float(means[0]),
        "amortized_disparity": float(np.mean(amortized)),
        "ndcg_at_k": float(means[1]),
        "precision_at_k": float(means[2]),
        "ee_loss": float(np.mean(losses)) if losses else math.nan,
    }


def pareto_front(disparity: Sequence[float], utility: Sequence[float]) -> list[bool]:
    """Whether each point is on the Pareto front: no other point has a disparity as low and a
    utility as high, one of them strictly better (equal points are all on the front)."""
    points = list(zip(disparity, utility, strict=True))
    return [
        not any((d2 <= d and u2 >= u) and (d2 < d or u2 > u) for d2, u2 in points)
        for d, u in points
    ]


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """``sweep.csv``: one row per setting, :data:`COLUMNS` (EE-L empty where not sampled)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {
                    key: ("" if isinstance(v, float) and math.isnan(v) else v)
                    for key, v in row.items()
                }
            )
    tmp.replace(path)


def plot_frontier(path: Path, rows: Sequence[Mapping[str, Any]], k: int) -> None:
    """``frontier.png``: nDCG@k against per-query and amortized disparity, one colour per
    ranker, the Pareto front joined and ringed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    rankers = list(dict.fromkeys(row["ranker"] for row in rows))
    colours = {r: plt.get_cmap("tab10")(i) for i, r in enumerate(rankers)}
    for ax, x, front, title in (
        (axes[0], "disparity", "pareto", "mean per-query exposure disparity"),
        (axes[1], "amortized_disparity", "pareto_amortized", "amortized disparity (stream)"),
    ):
        for ranker in rankers:
            mine = [row for row in rows if row["ranker"] == ranker]
            ax.scatter(
                [r[x] for r in mine], [r["ndcg_at_k"] for r in mine], color=colours[ranker],
                label=ranker, s=30,
            )  # fmt: skip
        best = sorted((row for row in rows if row[front]), key=lambda row: row[x])
        ax.plot([r[x] for r in best], [r["ndcg_at_k"] for r in best], "k--", lw=1)
        ax.scatter(
            [r[x] for r in best], [r["ndcg_at_k"] for r in best], s=120, facecolors="none",
            edgecolors="black", label="Pareto front",
        )  # fmt: skip
        ax.set_xlabel(f"{title} (lower is fairer)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"mean nDCG@{k}")
    axes[1].legend(fontsize=8, loc="lower right")
    fig.suptitle("fairrag sweep: the fairness–utility frontier")
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)


SWEEP_MARK = ".fairrag-sweep"
"""The file a sweep writes beside its outputs: the next sweep replaces what it marks."""
SWEEP_FILES = ("sweep.csv", "frontier.png", SWEEP_MARK)


def check_sweep_folder(out: Path) -> None:
    """``OutputFolderError`` when ``out`` is a file, or holds files an earlier sweep did not
    write (another program's ``sweep.csv``, a study's outputs): a sweep replaces only its own
    files (docs/SPEC.md, "Sweep")."""
    if out.exists() and not out.is_dir():
        raise OutputFolderError(f"--out {str(out)!r} is a file, not a folder")
    if not out.is_dir():
        return
    present = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if not p.is_dir())
    marked = (out / SWEEP_MARK).is_file() or _an_earlier_sweeps(out / "sweep.csv")
    ours = {*SWEEP_FILES, "sweep.csv.tmp", "frontier.png.tmp.png"}  # a killed sweep's too
    foreign = [name for name in present if not (marked and name in ours)]
    if foreign:
        raise OutputFolderError(
            f"--out {str(out)!r} holds files a sweep did not write: {', '.join(foreign[:8])}. "
            "A sweep replaces only its own outputs; choose an empty or new folder"
        )


def _an_earlier_sweeps(path: Path) -> bool:
    """Whether ``path`` is a ``sweep.csv`` a sweep wrote before sweeps marked their folder (its
    header is :data:`COLUMNS`)."""
    try:
        with path.open(encoding="utf-8") as handle:
            return handle.readline(10_000).strip() == ",".join(COLUMNS)
    except (OSError, UnicodeDecodeError):
        return False


def run_sweep(config: SweepConfig, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run the sweep and write ``sweep.csv`` and ``frontier.png`` to ``config.out``."""
    timings: dict[str, float] = {}
    phase = phase_timer(timings, log)

    study = config.study
    settings = config.settings()
    out = Path(config.out)
    check_sweep_folder(out)  # before any work
    for name, reason in config.left_out().items():
        log(f"left out of the sweep: {name}: {reason}")
    with phase("pools"):
        pools = load_pools(study, log)
        log(f"{len(pools)} questions, pools of {study.pool_size}, k = {study.k}")
    if any(setting.streamed for setting in settings):
        log(
            "amortized: not batch-sampled (every draw updates its ledger); run as one stream "
            f"over the {len(pools)} questions in trial order, one ranking each, on a fresh "
            "in-memory ledger per setting"
        )
    rows = []
    with phase("sweep"):
        bar = progress_bar(study.progress, len(settings), "sweep", "setting")
        for setting in settings:
            rows.append(
                sweep_point(setting, pools, study.k, config.samples, study.seed, study.dataset)
            )
            bar.update(1)
        bar.close()
    front = pareto_front([r["disparity"] for r in rows], [r["ndcg_at_k"] for r in rows])
    amortized_front = pareto_front(
        [r["amortized_disparity"] for r in rows], [r["ndcg_at_k"] for r in rows]
    )
    for row, on, on_amortized in zip(rows, front, amortized_front, strict=True):
        row["pareto"], row["pareto_amortized"] = on, on_amortized
    with phase("write"):
        out.mkdir(parents=True, exist_ok=True)
        (out / SWEEP_MARK).write_text("written by fairrag sweep: sweep.csv, frontier.png\n")
        write_csv(out / "sweep.csv", rows)
        plot_frontier(out / "frontier.png", rows, study.k)
    # the columns named (a user's trial read the numbers without knowing which was which)
    log(f"{'ranker':<26}{'setting':<22}{'disp.':>8}{'amort.':>8}{f'nDCG@{study.k}':>8}")
    for row in rows:
        log(
            f"{row['ranker']:<26}{row['setting']:<22}{row['disparity']:>8.4f}"
            f"{row['amortized_disparity']:>8.4f}{row['ndcg_at_k']:>8.4f}"
            f"{'  front' if row['pareto'] else ''}"
        )
    phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in timings.items())
    log(f"wall time per phase: {phases}; total {sum(timings.values()):.1f} s; outputs in {out}")
    return rows

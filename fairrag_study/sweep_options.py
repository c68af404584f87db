"""The ``fairrag sweep`` flags, checked before any work (a bad value exits 2 naming the flag, as
:mod:`fairrag_study.options` does for the study), and the command that runs the sweep."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fairrag_core import available_rankers

from . import options
from .data import CORPUS_KINDS, DataNotFoundError
from .embedding import DEFAULT_BACKEND, DEFAULT_MODEL, EMBEDDING_BACKENDS
from .errors import StudyError
from .study import StudyConfig
from .sweep import SweepConfig, default_grid, expand, knobs, run_sweep

__all__ = ["add_sweep_command", "grid_flag"]


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
        grid[key] = numbers
    for setting in expand({ranker: grid}):
        try:
            setting.build(0)
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(
                f"{text!r}: {setting.label or ranker} is not accepted: {exc}"
            ) from None
    return ranker, grid


def add_sweep_command(commands: Any) -> None:
    """The ``fairrag sweep`` subcommand (its flags checked before any work, exit 2)."""
    sweep = commands.add_parser("sweep", help="the fairness–utility frontier of the rankers")
    sweep.set_defaults(handler=lambda args: _main(sweep, args))
    sweep.add_argument(
        "--grid",
        type=grid_flag,
        action="append",
        default=[],
        help="one ranker's grid, replacing its default (repeatable): RANKER:KEY=V,V[;KEY=V,...]; "
        "knobs: "
        + "; ".join(f"{name} {', '.join(knobs(name)) or '(none)'}" for name in available_rankers()),
    )
    sweep.add_argument(
        "--rankers",
        type=options.rankers,
        help="comma-separated rankers to sweep (default: every ranker that takes the data "
        "set's target)",
    )
    sweep.add_argument(
        "--samples",
        type=options.int_at_least(1),
        default=100,
        help="sampled rankings per question (default 100)",
    )
    sweep.add_argument(
        "--out",
        type=Path,
        default=Path("fairrag-sweep"),
        help="folder for sweep.csv and frontier.png (default fairrag-sweep)",
    )
    options.add_dataset_arguments(sweep)
    sweep.add_argument("--corpus", choices=CORPUS_KINDS, default="balanced")
    sweep.add_argument(
        "--trials", type=options.int_at_least(1), default=80, help="questions (default 80)"
    )
    sweep.add_argument("--seed", type=options.int_at_least(0), default=2026)
    sweep.add_argument("--pool-size", type=options.int_at_least(1), default=50)
    sweep.add_argument("--k", type=options.int_at_least(1), default=5)
    sweep.add_argument("--cache-dir", type=Path, help="index and data cache (~/.cache/fairrag)")
    sweep.add_argument("--model", default=DEFAULT_MODEL, help="sentence-transformers model")
    sweep.add_argument(
        "--embedding-backend",
        choices=EMBEDDING_BACKENDS,
        default=DEFAULT_BACKEND,
        help="onnx (fp32 export, no torch import) or torch (default onnx)",
    )
    sweep.add_argument("--topics", type=options.comma_list, help="restrict the corpus")
    sweep.add_argument(
        "--per-group",
        type=options.int_at_least(1),
        help="balanced corpus: documents per group per topic (default: the data set's; TREC 50)",
    )
    sweep.add_argument("--no-progress", action="store_true")


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    options.check_paths(parser, args)
    dataset = options.dataset_from_args(parser, args)
    if args.rankers is None:
        args.rankers = tuple(default_grid(dataset))
    grid: dict[str, dict[str, tuple[float, ...]]] = {}
    for ranker, values in args.grid:
        if ranker in grid:
            parser.error(f"argument --grid: {ranker} is given twice; give each ranker's grid once")
        if ranker not in args.rankers:
            parser.error(
                f"argument --grid: {ranker} is not among --rankers {','.join(args.rankers)}; "
                "add it there or drop its grid"
            )
        grid[ranker] = values
    study = StudyConfig(
        data=args.data,
        dataset=dataset,
        corpus=args.corpus,
        trials=args.trials,
        seed=args.seed,
        pool_size=args.pool_size,
        k=args.k,
        llm="none",
        cache_dir=args.cache_dir,
        model=args.model,
        embedding_backend=args.embedding_backend,
        topics=args.topics,
        per_group=args.per_group,
        progress=not args.no_progress,
    )
    config = SweepConfig(study, args.rankers, grid, args.samples, args.out)
    try:
        config.settings()  # a ranker or knob the data set's target rules out: exit 2 now
    except ValueError as exc:
        parser.error(f"argument --rankers/--grid: {exc}")
    try:
        run_sweep(config)
    except (DataNotFoundError, ValueError, StudyError) as exc:
        print(f"fairrag sweep: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0

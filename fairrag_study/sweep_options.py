"""The ``fairrag sweep`` flags, checked before any work (a bad value exits 2 naming the flag, as
:mod:`fairrag_study.options` does for the study), and the command that runs the sweep."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from . import options
from .config import StudyConfig, add_flags, model_from_args
from .data import DataNotFoundError
from .errors import StudyError
from .sweep import SweepConfig, grid_flag, run_sweep

__all__ = ["SWEEP_STUDY_FLAGS", "add_sweep_command", "grid_flag"]


SWEEP_STUDY_FLAGS = (
    "data",
    "corpus",
    "trials",
    "seed",
    "pool_size",
    "k",
    "cache_dir",
    "model",
    "embedding_backend",
    "topics",
    "per_group",
    "progress",
)
"""The fields of :class:`~fairrag_study.config.StudyConfig` that are ``fairrag sweep`` flags
(the pools' setting; the sweep runs no generator)."""

HELPS = {
    "trials": "questions (default 80)",
    "cache_dir": "index and data cache (~/.cache/fairrag)",
    "embedding_backend": "onnx (fp32 export, no torch import) or torch (default onnx)",
    "topics": "restrict the corpus",
    "per_group": "balanced corpus: documents per group per topic (default: the data set's; "
    "TREC 50)",
}


def add_sweep_command(commands: Any) -> None:
    """The ``fairrag sweep`` subcommand: :class:`~fairrag_study.sweep.SweepConfig`'s flags,
    the data set's, and the study's that set the pools (checked before any work, exit 2)."""
    sweep = commands.add_parser("sweep", help="the fairness–utility frontier of the rankers")
    sweep.set_defaults(handler=lambda args: _main(sweep, args))
    add_flags(sweep, SweepConfig)
    options.add_dataset_arguments(sweep)
    add_flags(sweep, StudyConfig, only=SWEEP_STUDY_FLAGS, helps=HELPS)


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    options.check_paths(parser, args)
    dataset = options.dataset_from_args(parser, args)
    study = model_from_args(
        parser, StudyConfig, args, SWEEP_STUDY_FLAGS, dataset=dataset, llm="none"
    )
    config = model_from_args(parser, SweepConfig, args, study=study)
    try:
        run_sweep(config)
    except (DataNotFoundError, ValueError, StudyError) as exc:
        print(f"fairrag sweep: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0

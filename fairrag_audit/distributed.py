"""The audit past one machine: each shard of the logs (a file, or a set of files) is read and
checked by DuckDB on a Dask worker into partial aggregates (:mod:`fairrag_audit.partials`, the
same the single-machine audit and ``--partials-out`` compute); the client merges them
(:func:`fairrag_audit.partials.merge_partials`) and
:func:`fairrag_audit.analysis.report_of` makes the report. The shards' partials equal one
DuckDB run's over all the logs (up to the order of floating-point sums).

Dask rather than Spark or Ray Data: its workers run plain Python, so each task is the same
DuckDB code the single-machine audit runs (no second implementation of the checks in another
engine's dialect), it needs no JVM, and ``dask[distributed]`` is one pip install whose
``LocalCluster`` the tests start on loopback.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .options import AuditOptions
from .partials import Partials, compute_partials, merge_partials

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["distributed_partials"]


def _shard_partials(options: AuditOptions) -> Partials:
    """A worker's task: the partials of one shard, read with DuckDB on the worker."""
    return compute_partials(options)


def distributed_partials(
    client: Client, options: AuditOptions, shards: Sequence[Sequence[str | Path]] | None = None
) -> Partials:
    """The partial aggregates of ``options.paths`` computed shard by shard on ``client``'s
    cluster (one task per shard; default: one shard per file), merged here in shard order.

    Every worker must see the files at the same paths (a shared or object-store mount). All
    shards share ``options`` (its ``now``, windows and targets), so their records are checked
    and windowed exactly as one run over all the files would check them. ``shards`` must hold
    each of ``options.paths`` once and nothing else (a ``ValueError`` names the files left out,
    added or repeated): a shard left out would drop its records without a word."""
    if shards is None:
        shards = [[path] for path in options.paths]
    if not shards:
        raise ValueError("shards must name at least one shard of log files, got none")
    empty = [index for index, shard in enumerate(shards) if not shard]
    if empty:  # a task over no file: DuckDB's raw "Table raw_records does not exist" (a trial)
        raise ValueError(
            f"shards must each name at least one log file; shard(s) {empty} (0-based) name none"
        )
    given = [Path(p).resolve() for shard in shards for p in shard]
    asked = [Path(p).resolve() for p in options.paths]
    left_out = [str(p) for p in asked if p not in given]
    added = [str(p) for p in given if p not in asked]
    repeated = sorted({str(p) for p in given if given.count(p) > 1})
    if left_out or added or repeated:
        problems = [
            f"{what} {names}"
            for what, names in (
                ("leave out", left_out),
                ("add files not in options.paths:", added),
                ("repeat", repeated),
            )
            if names
        ]
        split = [p for p in left_out if any(Path(a).is_relative_to(p) for a in added)]
        if split:  # a folder's files in the shards, the folder in the options
            problems.append(
                f"to shard the folder {split[0]}, give its files as the options' paths "
                "(AuditOptions.create(files)) and split those"
            )
        raise ValueError(
            "shards must hold each of options.paths once and nothing else; they "
            + "; ".join(problems)
        )
    tasks = [options.with_paths([Path(p) for p in shard]) for shard in shards]
    futures = client.map(_shard_partials, tasks, pure=False)
    return merge_partials(client.gather(futures))

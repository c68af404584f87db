"""``fairrag audit --fit-exposure FILE``: the generator's position curve fitted from a
deployment's records, written as a fitted exposure model (docs/SPEC.md, "Exposure model" →
Fitted).

Every record with an answer and a shown list is one observation (which of its positions the
answer attributes); the questions (``question``, else ``query``) are the bootstrap's unit. In a
deployment a list is shown best first, so position and relevance go together: the curve says
where the generator's attributions fall, not why; the provenance says so. The study's
``--position-curve`` phase separates the two.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

from fairrag_core.exposure import FittedCurve, save_fitted_curve
from fairrag_core.position_curve import PositionObservation, fit_curve, observation_from_record

from .lines import BROKEN_GZIP, MAX_LINE_BYTES, _lines, open_log
from .scan import is_parquet

__all__ = ["fit_exposure_from_logs"]

CONFOUNDED = (
    "deployment records: lists shown best first, so position and relevance are confounded "
    "(fairrag study --position-curve separates them)"
)


PARQUET = (
    "--fit-exposure reads JSON-lines logs; {path!r} is Parquet (fit from the JSON-lines log it "
    "was converted from)"
)


def _records(path: Path, only: set[int] | None = None) -> Iterator[dict]:
    """The JSON objects of a JSON-lines log (``.gz`` too); lines that are not one, or longer
    than :data:`~fairrag_audit.lines.MAX_LINE_BYTES`, are skipped (the audit lists them), and
    a gzip log cut short is read up to the break. ``only``: the 1-based line numbers read
    (the records an audit counted), every line when None."""
    with open_log(path) as handle:
        lines = _lines(handle)
        number = 0
        while True:
            try:
                line, _size = next(lines)
            except (StopIteration, *BROKEN_GZIP):
                return
            number += 1
            if only is not None and number not in only:
                continue
            if line is None or len(line) > MAX_LINE_BYTES:
                continue
            try:
                value = json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue
            if isinstance(value, dict):
                yield value


def _log_files(paths: Sequence[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*.jsonl*") if p.is_file()))
        elif path.suffix == ".parquet":
            raise ValueError(PARQUET.format(path=str(path)))
        else:
            files.append(path)
    return files


def fit_exposure_from_logs(
    paths: Sequence[str | Path],
    out: str | Path,
    *,
    k: int | None = None,
    seed: int = 0,
    lines: dict[int, set[int]] | None = None,
) -> FittedCurve:
    """Fit the position curve of every answered record in ``paths`` (JSON-lines logs or
    folders of them) and write it to ``out``; ``k``: the positions fitted (default: the most
    common shown-list length). ``lines``: per index of ``paths`` (then the log files
    themselves, as an audit read them), the 1-based line numbers of the records to read (those
    the audit counted: ``compute_partials(answered_lines=...)``). A ``ValueError`` when no
    record holds an answer."""
    if lines is None:
        files = _log_files([Path(p) for p in paths])
        wanted: list[set[int] | None] = [None] * len(files)
    else:
        files = [Path(p) for p in paths]
        for path in files:
            if is_parquet(path):
                raise ValueError(PARQUET.format(path=str(path)))
        wanted = [lines.get(index, set()) for index in range(len(files))]
    observations: list[PositionObservation] = []
    for path, only in zip(files, wanted, strict=True):
        for record in _records(path, only):
            unit = "question" if "question" in record else "query"
            obs = observation_from_record(record, unit_key=unit)
            if obs is not None:
                observations.append(obs)
    if not observations:
        raise ValueError(
            f"--fit-exposure: none of the {len(files)} log(s) holds a record with an answer "
            "and a shown list (titles and attributed_sources); the curve needs answers"
        )
    lengths = Counter(len(obs.attributed) for obs in observations)
    k = lengths.most_common(1)[0][0] if k is None else k
    usable = [obs for obs in observations if len(obs.attributed) >= k]
    models = Counter(str(obs.model) for obs in usable)
    curve = fit_curve(
        usable,
        k,
        seed=seed,
        provenance={
            "data": CONFOUNDED,
            "logs": [str(p) for p in files],
            "model": ", ".join(f"{m} ({n})" for m, n in models.most_common()),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "records_skipped_shorter_than_k": len(observations) - len(usable),
        },
    )
    save_fitted_curve(curve, out)
    return curve

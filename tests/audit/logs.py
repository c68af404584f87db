"""Helpers of the audit tests: records in the schema of docs/SPEC.md "Records", written as the
handlers write them (the core's JsonLinesLog), with damaged lines where asked."""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from fairrag_core import FairnessAuditor, JsonLinesLog
from fairrag_core.exposure import ExposureModel
from fairrag_core.jsonl import to_json_line

AUDITOR = FairnessAuditor.create(protected="female", target_share=0.5)


def record(
    groups: Sequence[str | None],
    *,
    ranker: str = "standard",
    timestamp: str | None = None,
    generation_parity: float | None = None,
    exposure: str | ExposureModel | None = None,
    **fields: object,
) -> dict[str, object]:
    """A retrieval record as the core's auditor computes it (with ``exposure``, default DCG),
    plus ``fields``."""
    auditor = (
        AUDITOR
        if exposure is None
        else FairnessAuditor.create(protected="female", target_share=0.5, exposure=exposure)
    )
    result: dict[str, object] = {"ranker": ranker, **auditor.retrieval(list(groups))}
    if timestamp is not None:
        result["timestamp"] = timestamp
    if generation_parity is not None:
        result["generation_parity"] = generation_parity
    result.update(fields)
    return result


def write_log(
    path: Path,
    records: Iterable[Mapping[str, object]],
    damaged: Sequence[bytes] = (),
) -> Path:
    """Records through the real JsonLinesLog, then the ``damaged`` lines appended raw
    (gzip-compressed when ``path`` ends in ``.gz``)."""
    if path.suffix == ".gz":
        body = b"".join(to_json_line(r) for r in records) + b"".join(damaged)
        path.write_bytes(gzip.compress(body))
        return path
    log = JsonLinesLog(path)
    for item in records:
        log.append(item)
    with open(path, "ab") as handle:
        for line in damaged:
            handle.write(line)
    return path

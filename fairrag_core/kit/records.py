"""The fairness record of one answered question, the same fields from every adapter and from
the study (docs/SPEC.md, "Records").

Adapters collect what was shown (:class:`ShownDocument`, in the order the LLM saw it), the run's
identity and the answer, and call :func:`run_record`; every number in it comes from the core's
:class:`~fairrag_core.FairnessAuditor`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..audit import FairnessAuditor
from ..citations import ContextDocument

__all__ = ["RECORD_SCHEMA", "ShownDocument", "run_record", "utc_timestamp"]

RECORD_SCHEMA = 1
"""Version of the record fields (docs/SPEC.md, "Records")."""


@dataclass(frozen=True)
class ShownDocument:
    """One document of the list the LLM was shown, as the record needs it."""

    doc_id: str | None
    title: str | None
    group: Hashable | None
    text: str = ""


def utc_timestamp() -> str:
    """Now, ISO 8601 in UTC with microseconds and a ``Z``."""
    now = _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _jsonable(value: Any, depth: int = 0) -> Any:
    """Tags and metadata as JSON values (other objects by their ``str``), bounded in depth."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if depth > 4:
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(item, depth + 1) for item in value]
    return str(value)


def run_record(
    auditor: FairnessAuditor,
    *,
    source: str,
    shown: Sequence[ShownDocument] | None,
    query: str | None = None,
    run_id: str | None = None,
    ranker: str | None = None,
    query_seed: int | None = None,
    k: int | None = None,
    pool_size: int | None = None,
    model: str | None = None,
    tags: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    answer: str | None = None,
    error: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One record: identity, configuration, the shown list's exposure and, with an ``answer``,
    the generation metrics (:meth:`FairnessAuditor.generation`, one rule for every framework:
    an answer without bullets has groundedness 0 and generation parity NaN).

    ``shown`` None means the run failed before anything was shown: the record then holds its
    identity, configuration and ``error``, no metrics. ``extra`` adds adapter-specific fields
    (e.g. ``retriever_run_id``) after the standard ones.
    """
    failed = shown is None
    shown = [] if shown is None else list(shown)
    groups = [document.group for document in shown]
    record: dict[str, Any] = {
        "schema": RECORD_SCHEMA,
        "timestamp": utc_timestamp(),
        "source": source,
        "run_id": run_id,
        "query": query,
        "ranker": ranker,
        "query_seed": query_seed,
        **auditor.describe(),
        "k": k,
        "pool_size": pool_size,
        "doc_ids": [document.doc_id for document in shown],
        "titles": [document.title for document in shown],
        **({} if failed else auditor.retrieval(groups)),
        "model": model,
        "tags": _jsonable(list(tags or [])),
        "metadata": _jsonable(dict(metadata or {})),
    }
    if answer is not None and not failed:
        context = [
            ContextDocument(document.title, group=document.group, text=document.text)
            for document in shown
            if document.title is not None
        ]
        record["answer"] = answer
        record.update(auditor.generation(answer, context, record.get("exposure_share")))
    if extra:
        record.update(extra)
    if error is not None:
        record["error"] = error
    return record

"""The fairness record of one answered question, the same fields from every adapter and from
the study (docs/SPEC.md, "Records").

Adapters collect what was shown (:class:`ShownDocument`, in the order the LLM saw it, with each
document's metadata), the run's identity and the answer, and call :func:`shown_record`, which
derives the ranking's provenance (:func:`~fairrag_core.kit.shown_provenance`) and calls
:func:`run_record`; every number in it comes from the core's
:class:`~fairrag_core.FairnessAuditor`. Fields only one framework has go under ``framework``.
Both handlers keep their records in a :class:`RecordKeeper` (one retention rule).
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..audit import FairnessAuditor
from ..citations import ContextDocument
from ..jsonl import JsonLinesLog
from .placement import shown_provenance

__all__ = [
    "DEFAULT_MAX_RECORDS",
    "PROVENANCE_FIELDS",
    "RECORD_SCHEMA",
    "SEARCH_FIELDS",
    "RecordKeeper",
    "ShownDocument",
    "check_max_records",
    "run_record",
    "search_entry",
    "shown_record",
    "unaudited_record",
    "utc_timestamp",
]

logger = logging.getLogger(__name__)

RECORD_SCHEMA = 2
"""Version of the record fields (docs/SPEC.md, "Records"); 2: every field in every record,
framework-only fields under ``framework``."""

DEFAULT_MAX_RECORDS = 1000
"""Records a handler keeps in memory by default (the latest), with or without a log file."""

PROVENANCE_FIELDS = (
    "reordered_after_ranking",
    "dropped_after_ranking",
    "mixed_after_ranking",
    "merged_rankings",
    "ledger_state",
)
"""How the shown list relates to its fair ranking (docs/SPEC.md, "Adapters" → Which list is
audited): in every record, null where they do not apply (``mixed_after_ranking``: false)."""


SEARCH_FIELDS = (
    "query",
    "ranker",
    "query_seed",
    "k",
    "pool_size",
    "doc_ids",
    "titles",
    "groups",
    "exposure_share",
    "exposure_disparity",
    "exposure_by_group",
    "relevance_function",
    *PROVENANCE_FIELDS,
)
"""The fields of one search in a record's ``searches`` (docs/SPEC.md, "Records" → Agents): its
ranking, what it showed and that list's own exposure."""


def search_entry(record: Mapping[str, Any], **ids: Any) -> dict[str, Any]:
    """One search of an answer that several searches fed (an agent's tool calls): the
    :data:`SEARCH_FIELDS` of the record of its list alone (:func:`shown_record` without an
    answer), then ``ids`` (the framework's run id of the search)."""
    entry = {name: record.get(name) for name in SEARCH_FIELDS}
    entry.update(ids)
    return entry


@dataclass(frozen=True)
class ShownDocument:
    """One document of the list the LLM was shown, as the record needs it."""

    doc_id: str | None
    title: str | None
    group: Hashable | None
    text: str = ""


def utc_timestamp() -> str:
    """Now, ISO 8601 in UTC with microseconds and a ``Z``."""
    now = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)
    return now.isoformat(timespec="microseconds") + "Z"  # strftime costs microseconds more


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
    provenance: Mapping[str, Any] | None = None,
    relevance_function: str | None = None,
    framework: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One record: identity, configuration, the shown list's exposure and, with an ``answer``,
    the generation metrics (:meth:`FairnessAuditor.generation`, one rule for every framework:
    an answer without bullets has groundedness 0 and generation parity NaN).

    ``shown`` None means the run failed before anything was shown: the record then holds its
    identity, configuration and ``error``, no metrics. ``provenance`` holds the
    :data:`PROVENANCE_FIELDS` that apply; ``framework`` the fields only one framework has
    (written under ``framework``); ``extra`` adds fields after the standard ones (the study's).
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
        "relevance_function": relevance_function,
        **{name: (provenance or {}).get(name) for name in PROVENANCE_FIELDS},
        "model": model,
        "tags": _jsonable(list(tags or [])),
        "metadata": _jsonable(dict(metadata or {})),
    }
    record["mixed_after_ranking"] = bool(record["mixed_after_ranking"])
    if answer is not None and not failed:
        context = [  # numbered as shown ([n]), an untitled document shifting no later number
            ContextDocument(document.title, group=document.group, text=document.text, number=n)
            for n, document in enumerate(shown, start=1)
            if document.title is not None
        ]
        record["answer"] = answer
        record.update(auditor.generation(answer, context, record.get("exposure_share")))
    if extra:
        record.update(extra)
    if error is not None:
        record["error"] = error
    record["framework"] = _jsonable(dict(framework or {}))
    return record


def shown_record(
    auditor: FairnessAuditor,
    *,
    source: str,
    shown: Sequence[ShownDocument] | None,
    metadatas: Sequence[Mapping[str, Any] | None],
    ranked: Sequence[Mapping[str, Any] | None] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """The record of a shown list, the one builder both handlers call.

    ``metadatas`` are the shown documents' metadata, in the order shown: the fair ranking that
    placed them (``ranker``, ``query_seed``, ``pool_size``, ``k``, the provenance flags) comes
    from their placement metadata by :func:`~fairrag_core.kit.shown_provenance` (``ranked``: the
    metadata of the list the run's last fair ranking returned, when the adapter saw it), and
    ``relevance_function`` from the first document that states one. ``k`` is the fair list's
    length, or the number of documents shown when no fair ranking made the list. ``fields``
    are :func:`run_record`'s other arguments (``query``, ``run_id``, ``model``, ``tags``,
    ``metadata``, ``answer``, ``error``, ``framework``).
    """
    provenance = shown_provenance(metadatas, ranked)
    ranking = {key: provenance.pop(key) for key in ("ranker", "query_seed", "pool_size", "k")}
    if ranking["k"] is None and shown is not None:
        ranking["k"] = len(shown)
    relevance_function = next(
        (
            m["relevance_function"]
            for m in metadatas
            if m is not None and isinstance(m.get("relevance_function"), str)
        ),
        None,
    )
    return run_record(
        auditor,
        source=source,
        shown=shown,
        **ranking,
        provenance=provenance,
        relevance_function=relevance_function,
        **fields,
    )


def unaudited_record(
    *, source: str, query: str | None, run_id: str | None, error: str
) -> dict[str, Any]:
    """The record of a run that could not be audited (no target to audit against, a document
    the rules refuse), for a framework that cannot raise the error in the run (LlamaIndex's
    dispatcher swallows handlers' exceptions): its identity and the ``error`` saying why, never
    a silent gap (docs/SPEC.md, "Records")."""
    return {
        "schema": RECORD_SCHEMA,
        "timestamp": utc_timestamp(),
        "source": source,
        "run_id": run_id,
        "query": query,
        "error": error,
    }


def check_max_records(value: Any, name: str = "max_records") -> int | None:
    """``value`` as a retention limit: an int >= 0, or None (keep every record)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{name} must be an int >= 0 or None (keep all), got {value!r}")
    return value


class RecordKeeper:
    """The records of one handler: the latest ``max_records`` in memory (default
    :data:`DEFAULT_MAX_RECORDS`; None keeps all), with ``path`` every record appended to that
    JSON-lines file (:class:`~fairrag_core.JsonLinesLog`, ``on_error`` as it takes), and each
    record handed to every sink (:mod:`fairrag_core.telemetry`; a sink that fails is counted
    in :attr:`sink_errors` and logged, never failing the run). Thread-safe; the file keeps the
    order of the in-memory records; sinks are called outside the lock (a slow one delays only
    the thread whose record it is)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        max_records: int | None = DEFAULT_MAX_RECORDS,
        on_error: Literal["raise", "count"] = "raise",
        sinks: Sequence[Callable[[dict[str, Any]], Any]] = (),
    ) -> None:
        self.max_records = check_max_records(max_records)
        if isinstance(sinks, (str, bytes)) or not all(callable(sink) for sink in sinks):
            raise ValueError(
                "sinks must be a list of callables taking one record, e.g. "
                f"[fairrag_core.telemetry.OpenTelemetrySink()], got {sinks!r}"
            )
        # the caller's list itself when it is one (a handler's ``sinks`` field): a sink
        # appended to it later is called too
        self.sinks = sinks if isinstance(sinks, list) else list(sinks)
        self.sink_errors = 0
        """Records a sink failed on (each logged as a warning; the record is kept)."""
        self.log = None if path is None else JsonLinesLog(path, on_error=on_error)
        # re-entrant: a stream garbage-collected while this thread is inside add() or records
        # writes its record from its finalizer, in this same thread
        self._lock = threading.RLock()
        self._records: deque[dict[str, Any]] = deque(maxlen=self.max_records)

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            state = dict(self.__dict__)
            state["_records"] = list(self._records)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled in another process: the same records, log file (reopened) and sinks.
        self.__dict__.update(state)
        self._records = deque(state["_records"], maxlen=self.max_records)
        self._lock = threading.RLock()

    @property
    def records(self) -> list[dict[str, Any]]:
        """The kept records, oldest first (a copy)."""
        with self._lock:
            return list(self._records)

    def add(self, records: Iterable[dict[str, Any]]) -> bool:
        """Keep ``records`` and append them to the log; False when a write was counted as
        failed (``on_error="count"``), a :class:`~fairrag_core.jsonl.LogWriteError` raised
        otherwise."""
        written = True
        kept: list[dict[str, Any]] = []
        try:
            with self._lock:  # the file keeps the order of the in-memory records
                for record in records:
                    self._records.append(record)
                    kept.append(record)
                    if self.log is not None and not self.log.append(record):
                        written = False
        finally:  # outside the lock: a slow sink never holds up another thread's records
            for record in kept:
                self._to_sinks(record)
        return written

    def _to_sinks(self, record: dict[str, Any]) -> None:
        for sink in self.sinks:
            try:
                sink(record)
            except Exception as exc:  # telemetry never fails the answered question
                with self._lock:
                    self.sink_errors += 1
                logger.warning("fairness record sink %r failed: %s", sink, exc)

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

import atexit
import copy
import datetime as _dt
import logging
import os
import queue
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from ..audit import MAX_RECORDED_LABEL_CHARS, MAX_RECORDED_LIST, FairnessAuditor
from ..citations import ContextDocument
from ..jsonl import JsonLinesLog
from .placement import shown_provenance

__all__ = [
    "DEFAULT_MAX_RECORDS",
    "DEFAULT_SINK_QUEUE",
    "EXIT_FLUSH_SECONDS",
    "PROVENANCE_FIELDS",
    "RECORD_SCHEMA",
    "SEARCH_FIELDS",
    "RecordKeeper",
    "ShownDocument",
    "check_max_records",
    "flush_sinks",
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

DEFAULT_SINK_QUEUE = 1000
"""Records a handler's sink queue holds by default: beyond it, new records are dropped for the
sinks (kept in memory and in the log), counted in ``sinks_dropped`` and warned of."""

EXIT_FLUSH_SECONDS = 5.0
"""At interpreter exit, how long the sinks get, in all, to take the records still queued."""

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
    number: int | None = None
    """The entry number the LLM saw before it (``[n]``) when the framework's own text labels
    it (LlamaIndex's nodes carry their fair rank, kept when a later step reorders or drops
    nodes); None: its 1-based place in the list shown."""
    also_numbered: tuple[int, ...] = ()
    """Other entry numbers the LLM saw it under: a later search of an agent that showed it again
    under its own label (:attr:`fairrag_core.citations.ContextDocument.also_numbered`)."""


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
        context = [  # numbered as shown ([n]) or as labelled, an untitled document shifting no
            # later number
            ContextDocument(
                document.title,
                group=document.group,
                text=document.text,
                number=n if document.number is None else document.number,
                also_numbered=document.also_numbered,
            )
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


def _unauditable(record: Mapping[str, Any]) -> tuple[str, str] | None:
    """Why ``fairrag audit`` would refuse ``record`` (a reason's key and its words), or None:
    a list or a label past :data:`~fairrag_core.audit.MAX_RECORDED_LIST` or
    :data:`~fairrag_core.audit.MAX_RECORDED_LABEL_CHARS`."""
    k, groups = record.get("k"), record.get("groups")
    if isinstance(k, int) and k > MAX_RECORDED_LIST:
        return "k", f"a record of k={k}, above {MAX_RECORDED_LIST:,} shown documents"
    if isinstance(groups, list):
        if len(groups) > MAX_RECORDED_LIST:
            return "k", f"a record of {len(groups):,} groups, above {MAX_RECORDED_LIST:,}"
        for label in groups:
            if isinstance(label, str) and len(label) > MAX_RECORDED_LABEL_CHARS:
                return "label", (
                    f"a group label of {len(label)} characters, above {MAX_RECORDED_LABEL_CHARS}"
                )
    for name in ("protected", "ranker"):
        value = record.get(name)
        if isinstance(value, str) and len(value) > MAX_RECORDED_LABEL_CHARS:
            return name, f"{name} of {len(value)} characters, above {MAX_RECORDED_LABEL_CHARS}"
    return None


def shown_record(
    auditor: FairnessAuditor,
    *,
    source: str,
    shown: Sequence[ShownDocument] | None,
    metadatas: Sequence[Mapping[str, Any] | None],
    ranked: Sequence[Mapping[str, Any] | None] | None = None,
    ranking: Mapping[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """The record of a shown list, the one builder both handlers call.

    ``metadatas`` are the shown documents' metadata, in the order shown: the fair ranking that
    placed them (``ranker``, ``query_seed``, ``pool_size``, ``k``, the provenance flags) comes
    from their placement metadata by :func:`~fairrag_core.kit.shown_provenance` (``ranked``: the
    metadata of the list the run's last fair ranking returned, when the adapter saw it;
    ``ranking``: that ranking's own keys when it placed no document, an empty pool), and
    ``relevance_function`` from the first document that states one. ``k`` is the fair list's
    length, or the number of documents shown when no fair ranking made the list. ``fields``
    are :func:`run_record`'s other arguments (``query``, ``run_id``, ``model``, ``tags``,
    ``metadata``, ``answer``, ``error``, ``framework``).
    """
    provenance = shown_provenance(metadatas, ranked, ranking)
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
    record handed to every sink (:mod:`fairrag_core.telemetry`). Thread-safe; the file keeps
    the order of the in-memory records.

    Sinks run off the request path (docs/SPEC.md, "Records" → Where records go): :meth:`add`
    puts the record on a bounded queue (``sink_queue`` records, default
    :data:`DEFAULT_SINK_QUEUE`) and returns; one worker thread per keeper hands each sink its
    own deep copy of each record, in order. A sink that fails is counted in
    :attr:`sink_errors` and logged; a record that finds the queue full (sinks slower than the
    answers, an outage) is dropped for the sinks only, counted in :attr:`sinks_dropped` and
    warned of (the first drop, then every 1,000th). :meth:`flush` waits for the queue to
    empty; :func:`flush_sinks` flushes every keeper, and runs at interpreter exit for at most
    :data:`EXIT_FLUSH_SECONDS`. Records the sinks never got because :meth:`close` or the exit
    flush gave up on them (a sink whose remote hangs) are counted in :attr:`sinks_dropped`
    too, with one warning naming how many and the sink that held them. One sink is never
    called from two threads at once, and records reach it in the order they were kept, across
    :meth:`close` too (docs/SPEC.md, "Records" → Where records go)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        max_records: int | None = DEFAULT_MAX_RECORDS,
        on_error: Literal["raise", "count"] = "raise",
        sinks: Sequence[Callable[[dict[str, Any]], Any]] = (),
        sink_queue: int = DEFAULT_SINK_QUEUE,
    ) -> None:
        self.max_records = check_max_records(max_records)
        if path is not None and not isinstance(path, str | os.PathLike):
            raise TypeError(
                f"path must be a file path (str or os.PathLike) for the JSON-lines log, or None; "
                f"got {type(path).__name__} {path!r:.100}"
            )
        # the caller's list itself when it is one (a handler's ``sinks`` field): a sink
        # appended to it later is called too
        listed = (
            sinks
            if isinstance(sinks, list)
            else list(sinks)
            if isinstance(sinks, Iterable) and not isinstance(sinks, (str, bytes))
            else None
        )
        if listed is None or not all(callable(sink) for sink in listed):
            raise ValueError(
                "sinks must be a list of callables taking one record, e.g. "
                f"[fairrag_core.telemetry.OpenTelemetrySink()], got {sinks!r}"
            )
        if isinstance(sink_queue, bool) or not isinstance(sink_queue, int) or sink_queue < 1:
            raise ValueError(f"sink_queue must be an int >= 1 (records), got {sink_queue!r}")
        self.sinks = listed
        self.sink_queue = sink_queue
        self.sink_errors = 0
        """Records a sink failed on (each logged as a warning; the record is kept)."""
        self.sinks_dropped = 0
        """Records some sink never got (kept in memory and log): dropped because the queue was
        full, or given up by :meth:`close` or the exit flush while a sink held the worker."""
        self.log = None if path is None else JsonLinesLog(path, on_error=on_error)
        # re-entrant: a stream garbage-collected while this thread is inside add() or records
        # writes its record from its finalizer, in this same thread
        self._lock = threading.RLock()
        self._records: deque[dict[str, Any]] = deque(maxlen=self.max_records)
        self._dispatch: _SinkDispatch | None = None
        # the dispatch close() last stopped: a new worker waits for its thread to end (a record
        # a stuck sink still holds) before calling the sinks, so they are never called from two
        # threads at once and records keep their order
        self._closed: _SinkDispatch | None = None
        self._warned: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            state = dict(self.__dict__)
            state["_records"] = list(self._records)
        del state["_lock"]
        state["_dispatch"] = None  # a queue and a thread belong to this process
        state["_closed"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled in another process: the same records, log file (reopened) and sinks.
        state.setdefault("sink_queue", DEFAULT_SINK_QUEUE)
        state.setdefault("sinks_dropped", 0)
        state.setdefault("_warned", set())
        self.__dict__.update(state)
        self._records = deque(state["_records"], maxlen=self.max_records)
        self._lock = threading.RLock()
        self._dispatch = None
        self._closed = None

    @property
    def records(self) -> list[dict[str, Any]]:
        """The kept records, oldest first: a new list of copies of them (a field set on one
        leaves the kept record as logged; their lists and maps are the kept ones, not copied:
        a deep copy of thousands of records on every read would cost seconds)."""
        with self._lock:
            return [dict(record) for record in self._records]

    def add(self, records: Iterable[dict[str, Any]]) -> bool:
        """Keep ``records``, append them to the log and queue them for the sinks; False when a
        write was counted as failed (``on_error="count"``), a
        :class:`~fairrag_core.jsonl.LogWriteError` raised otherwise."""
        written = True
        kept: list[dict[str, Any]] = []
        try:
            with self._lock:  # the file keeps the order of the in-memory records
                for record in records:
                    self._records.append(record)
                    kept.append(record)
                    self._warn_unauditable(record)
                    if self.log is not None and not self.log.append(record):
                        written = False
        finally:
            if kept and self.sinks:
                self._queue_for_sinks(kept)
        return written

    def _warn_unauditable(self, record: Mapping[str, Any]) -> None:
        """Warn once per reason when ``record`` passes a cap of ``fairrag audit``, which will
        list it as refused: the log is written, and its owner learns now, not at audit time."""
        why = _unauditable(record)
        if why is not None and why[0] not in self._warned:
            self._warned.add(why[0])
            warnings.warn(
                f"{why[1]}: fairrag audit refuses such a record (it is kept as it is; the "
                "audit lists it under 'Lines left out')",
                UserWarning,
                stacklevel=4,
            )

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the sinks took every queued record (at most ``timeout`` seconds); True
        when the queue is empty. Waits only: nothing is given up. A queue inherited from the
        parent of a fork is the parent's to deliver, not waited for."""
        dispatch = self._dispatch
        return True if dispatch is None or not dispatch.ours() else dispatch.join(timeout)

    def close(self, timeout: float | None = EXIT_FLUSH_SECONDS) -> bool:
        """:meth:`flush` (at most ``timeout`` seconds) and stop the worker; True when every
        queued record was delivered.

        When the wait runs out (a sink whose remote hangs), the records still queued are given
        up: counted in :attr:`sinks_dropped` and warned of once, naming the sink. The record a
        sink holds stays with it: the worker ends when that call returns, and a later record
        starts a new worker that waits for the old one to end before it calls any sink (a sink
        is never called from two threads at once; records reach it in order). The held record
        is counted as given up only if it is still held at the end of the exit flush
        (docs/SPEC.md, "Records" → Where records go)."""
        with self._lock:
            dispatch, self._dispatch = self._dispatch, None
            if dispatch is not None and not dispatch.ours():
                dispatch = None  # inherited from the parent of a fork: the parent's to deliver
            if dispatch is not None:
                self._closed = dispatch
        if dispatch is None:
            return True
        done = dispatch.join(timeout)
        if not done:
            dispatch.give_up("close", timeout, in_flight=False)
        dispatch.stop()
        return done

    def _queue_for_sinks(self, kept: list[dict[str, Any]]) -> None:
        for sink in self.sinks:  # the quick in-process part of a sink, on the request's thread
            on_request = getattr(sink, "on_request", None)
            if on_request is not None:
                for record in kept:
                    try:
                        on_request(MappingProxyType(record))
                    except Exception as exc:  # telemetry never fails the answered question
                        with self._lock:
                            self.sink_errors += 1
                        logger.warning("fairness record sink %r failed: %s", sink, exc)
        warn_at = 0  # the drop count a warning is due at (the first, then every 1,000th)
        with self._lock:  # close() swaps the dispatch under this lock: no record put after it
            dispatch = self._dispatch
            if dispatch is None or not dispatch.alive():  # first record, or a forked child
                closed, self._closed = self._closed, None
                dispatch = self._dispatch = _SinkDispatch(
                    self, after=closed if closed is not None and closed.alive() else None
                )
            for record in kept:  # put_nowait: never waits
                if not dispatch.put(record):
                    self.sinks_dropped += 1
                    if self.sinks_dropped == 1 or self.sinks_dropped % 1000 == 0:
                        warn_at = self.sinks_dropped
        if warn_at:
            logger.warning(
                "fairness record sinks are behind: their queue of %d records is full, "
                "%d record(s) dropped for the sinks so far (kept in memory and in the "
                "log); a sink is slow or its service is down",
                self.sink_queue,
                warn_at,
            )


def _sink_name(sink: Any) -> str:
    """A sink as a warning names it: a function's qualified name, else its class's."""
    name = getattr(sink, "__qualname__", None)
    if not isinstance(name, str):
        name = type(sink).__qualname__
    module = getattr(sink, "__module__", None) or type(sink).__module__
    return f"{module}.{name}" if isinstance(module, str) else name


class KeptSinks:
    """What a handler's user reads and does about its sinks (docs/SPEC.md, "Records" → Where
    records go), for every handler whose records a :class:`RecordKeeper` keeps (its ``_kept``):
    the counters :attr:`sinks_dropped` and :attr:`sink_errors`, :meth:`flush_sinks` and
    :meth:`close_sinks`. A user trial found the guides naming "the handler's
    ``sinks_dropped``" and its ``close()`` while only the private keeper had them."""

    __slots__ = ()

    def _keeper(self) -> RecordKeeper:
        return self._kept  # type: ignore[attr-defined]

    @property
    def sinks_dropped(self) -> int:
        """Records some sink never got (kept in memory and in the log): dropped because the
        sinks' queue was full, or given up by :meth:`close_sinks` or the exit flush while a
        sink held the worker."""
        return self._keeper().sinks_dropped

    @property
    def sink_errors(self) -> int:
        """Records a sink raised on (each logged as a warning; the record is kept)."""
        return self._keeper().sink_errors

    def flush_sinks(self, timeout: float | None = None) -> bool:
        """Wait until the sinks took every queued record (at most ``timeout`` seconds); True
        when none is left. Waits only: nothing is given up."""
        return self._keeper().flush(timeout)

    def close_sinks(self, timeout: float | None = EXIT_FLUSH_SECONDS) -> bool:
        """Flush (at most ``timeout`` seconds) and stop the sinks' worker; the records still
        queued then are given up, counted in :attr:`sinks_dropped` and warned of, naming the
        sink (:meth:`RecordKeeper.close`). True when every queued record was delivered."""
        return self._keeper().close(timeout)


class _SinkDispatch:
    """A keeper's bounded queue and the daemon thread that hands each sink a copy of each
    record. The thread holds the keeper weakly: a keeper garbage-collected stops it (after
    the records queued). ``after``: the dispatch :meth:`RecordKeeper.close` stopped before
    this one, whose thread may still be inside a sink; this thread waits for it to end before
    calling any sink (one thread at a time per sink, records in order). The dispatch stays in
    :data:`_LIVE` until its thread ends, so the exit flush accounts for what it still holds."""

    _STOP = object()

    def __init__(self, keeper: RecordKeeper, after: _SinkDispatch | None = None) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=keeper.sink_queue)
        self.pid = os.getpid()
        self.keeper_ref = weakref.ref(keeper)
        self.sinks = keeper.sinks
        self.after = after
        self.in_flight: tuple[Any, float] | None = None  # (sink, monotonic start) of a call
        self.ending = False  # stop(): end once the queue is empty
        self.thread = threading.Thread(
            target=self._deliver, name="fairrag-record-sinks", daemon=True
        )
        _LIVE.add(self)
        self.thread.start()
        # not at exit: flush_sinks (atexit) delivers what is queued first
        self._finalizer = weakref.finalize(keeper, self.stop)
        self._finalizer.atexit = False

    def ours(self) -> bool:
        """Whether this process made it (a fork's child inherits its parent's, not its thread)."""
        return self.pid == os.getpid()

    def alive(self) -> bool:
        return self.ours() and self.thread.is_alive()

    def put(self, record: dict[str, Any]) -> bool:
        try:
            self.queue.put_nowait(record)
            return True
        except queue.Full:
            return False

    def join(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.queue.all_tasks_done:
            while self.queue.unfinished_tasks:
                if not self.alive():
                    return False
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.queue.all_tasks_done.wait(0.05 if left is None else min(left, 0.05))
        return True

    def stop(self) -> None:
        """End the worker once the queue is empty (nothing is put after: the keeper swapped
        this dispatch out under its lock, or is gone). Never waits; in a forked child, whose
        copy of the queue has no worker (and whose lock a parent's thread may have held at the
        fork), it touches nothing."""
        self._finalizer.detach()
        self.ending = True
        if not self.ours():
            return
        try:
            self.queue.put_nowait(self._STOP)  # wakes a worker waiting for a record
        except queue.Full:  # the worker is busy: it sees ``ending`` when the queue empties
            pass

    def held_by(self) -> Any:
        """The sink a record of this dispatch is waiting on, or None."""
        in_flight = self.in_flight
        if in_flight is not None:
            return in_flight[0]
        after = self.after
        return None if after is None or not after.alive() else after.held_by()

    def give_up(self, when: str, timeout: float | None, *, in_flight: bool) -> int:
        """Give up the records still queued (and, with ``in_flight``, the one a sink holds):
        count them in the keeper's ``sinks_dropped`` and warn once naming the sink; the
        number given up. Never waits."""
        given_up = 0
        while True:
            try:
                record = self.queue.get_nowait()
            except queue.Empty:
                break
            self.queue.task_done()
            if record is not self._STOP:
                given_up += 1
        held_by = self.held_by()
        if in_flight and self.in_flight is not None:
            given_up += 1
        if not given_up:
            return 0
        keeper = self.keeper_ref()
        if keeper is not None:
            with keeper._lock:
                keeper.sinks_dropped += given_up
        waited = "without a limit" if timeout is None else f"after {timeout:g} s"
        if held_by is not None:
            why = (
                f"sink {_sink_name(held_by)} has not returned from a record for "
                f"{self._held_for():.1f} s (its service does not answer?)"
            )
        else:
            why = "sinks " + ", ".join(_sink_name(sink) for sink in self.sinks)
        logger.warning(
            "fairness record sinks: %s gave up %d record(s) the sinks never got %s, kept in "
            "memory and in the log, counted in sinks_dropped: %s",
            when,
            given_up,
            waited,
            why,
        )
        return given_up

    def _held_for(self) -> float:
        """Seconds the sink holding this dispatch's records has been inside its call."""
        dispatch: _SinkDispatch | None = self
        while dispatch is not None:
            in_flight = dispatch.in_flight
            if in_flight is not None:
                return time.monotonic() - in_flight[1]
            dispatch = dispatch.after
        return 0.0

    def _deliver(self) -> None:
        """The worker: each record to each sink, a deep copy each (a sink that scrubs its
        record changes neither the kept record nor another sink's), after the worker of the
        dispatch this one replaced has ended."""
        try:
            after = self.after
            if after is not None:
                after.thread.join()
                self.after = None
            records = self.queue
            while not (self.ending and records.empty()):
                record = records.get()
                try:
                    if record is self._STOP:
                        return
                    for sink in list(self.sinks):
                        self.in_flight = (sink, time.monotonic())
                        try:
                            sink(copy.deepcopy(record))
                        # telemetry never fails the answered question, nor stops this worker:
                        # a sink raising SystemExit ended it, losing the records queued
                        # behind, uncounted
                        except BaseException as exc:
                            keeper = self.keeper_ref()
                            if keeper is not None:
                                with keeper._lock:
                                    keeper.sink_errors += 1
                            logger.warning("fairness record sink %r failed: %s", sink, exc)
                        finally:
                            self.in_flight = None
                finally:
                    records.task_done()
        finally:
            _LIVE.discard(self)


_LIVE: weakref.WeakSet[_SinkDispatch] = weakref.WeakSet()


def flush_sinks(timeout: float | None = EXIT_FLUSH_SECONDS) -> bool:
    """Wait until every handler's sinks took their queued records, and a record a sink still
    holds after its handler's :meth:`RecordKeeper.close` (at most ``timeout`` seconds in all);
    True when every queue is empty. Waits only: nothing is given up (see
    :func:`_flush_at_exit`). Queues another process left (inherited by a fork) are not this
    process's to wait for."""
    deadline = None if timeout is None else time.monotonic() + timeout
    done = True
    for dispatch in list(_LIVE):
        if not dispatch.ours():
            continue
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        done = dispatch.join(left) and done
    return done


def _flush_at_exit() -> None:
    """At interpreter exit: :func:`flush_sinks` for at most :data:`EXIT_FLUSH_SECONDS`, then
    give up what is left (the records queued and the one a sink holds, which the daemon
    worker takes down with the process): counted in each keeper's ``sinks_dropped`` and
    warned of once per keeper, naming the sink, without waiting longer (docs/SPEC.md,
    "Records" → Where records go)."""
    if flush_sinks(EXIT_FLUSH_SECONDS):
        return
    for dispatch in list(_LIVE):
        if dispatch.ours() and dispatch.queue.unfinished_tasks:
            try:
                dispatch.give_up("the exit flush", EXIT_FLUSH_SECONDS, in_flight=True)
            except Exception:  # never fail the interpreter's exit
                pass


atexit.register(_flush_at_exit)

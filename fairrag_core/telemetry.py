"""Fairness beside latency: the handlers' records as OpenTelemetry metrics and span attributes.

docs/SPEC.md, "Records" → Where records go. A record sink is any callable taking one record
(a dict, docs/SPEC.md "Records"); both handlers take ``sinks=[...]`` and call each sink with
every record they keep (:class:`fairrag_core.kit.RecordKeeper`). :class:`OpenTelemetrySink`
turns a record into

- **metrics** (histograms, one point per record, attributes ``fairrag.ranker`` (``"none"`` for a
  plain list), ``fairrag.source`` and, per group, ``fairrag.group``):
  ``fairrag.exposure_share`` (the protected group's share), ``fairrag.exposure_disparity``,
  ``fairrag.exposure_share_by_group``, ``fairrag.generation_parity``, ``fairrag.groundedness``;
  and the counter ``fairrag.records``;
- **span attributes** on the span current when the record is written (the user's request span,
  a LangChain or LlamaIndex instrumentation's query span): ``fairrag.ranker``,
  ``fairrag.query_seed``, ``fairrag.k``, ``fairrag.exposure_share``,
  ``fairrag.exposure_disparity``, ``fairrag.target_share`` and the generation metrics when there
  is an answer.

OpenTelemetry is imported when a sink is built (``pip install "fairrag[otel]"``); a value that is
missing or not finite (NaN generation parity of an answer without bullets) is not recorded.

Sinks run off the request path, on the handler's worker thread, each with its own copy of the
record (:class:`~fairrag_core.kit.RecordKeeper`; :func:`flush_sinks` waits for them). A sink's
``on_request(record)``, when it has one, runs on the request's own thread when the record is
written: :class:`OpenTelemetrySink` sets its span attributes there (the request's span is the
current one only on that thread; setting attributes is in memory). Group labels exported as
metric attributes are capped: :data:`MAX_LABEL_LENGTH` characters, :data:`MAX_GROUP_LABELS`
distinct labels per sink (later ones exported as :data:`OTHER_LABEL`), with a warning.
"""

from __future__ import annotations

import logging
import math
import threading
import warnings
from collections.abc import Mapping
from typing import Any

from .kit.records import flush_sinks

__all__ = [
    "HISTOGRAMS",
    "LANGSMITH_FEEDBACK",
    "MAX_GROUP_LABELS",
    "MAX_LABEL_LENGTH",
    "OTHER_LABEL",
    "LangSmithFeedbackSink",
    "OpenTelemetrySink",
    "flush_sinks",
    "langsmith_feedback_client",
    "record_attributes",
]

logger = logging.getLogger(__name__)

MAX_LABEL_LENGTH = 64
"""The longest group label (or other text attribute) exported: longer ones are cut, ending in
``…``, with a warning."""
MAX_GROUP_LABELS = 100
"""The most distinct group labels one :class:`OpenTelemetrySink` exports (each is a metric
series); later ones are exported as :data:`OTHER_LABEL`, with a warning."""
OTHER_LABEL = "(other)"
"""The ``fairrag.group`` of the labels beyond :data:`MAX_GROUP_LABELS`."""


def _capped_text(value: object) -> str:
    text = str(value)
    return text if len(text) <= MAX_LABEL_LENGTH else text[: MAX_LABEL_LENGTH - 1] + "…"


HISTOGRAMS = {
    "fairrag.exposure_share": ("exposure_share", "the protected group's exposure share"),
    "fairrag.exposure_disparity": ("exposure_disparity", "|exposure share - target share|"),
    "fairrag.generation_parity": ("generation_parity", "protected share of cited sources"),
    "fairrag.groundedness": ("groundedness", "share of bullets citing a shown document"),
}
"""Metric name -> (record field, description); ``fairrag.exposure_share_by_group`` besides."""

_SPAN_FIELDS = (
    "ranker",
    "query_seed",
    "k",
    "pool_size",
    "exposure_share",
    "exposure_disparity",
    "generation_parity",
    "groundedness",
    "fairness_gap",
)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def record_attributes(record: Mapping[str, Any]) -> dict[str, Any]:
    """The span attributes of one record (``fairrag.<field>``; missing or non-finite values
    left out, ``fairrag.ranker`` ``"none"`` for a plain list)."""
    attributes: dict[str, Any] = {}
    for name in _SPAN_FIELDS:
        value = record.get(name)
        if name == "ranker":
            attributes["fairrag.ranker"] = value if isinstance(value, str) else "none"
            continue
        number = _finite(value)
        if number is not None:
            attributes[f"fairrag.{name}"] = int(number) if isinstance(value, int) else number
    target = record.get("target")
    protected = record.get("protected")
    if isinstance(target, Mapping) and protected is not None:
        share = _finite(target.get(str(protected)))  # target keys are labels as strings
        if share is not None:
            attributes["fairrag.target_share"] = share
    for name in ("source", "exposure_model"):
        if isinstance(record.get(name), str):
            attributes[f"fairrag.{name}"] = _capped_text(record[name])
    if isinstance(attributes["fairrag.ranker"], str):
        attributes["fairrag.ranker"] = _capped_text(attributes["fairrag.ranker"])
    return attributes


class OpenTelemetrySink:
    """A record sink writing fairness metrics and span attributes through OpenTelemetry.

    ``meter_provider``: the provider the histograms come from (default the global one, which
    the application's OpenTelemetry set-up configures); ``span_attributes``: also set
    :func:`record_attributes` on the span current when the record is written (when it records).
    """

    def __init__(self, meter_provider: Any = None, *, span_attributes: bool = True) -> None:
        try:
            from opentelemetry import metrics, trace
        except ImportError as exc:  # pragma: no cover - the otel extra installs it
            raise ImportError(
                'OpenTelemetrySink needs opentelemetry-api: pip install "fairrag[otel]"'
            ) from exc
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        meter = provider.get_meter("fairrag")
        self._trace = trace
        self.span_attributes = span_attributes
        self._histograms = {
            name: (field, meter.create_histogram(name, unit="1", description=description))
            for name, (field, description) in HISTOGRAMS.items()
        }
        self._by_group = meter.create_histogram(
            "fairrag.exposure_share_by_group",
            unit="1",
            description="each group's exposure share of one shown list",
        )
        self._records = meter.create_counter(
            "fairrag.records", unit="1", description="fairness records written"
        )

        self._groups: set[str] = set()
        self._groups_lock = threading.Lock()
        self.groups_capped = 0
        """Group labels exported as :data:`OTHER_LABEL` or cut to :data:`MAX_LABEL_LENGTH`."""

    def __reduce__(self) -> tuple[Any, ...]:
        # A meter provider does not cross processes: unpickled, the sink records through the
        # receiving process's global provider (which its OpenTelemetry set-up configures).
        return (_otel_sink, (self.span_attributes,))

    def __deepcopy__(self, memo: dict[int, Any]) -> OpenTelemetrySink:
        return self  # a copied handler records through the same (the user's) provider

    def __copy__(self) -> OpenTelemetrySink:
        return self

    def on_request(self, record: Mapping[str, Any]) -> None:
        """On the request's thread: :func:`record_attributes` on the span current there."""
        if self.span_attributes:
            span = self._trace.get_current_span()
            if span.is_recording():
                span.set_attributes(record_attributes(record))

    def _group(self, group: object) -> str:
        """``group`` as a metric attribute, capped in length and in distinct values."""
        label = str(group)
        if label in self._groups:
            return label
        capped = _capped_text(label)
        with self._groups_lock:
            if capped in self._groups:
                kept = capped
            elif len(self._groups) < MAX_GROUP_LABELS:
                self._groups.add(capped)
                kept = capped
            else:
                kept = OTHER_LABEL
            if kept != label:
                self.groups_capped += 1
                capped_count = self.groups_capped
            else:
                return kept
        if capped_count == 1 or capped_count % 1000 == 0:
            logger.warning(
                "OpenTelemetrySink: group label %r... exported as %r (labels are capped at %d "
                "characters and %d distinct values per sink, each a metric series; %d capped "
                "so far)",
                label[:40],
                kept,
                MAX_LABEL_LENGTH,
                MAX_GROUP_LABELS,
                capped_count,
            )
        return kept

    def __call__(self, record: Mapping[str, Any]) -> None:
        ranker = record.get("ranker")
        common = {
            "fairrag.ranker": _capped_text(ranker) if isinstance(ranker, str) else "none",
            "fairrag.source": _capped_text(record.get("source")),
        }
        self._records.add(1, {**common, "fairrag.error": "error" in record})
        for field, histogram in self._histograms.values():
            value = _finite(record.get(field))
            if value is not None:
                histogram.record(value, common)
        by_group = record.get("exposure_by_group")
        if isinstance(by_group, Mapping):
            for group, share in by_group.items():
                value = _finite(share)
                if value is not None:
                    self._by_group.record(value, {**common, "fairrag.group": self._group(group)})


LANGSMITH_FEEDBACK = (
    "exposure_share",
    "exposure_disparity",
    "generation_parity",
    "groundedness",
    "fairness_gap",
)
"""Record fields :class:`LangSmithFeedbackSink` attaches to the traced run, each as feedback
``fairrag.<field>``."""


class LangSmithFeedbackSink:
    """A record sink attaching a record's metrics to its LangSmith run as feedback scores.

    LangChain's run ids are LangSmith's: the record's ``run_id`` (the root run of the answered
    question) is the trace the metrics join, as feedback ``fairrag.exposure_disparity`` and so
    on (:data:`LANGSMITH_FEEDBACK`; missing or non-finite values left out), with the ranker and
    the query seed in each feedback's ``source_info``. ``client``: a ``langsmith.Client``
    (default: one configured from the environment, ``LANGSMITH_API_KEY``, with 10 s request
    timeouts and no background batch tracing, so no LangSmith thread the process must wait for
    at exit: :func:`langsmith_feedback_client`); ``project_id``: the tracing project's id
    (LangSmith's ``session_id``), which LangSmith asks run feedback to name; without it the sink
    looks the project up once by the tracing project's name (``LANGSMITH_PROJECT``), and if that
    fails sends feedback without it, warning once (not LangSmith's deprecation warning per
    feedback). ``attempts``: tries per feedback (LangSmith's ``stop_after_attempt``, default 2).
    Records without a run id attach nothing. Like every sink it runs on the handler's worker
    thread: an outage of LangSmith slows the worker (records beyond its queue are dropped for
    the sinks, counted and warned of), never the answer.

    Exit: each feedback is sent synchronously on that worker thread, a daemon, which the process
    waits for at most ``EXIT_FLUSH_SECONDS`` (5 s; :func:`flush_sinks`) however long LangSmith
    takes to answer; the feedback still unsent then is given up, counted in the handler's
    ``sinks_dropped`` and warned of, naming this sink. The sink passes no ``trace_id`` (which
    can queue feedback for LangSmith's background thread). A client *given* is the caller's: a
    ``langsmith.Client`` built with ``auto_batch_tracing=True`` (LangSmith's default) starts, as
    soon as it is built, a non-daemon thread that asks the server for ``/info``; with a server
    that never answers, Python waits for that thread at exit (60 s reads, retried: minutes),
    FairRAG or not. For a client used only for feedback, build it with
    ``auto_batch_tracing=False`` (or pass none), or set ``LANGSMITH_USE_DAEMON=true``.
    """

    def __init__(self, client: Any = None, *, project_id: Any = None, attempts: int = 2) -> None:
        # Without a session id LangSmith warns on every feedback; this sink warns once itself.
        # One narrow filter, installed once: a catch_warnings per feedback on the sinks' worker
        # thread would save and restore the process's filters under the request threads.
        warnings.filterwarnings("ignore", message="Creating feedback for a run without session_id")
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ValueError(f"attempts must be an int >= 1, got {attempts!r}")
        if client is None:
            client = langsmith_feedback_client()
        self.client = client
        self.project_id = project_id
        self.attempts = attempts
        self._resolved = project_id is not None

    def __reduce__(self) -> tuple[Any, ...]:
        # A client holds sessions and threads: unpickled, the sink makes one from the receiving
        # process's environment (LANGSMITH_API_KEY, LANGSMITH_ENDPOINT).
        state = {"project_id": self.project_id, "attempts": self.attempts}
        return (LangSmithFeedbackSink, (None,), state)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._resolved = self.project_id is not None

    def __deepcopy__(self, memo: dict[int, Any]) -> LangSmithFeedbackSink:
        return self  # a copied handler sends through the same (the user's) client

    def __copy__(self) -> LangSmithFeedbackSink:
        return self

    def _session(self) -> Any:
        """The project's id: given, or looked up once by the tracing project's name."""
        if not self._resolved:
            self._resolved = True
            try:
                from langsmith.utils import get_tracer_project

                name = get_tracer_project()
                self.project_id = self.client.read_project(project_name=name).id
            except Exception as exc:
                warnings.warn(
                    f"LangSmithFeedbackSink: no project_id given and the tracing project could "
                    f"not be looked up ({type(exc).__name__}: {exc}); feedback is sent without "
                    "it. Give LangSmithFeedbackSink(project_id=<the project's id>)",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return self.project_id

    def __call__(self, record: Mapping[str, Any]) -> None:
        run_id = record.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            return
        extra = {"ranker": record.get("ranker"), "query_seed": record.get("query_seed")}
        session = self._session()
        for field in LANGSMITH_FEEDBACK:
            value = _finite(record.get(field))
            if value is not None:
                self.client.create_feedback(
                    run_id,
                    key=f"fairrag.{field}",
                    score=value,
                    source_info=extra,
                    # no trace_id: with it LangSmith may hand the feedback to its background
                    # tracing thread, which the process waits for at exit (see the class doc)
                    stop_after_attempt=self.attempts,
                    **({} if session is None else {"session_id": session}),
                )


def langsmith_feedback_client(timeout_ms: int = 10_000) -> Any:
    """A ``langsmith.Client`` from the environment (``LANGSMITH_API_KEY``,
    ``LANGSMITH_ENDPOINT``) for sending feedback only: ``timeout_ms`` per request and no
    background batch tracing, so it starts no thread (LangSmith's tracing thread is not a
    daemon and asks the server for ``/info`` at once: a server that never answers would hold
    the process's exit for minutes)."""
    try:
        from langsmith import Client
    except ImportError as exc:  # pragma: no cover - langchain-core brings langsmith
        raise ImportError("LangSmithFeedbackSink needs langsmith: pip install langsmith") from exc
    return Client(timeout_ms=timeout_ms, auto_batch_tracing=False)


def _otel_sink(span_attributes: bool) -> OpenTelemetrySink:
    """An :class:`OpenTelemetrySink` unpickled: on the receiving process's global provider."""
    return OpenTelemetrySink(span_attributes=span_attributes)

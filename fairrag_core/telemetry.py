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
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = [
    "HISTOGRAMS",
    "LANGSMITH_FEEDBACK",
    "LangSmithFeedbackSink",
    "OpenTelemetrySink",
    "record_attributes",
]

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
            attributes[f"fairrag.{name}"] = record[name]
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

    def __reduce__(self) -> tuple[Any, ...]:
        # A meter provider does not cross processes: unpickled, the sink records through the
        # receiving process's global provider (which its OpenTelemetry set-up configures).
        return (_otel_sink, (self.span_attributes,))

    def __call__(self, record: Mapping[str, Any]) -> None:
        ranker = record.get("ranker")
        common = {
            "fairrag.ranker": ranker if isinstance(ranker, str) else "none",
            "fairrag.source": str(record.get("source")),
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
                    self._by_group.record(value, {**common, "fairrag.group": str(group)})
        if self.span_attributes:
            span = self._trace.get_current_span()
            if span.is_recording():
                span.set_attributes(record_attributes(record))


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
    (default: one configured from the environment, ``LANGSMITH_API_KEY``); ``project_id``: the
    tracing project's id (LangSmith's ``session_id``), which LangSmith asks feedback to name.
    Records without a run id attach nothing.
    """

    def __init__(self, client: Any = None, *, project_id: Any = None) -> None:
        if client is None:
            try:
                from langsmith import Client
            except ImportError as exc:  # pragma: no cover - langchain-core brings langsmith
                raise ImportError(
                    "LangSmithFeedbackSink needs langsmith: pip install langsmith"
                ) from exc
            client = Client()
        self.client = client
        self.project_id = project_id

    def __reduce__(self) -> tuple[Any, ...]:
        # A client holds sessions and threads: unpickled, the sink makes one from the receiving
        # process's environment (LANGSMITH_API_KEY, LANGSMITH_ENDPOINT).
        return (LangSmithFeedbackSink, (None,), {"project_id": self.project_id})

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __call__(self, record: Mapping[str, Any]) -> None:
        run_id = record.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            return
        extra = {"ranker": record.get("ranker"), "query_seed": record.get("query_seed")}
        for field in LANGSMITH_FEEDBACK:
            value = _finite(record.get(field))
            if value is not None:
                self.client.create_feedback(
                    run_id,
                    key=f"fairrag.{field}",
                    score=value,
                    source_info=extra,
                    # the root run is the trace: LangSmith then batches the feedback in the
                    # background instead of one blocking request per metric in the answer path
                    trace_id=run_id,
                    **({} if self.project_id is None else {"session_id": self.project_id}),
                )


def _otel_sink(span_attributes: bool) -> OpenTelemetrySink:
    """An :class:`OpenTelemetrySink` unpickled: on the receiving process's global provider."""
    return OpenTelemetrySink(span_attributes=span_attributes)

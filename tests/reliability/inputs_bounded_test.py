"""Inputs bounded: a chain input's ``k`` cannot pull the store into the prompt, group labels
exported to OpenTelemetry are capped in number and length with a warning, and a record larger
than ``fairrag audit`` reads is refused where it is written."""

from __future__ import annotations

import asyncio
import errno
import logging

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from fairrag_core.jsonl import MAX_RECORD_BYTES, JsonLinesLog, LogWriteError
from fairrag_core.kit import RecordKeeper
from fairrag_core.telemetry import (
    MAX_GROUP_LABELS,
    MAX_LABEL_LENGTH,
    OTHER_LABEL,
    OpenTelemetrySink,
    record_attributes,
)
from fairrag_langchain import FairRetriever, make_fair_rag_chain
from fairrag_langchain.fakes import FakeCitingChatModel
from tests.langchain.doubles import FixedPoolStore, imbalanced_pool

QUESTION = "Who are influential people in computing?"


def _chain(pool_size: int = 8):
    documents, distances = imbalanced_pool()
    retriever = FairRetriever(
        vectorstore=FixedPoolStore(documents, distances),
        group_key="gender",
        protected="female",
        seed=0,
        k=4,
        pool_size=pool_size,
    )
    return make_fair_rag_chain(retriever, FakeCitingChatModel())


def test_a_chain_input_cannot_ask_for_more_than_the_pool():
    chain = _chain(pool_size=8)
    with pytest.raises(ValueError, match=r"k=1000000000 .* at most 8 .*pool_size \(8\)"):
        chain.invoke({"question": QUESTION, "k": 10**9})
    with pytest.raises(ValueError, match="at most 8"):
        asyncio.run(chain.ainvoke({"question": QUESTION, "k": 9}))
    assert len(chain.invoke({"question": QUESTION, "k": 8})["context"]) == 8
    assert len(chain.invoke({"question": QUESTION, "k": 2})["context"]) == 2


def _series(reader) -> list[dict]:
    return [
        dict(point.attributes)
        for resource in reader.get_metrics_data().resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "fairrag.exposure_share_by_group"
        for point in metric.data.data_points
    ]


def test_group_labels_exported_are_capped_in_number_and_length(caplog):
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    sink = OpenTelemetrySink(provider, span_attributes=False)
    huge = "x" * 2**20
    with caplog.at_level(logging.WARNING, logger="fairrag_core.telemetry"):
        sink({"ranker": "fair", "source": "test", "exposure_by_group": {huge: 1.0}})
        for start in range(0, 10_000, 500):
            shares = {f"group-{n}": 0.001 for n in range(start, start + 500)}
            sink({"ranker": "fair", "source": "test", "exposure_by_group": shares})
    groups = {series["fairrag.group"] for series in _series(reader)}
    assert len(groups) <= MAX_GROUP_LABELS + 1 and OTHER_LABEL in groups
    assert max(len(group) for group in groups) == MAX_LABEL_LENGTH
    assert sink.groups_capped == 1 + (10_000 - (MAX_GROUP_LABELS - 1))
    assert "capped at 64 characters and 100 distinct values" in caplog.text
    assert len(record_attributes({"ranker": huge, "source": huge})["fairrag.source"]) == 64
    provider.shutdown()


def test_a_record_larger_than_the_audit_reads_is_refused_where_it_is_written(tmp_path):
    path = tmp_path / "records.jsonl"
    log = JsonLinesLog(path)
    log.append({"query": "small"})
    before = path.read_bytes()
    with pytest.raises(LogWriteError, match="over the 16,777,216 bytes") as caught:
        log.append({"query": "q" * (MAX_RECORD_BYTES + 1)})
    assert caught.value.errno == errno.EFBIG
    assert path.read_bytes() == before
    keeper = RecordKeeper(path, on_error="count")
    assert keeper.add([{"query": "q" * 20_000_000}]) is False
    assert keeper.log is not None and keeper.log.errors == 1
    assert path.read_bytes() == before
    from fairrag_audit.lines import MAX_LINE_BYTES

    assert MAX_LINE_BYTES == MAX_RECORD_BYTES  # one limit, the core's

"""Fairness beside latency (docs/SPEC.md, "Records" → Where records go): the handlers' records
reach OpenTelemetry (metrics and span attributes, read back with the SDK's in-memory reader and
exporter) and LangSmith (feedback on the traced run, through the real ``langsmith.Client``
against a loopback stub of its API)."""

from __future__ import annotations

import json
import logging
import pathlib
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda
from llama_index.core.query_engine import RetrieverQueryEngine
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fairrag_core.kit import render_context_prompt
from fairrag_core.telemetry import (
    LangSmithFeedbackSink,
    OpenTelemetrySink,
    flush_sinks,
    record_attributes,
)
from fairrag_langchain import FairnessCallbackHandler, FairReranker
from fairrag_langchain.fakes import FakeCitingChatModel
from fairrag_llamaindex import PAPER_QA_TEMPLATE, FairnessEventHandler, FairRerankPostprocessor
from fairrag_llamaindex.fakes import CitingMockLLM
from tests.langchain.doubles import ListRetriever, documents_of_pool
from tests.llamaindex.pools import PoolRetriever, make_pool

QUESTION = "Who are influential people in this pool?"
PROJECT = uuid.UUID("12345678-1234-5678-1234-567812345678")
FIELDS = {"group_key": "gender", "protected": "female", "top_n": 4, "seed": 3}


def _langchain_chain(ranker: str):
    documents = documents_of_pool(make_pool(30, seed=5))
    retriever = ContextualCompressionRetriever(
        base_compressor=FairReranker(ranker=ranker, **FIELDS),
        base_retriever=ListRetriever(documents=documents),
    )

    def prompt(docs: list[Document]) -> str:
        return render_context_prompt(
            QUESTION, [(d.metadata["title"], d.page_content) for d in docs]
        )

    return retriever, retriever | RunnableLambda(prompt) | FakeCitingChatModel()


@pytest.fixture
def otel():
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield tracer_provider.get_tracer("test"), spans, meter_provider, reader
    meter_provider.shutdown()
    tracer_provider.shutdown()


def _points(reader) -> dict[str, list]:
    points: dict[str, list] = {}
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    return points


def test_langchain_records_become_metrics_and_attributes_of_the_request_span(otel):
    tracer, spans, meter_provider, reader = otel
    sink = OpenTelemetrySink(meter_provider)
    records = []
    for ranker in ("standard", "representative_stochastic"):
        retriever, chain = _langchain_chain(ranker)
        handler = FairnessCallbackHandler.from_retriever(retriever, sinks=[sink])
        for _ in range(3):
            with tracer.start_as_current_span("request"):
                chain.invoke(QUESTION, config={"callbacks": [handler]})
        records += handler.records
    assert len(records) == 6
    assert flush_sinks(timeout=30)  # metrics are recorded on the handler's worker thread
    finished = spans.get_finished_spans()
    assert len(finished) == 6
    for span, record in zip(finished, records, strict=True):
        assert span.attributes["fairrag.ranker"] == record["ranker"]
        assert span.attributes["fairrag.exposure_disparity"] == record["exposure_disparity"]
        assert span.attributes["fairrag.query_seed"] == record["query_seed"]
        assert span.attributes["fairrag.target_share"] == 0.5
        assert span.attributes["fairrag.groundedness"] == record["groundedness"]
    points = _points(reader)
    disparity = {p.attributes["fairrag.ranker"]: p for p in points["fairrag.exposure_disparity"]}
    assert set(disparity) == {"standard", "representative_stochastic"}
    for ranker, point in disparity.items():
        mine = [r["exposure_disparity"] for r in records if r["ranker"] == ranker]
        assert point.count == 3 and point.sum == pytest.approx(sum(mine))
    groups = {p.attributes["fairrag.group"] for p in points["fairrag.exposure_share_by_group"]}
    assert groups == {"female", "male"}
    assert sum(p.value for p in points["fairrag.records"]) == 6


def _llamaindex_engine() -> tuple[FairRerankPostprocessor, RetrieverQueryEngine]:
    """A query engine over a 30-node pool with the fair postprocessor and a citing mock LLM."""
    postprocessor = FairRerankPostprocessor(relevance="similarity", **FIELDS)
    engine = RetrieverQueryEngine.from_args(
        PoolRetriever(make_pool(30, seed=5)),
        llm=CitingMockLLM(),
        node_postprocessors=[postprocessor],
        text_qa_template=PAPER_QA_TEMPLATE,
    )
    return postprocessor, engine


def test_llamaindex_records_become_metrics_and_attributes_of_the_query_span(otel):
    tracer, spans, meter_provider, reader = otel
    postprocessor, engine = _llamaindex_engine()
    with FairnessEventHandler.from_postprocessor(
        postprocessor, sinks=[OpenTelemetrySink(meter_provider)]
    ) as handler:
        with tracer.start_as_current_span("query"):
            engine.query(QUESTION)
    (record,) = handler.records
    assert flush_sinks(timeout=30)
    (span,) = spans.get_finished_spans()
    assert span.attributes["fairrag.exposure_share"] == record["exposure_share"]
    assert span.attributes["fairrag.source"] == "llamaindex"
    points = _points(reader)
    (share,) = points["fairrag.exposure_share"]
    assert share.count == 1 and share.sum == pytest.approx(record["exposure_share"])


def test_non_finite_values_are_left_out_and_a_failing_sink_never_fails_the_run(otel):
    assert "fairrag.generation_parity" not in record_attributes(
        {"ranker": None, "generation_parity": float("nan"), "exposure_share": 0.25}
    )
    retriever, chain = _langchain_chain("standard")

    def broken(record: dict) -> None:
        raise RuntimeError("collector down")

    handler = FairnessCallbackHandler.from_retriever(retriever, sinks=[broken])
    chain.invoke(QUESTION, config={"callbacks": [handler]})
    assert flush_sinks(timeout=30)
    assert len(handler.records) == 1 and handler._kept.sink_errors == 1
    with pytest.raises(ValueError, match="sinks must be a list of callables"):
        FairnessCallbackHandler.from_retriever(retriever, sinks=["otel"])


class _LangSmithStub(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, dict]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b"{}"
        try:
            payload = json.loads(body or b"{}")
        except ValueError:
            payload = {}
        type(self).received.append((self.path, payload))
        answer = json.dumps({"id": payload.get("id", "x")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self) -> None:
        answer = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass


def test_the_record_reaches_its_langsmith_run_as_feedback(monkeypatch):
    from langsmith import Client

    monkeypatch.delenv("LANGSMITH_TRACING", raising=False)
    monkeypatch.delenv("LANGCHAIN_TRACING_V2", raising=False)
    _LangSmithStub.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LangSmithStub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = Client(api_url=f"http://127.0.0.1:{server.server_port}", api_key="test-key")
        retriever, chain = _langchain_chain("representative_stochastic")
        handler = FairnessCallbackHandler.from_retriever(
            retriever, sinks=[LangSmithFeedbackSink(client, project_id=PROJECT)]
        )
        chain.invoke(QUESTION, config={"callbacks": [handler]})
        assert flush_sinks(timeout=30)
    finally:
        server.shutdown()
        server.server_close()
    (record,) = handler.records
    feedback = {
        body["key"]: body for path, body in _LangSmithStub.received if path.endswith("/feedback")
    }
    assert feedback["fairrag.exposure_disparity"]["run_id"] == record["run_id"]
    assert feedback["fairrag.exposure_disparity"]["session_id"] == str(PROJECT)
    # LangSmith keeps feedback scores to four decimals
    assert feedback["fairrag.exposure_disparity"]["score"] == pytest.approx(
        record["exposure_disparity"], abs=1e-4
    )
    assert feedback["fairrag.groundedness"]["score"] == pytest.approx(
        record["groundedness"], abs=1e-4
    )
    assert (
        "fairrag.generation_parity" in feedback
        or record["generation_parity"] != record["generation_parity"]
    )


def test_an_int_protected_group_gets_its_target_share_attribute():
    record = {"ranker": "fair", "protected": 1, "target": {"1": 0.4, "OTHERS": 0.6}}
    assert record_attributes(record)["fairrag.target_share"] == 0.4


def test_a_slow_sink_runs_outside_the_lock():
    """Another thread's record is kept while a sink is still busy with this one."""
    import threading as _threading

    from fairrag_core.kit import RecordKeeper

    entered, release = _threading.Event(), _threading.Event()

    def slow(record: dict) -> None:
        if record["query"] == "slow":
            entered.set()
            release.wait(timeout=30)

    keeper = RecordKeeper(sinks=[slow])
    worker = _threading.Thread(target=keeper.add, args=([{"query": "slow"}],))
    worker.start()
    assert entered.wait(timeout=30)
    keeper.add([{"query": "fast"}])  # would wait for the lock if sinks ran under it
    assert [r["query"] for r in keeper.records] == ["slow", "fast"]
    release.set()
    worker.join(timeout=30)


def test_a_llamaindex_handler_keeps_its_record_settings_whole():
    """A sink appended to ``sinks`` later is called; reassigning a setting the record keeper
    read at construction is refused (it silently did nothing)."""
    handler = FairnessEventHandler(group_key="gender", protected="female")
    seen: list[dict] = []
    handler.sinks.append(seen.append)
    handler._kept.add([{"query": "q"}])
    assert handler._kept.flush(timeout=30)
    assert seen == [{"query": "q"}]
    for name, value in (("max_records", 3), ("sinks", []), ("log_path", "x.jsonl")):
        with pytest.raises(AttributeError, match=f"{name} is set when the handler is built"):
            setattr(handler, name, value)


_HANGING_LANGSMITH = r"""
import json, os, socket, sys, threading, time, uuid

for name in list(os.environ):
    if name.startswith(("LANGSMITH_", "LANGCHAIN_")):
        del os.environ[name]
mode = sys.argv[1]
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(64)
accepted = []


def trickle(connection):
    # an answer that never ends: one byte of a header every half second (no read times out)
    try:
        connection.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        while True:
            time.sleep(0.5)
            connection.sendall(b"a")
    except OSError:
        pass


def accept():
    while True:
        connection, _ = server.accept()
        accepted.append(connection)  # read nothing
        if mode == "trickle":
            threading.Thread(target=trickle, args=(connection,), daemon=True).start()


threading.Thread(target=accept, daemon=True).start()
os.environ["LANGSMITH_ENDPOINT"] = f"http://127.0.0.1:{server.getsockname()[1]}"
os.environ["LANGSMITH_API_KEY"] = "test-key"

from fairrag_core.kit import RecordKeeper
from fairrag_core.telemetry import LangSmithFeedbackSink, flush_sinks

before = {thread.ident for thread in threading.enumerate()}
keeper = RecordKeeper(sinks=[LangSmithFeedbackSink(project_id=uuid.uuid4())])
keeper.add([{"run_id": str(uuid.uuid4()), "exposure_disparity": 0.1, "ranker": "fair"}])
for _ in range(600):  # the sink is talking to the server that never answers
    if accepted:
        break
    time.sleep(0.1)
flush_sinks(timeout=1)
waited_for = [
    thread.name
    for thread in threading.enumerate()
    if not thread.daemon and thread is not threading.main_thread()
]
print(json.dumps({"accepted": len(accepted), "non_daemon_threads": waited_for}), flush=True)
"""


@pytest.mark.parametrize("server", ["silent", "trickle"])
def test_a_hanging_langsmith_server_never_holds_the_process_exit(tmp_path, server):
    """The default client of LangSmithFeedbackSink starts no thread the process waits for at
    exit (LangSmith's tracing thread is not a daemon and asks the server for /info at once):
    with a server that accepts and never answers, no non-daemon thread is left after the flush
    and the process exits after FairRAG's bounded exit flush; with one that never finishes
    its answer (no read ever times out) the old sink's process never exited at all."""
    import os
    import subprocess
    import sys

    root = str(pathlib.Path(__file__).resolve().parents[1])  # this tree's fairrag_core
    script = tmp_path / "hanging_langsmith.py"
    script.write_text(_HANGING_LANGSMITH)
    process = subprocess.Popen(
        [sys.executable, str(script), server],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
    )
    try:
        # a hang guard, not a speed bound: it takes ~5 s (the exit flush); the old sink never exited
        out, err = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"the process did not exit while the server hung; stdout {out!r}")
    assert process.returncode == 0, err[-2000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert report["accepted"] >= 1  # the sink did reach the hanging server
    assert report["non_daemon_threads"] == []


class _FailsThenHolds:
    """A sink that raises on its first record, then holds the second until ``release``."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self, record: dict) -> None:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("the remote refused")
        self.entered.set()
        self.release.wait(60)


@pytest.mark.parametrize("framework", ["langchain", "llamaindex"])
def test_a_handler_counts_what_its_sinks_missed_and_closes_them(framework, caplog):
    """A user trial: the guides name "the handler's ``sinks_dropped``" and its ``close()``,
    while only the private record keeper had them. Each handler now has ``sink_errors``,
    ``sinks_dropped``, ``flush_sinks`` and ``close_sinks``."""
    sink = _FailsThenHolds()
    if framework == "langchain":
        retriever, chain = _langchain_chain("standard")
        handler = FairnessCallbackHandler.from_retriever(retriever, sinks=[sink])
        for _ in range(4):
            chain.invoke(QUESTION, config={"callbacks": [handler]})
    else:
        postprocessor, engine = _llamaindex_engine()
        handler = FairnessEventHandler.from_postprocessor(postprocessor, sinks=[sink])
        with handler:
            for _ in range(4):
                engine.query(QUESTION)
    try:
        assert len(handler.records) == 4
        assert sink.entered.wait(60)  # record 1 raised, record 2 is held, 3 and 4 queued
        assert handler.sink_errors == 1
        assert handler.flush_sinks(0) is False and handler.sinks_dropped == 0  # waits only
        with caplog.at_level(logging.WARNING):
            assert handler.close_sinks(0) is False
        assert handler.sinks_dropped == 2  # the two queued records, given up and counted
    finally:
        sink.release.set()

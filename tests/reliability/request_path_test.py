"""Nothing the user runs waits on monitoring (docs/SPEC.md, "Records" → Where records go): a
LangSmith that answers 500 or hangs (a loopback stub, the real ``langsmith.Client``), a slow
sink under concurrent ``ainvoke``s, a sink that scrubs its record, a full sink queue, a copied
handler. No wall-clock assertion: each test shows the answer came back while the sink was
still held, by events, and bounds every wait."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import threading
import uuid
import warnings
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from fairrag_core.kit import RecordKeeper
from fairrag_core.telemetry import LangSmithFeedbackSink, OpenTelemetrySink, flush_sinks
from fairrag_langchain import FairnessCallbackHandler
from tests.telemetry_test import _langchain_chain

QUESTION = "Who are influential people in this pool?"
WAIT = 60.0
"""The bound of every wait in these tests (seconds); none is reached when the code is right."""


class _Stub(BaseHTTPRequestHandler):
    """A LangSmith API that fails: ``mode`` "500" answers every request 500; "hang" holds each
    request until ``release`` is set (bounded by :data:`WAIT`); "ok" answers ``{}``."""

    mode: ClassVar[str] = "500"
    release: ClassVar[threading.Event] = threading.Event()
    arrived: ClassVar[threading.Event] = threading.Event()
    requests: ClassVar[list[str]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        type(self).requests.append(f"{self.command} {self.path}")
        type(self).arrived.set()
        if type(self).mode == "hang":
            type(self).release.wait(WAIT)
        ok = type(self).mode != "500"  # a hanging stub answers once released
        body = json.dumps({} if ok else {"detail": "down"}).encode()
        self.send_response(200 if ok else 500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = _answer

    def log_message(self, *args) -> None:
        pass


@contextmanager
def langsmith_stub(mode: str):
    _Stub.mode, _Stub.requests = mode, []
    _Stub.release, _Stub.arrived = threading.Event(), threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        _Stub.release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def no_tracing(monkeypatch):
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGSMITH_PROJECT"):
        monkeypatch.delenv(name, raising=False)


def _sink(url: str, **kwargs) -> LangSmithFeedbackSink:
    from langsmith import Client

    client = Client(api_url=url, api_key="test-key", timeout_ms=(2_000, 5_000))
    return LangSmithFeedbackSink(client, **kwargs)


def test_a_hanging_langsmith_never_holds_the_answer(no_tracing):
    with langsmith_stub("hang") as url:
        retriever, chain = _langchain_chain("representative_stochastic")
        sink = _sink(url, project_id=uuid.uuid4())
        handler = FairnessCallbackHandler.from_retriever(retriever, sinks=[sink])
        answers = [chain.invoke(QUESTION, config={"callbacks": [handler]}) for _ in range(3)]
        # every answer is back and recorded while LangSmith still holds the feedback request
        assert _Stub.arrived.wait(WAIT)
        assert not _Stub.release.is_set()
        assert len(answers) == 3 and len(handler.records) == 3
        _Stub.release.set()
        assert handler._kept.flush(WAIT)


def test_a_langsmith_answering_500_never_fails_or_holds_the_answer(no_tracing):
    with langsmith_stub("500") as url:
        retriever, chain = _langchain_chain("representative_stochastic")
        sink = _sink(url, project_id=uuid.uuid4(), attempts=1)
        handler = FairnessCallbackHandler.from_retriever(retriever, sinks=[sink])
        chain.invoke(QUESTION, config={"callbacks": [handler]})
        assert len(handler.records) == 1
        assert handler._kept.flush(WAIT)
    assert handler._kept.sink_errors == 1  # the failure is counted, the answer stood
    assert any("/feedback" in request for request in _Stub.requests)


def test_feedback_without_a_project_id_warns_once_not_per_feedback(no_tracing):
    with langsmith_stub("ok") as url:  # no project can be read from it
        retriever, chain = _langchain_chain("representative_stochastic")
        handler = FairnessCallbackHandler.from_retriever(retriever, sinks=[_sink(url, attempts=1)])
        # the process's filters as they are (the sink adds one narrow filter when it is made);
        # a blanket "always" here would override every filter, the sink's included
        with warnings.catch_warnings(record=True) as caught:
            for _ in range(3):
                chain.invoke(QUESTION, config={"callbacks": [handler]})
            assert handler._kept.flush(WAIT)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "without session_id is deprecated" in m]
    assert len([m for m in messages if "no project_id given" in m]) == 1


def test_a_slow_sink_never_stalls_the_event_loop():
    """4 concurrent ``ainvoke``s all answer while the sink still holds the first record."""
    entered, release = threading.Event(), threading.Event()

    def slow(record: dict) -> None:
        entered.set()
        release.wait(WAIT)

    retriever, chain = _langchain_chain("representative_stochastic")
    handler = FairnessCallbackHandler.from_retriever(retriever, sinks=[slow])

    async def main() -> list:
        return await asyncio.gather(
            *(chain.ainvoke(QUESTION, config={"callbacks": [handler]}) for _ in range(4))
        )

    try:
        answers = asyncio.run(asyncio.wait_for(main(), WAIT))
        assert len(answers) == 4 and len(handler.records) == 4
        assert entered.wait(WAIT) and not release.is_set()  # the sink is still on record 1
    finally:
        release.set()
    assert handler._kept.flush(WAIT)


def test_a_sink_gets_its_own_copy_of_the_record():
    def scrub(record: dict) -> None:
        record["exposure_share"] = 0.0
        record["exposure_by_group"].clear()

    seen: list[dict] = []
    retriever, chain = _langchain_chain("representative_stochastic")
    handler = FairnessCallbackHandler.from_retriever(retriever, sinks=[scrub, seen.append])
    chain.invoke(QUESTION, config={"callbacks": [handler]})
    assert handler._kept.flush(WAIT)
    (record,) = handler.records
    assert record["exposure_share"] > 0 and record["exposure_by_group"]
    assert seen[0]["exposure_share"] == record["exposure_share"]  # the next sink: untouched
    assert handler.summary()["representative_stochastic"]["exposure_share"]["mean"] > 0


def test_a_full_sink_queue_drops_for_the_sinks_only_counted_and_warned(caplog):
    entered, release = threading.Event(), threading.Event()
    delivered: list[dict] = []

    def stuck(record: dict) -> None:
        entered.set()
        release.wait(WAIT)
        delivered.append(record)

    keeper = RecordKeeper(sinks=[stuck], sink_queue=2)
    try:
        keeper.add([{"n": 0}])
        assert entered.wait(WAIT)  # record 0 is with the sink, the queue is empty
        with caplog.at_level(logging.WARNING, logger="fairrag_core.kit.records"):
            keeper.add([{"n": n} for n in range(1, 10)])
        assert len(keeper.records) == 10  # every record kept
        assert keeper.sinks_dropped == 7  # 2 queued, 7 dropped
        assert "queue of 2 records is full" in caplog.text
    finally:
        release.set()
    assert keeper.close(WAIT)
    assert [r["n"] for r in delivered] == [0, 1, 2]
    with pytest.raises(ValueError, match="sink_queue must be an int >= 1"):
        RecordKeeper(sinks=[stuck], sink_queue=0)


def test_a_record_keeper_names_a_path_or_sinks_of_the_wrong_kind(tmp_path):
    """A user trial: ``path=5`` gave pathlib's "expected str, bytes or os.PathLike object" and
    ``sinks=print`` "'builtin_function_or_method' object is not iterable"."""
    with pytest.raises(TypeError, match=r"path must be a file path .* got int 5"):
        RecordKeeper(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sinks must be a list of callables"):
        RecordKeeper(sinks=print)  # type: ignore[arg-type]
    kept = RecordKeeper(tmp_path / "log.jsonl", sinks=(s for s in [print]))  # any iterable
    assert kept.sinks == [print]


def test_a_record_past_the_audits_caps_is_kept_with_one_warning_per_reason(tmp_path):
    """A user trial: a 306-character group label (any hashable is a label) or a ranking of
    k=10,001 was logged without a word, and ``fairrag audit`` refused every such record."""
    import warnings

    from fairrag_core.audit import MAX_RECORDED_LABEL_CHARS, MAX_RECORDED_LIST

    keeper = RecordKeeper(tmp_path / "log.jsonl")
    long_label = {"k": 2, "groups": ["x" * (MAX_RECORDED_LABEL_CHARS + 1), "m"]}
    with pytest.warns(UserWarning, match="group label of 257 characters, above 256: fairrag aud"):
        keeper.add([long_label])
    with pytest.warns(UserWarning, match="k=10001, above 10,000"):
        keeper.add([{"k": MAX_RECORDED_LIST + 1}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per reason; a record within the caps: no word
        keeper.add([long_label, {"k": 5, "groups": ["f", "m"], "ranker": "standard"}])
    assert len(keeper.records) == 4 and len(keeper.log.read()) == 4  # every one kept


def test_a_sink_raising_system_exit_is_counted_and_the_records_behind_it_delivered(caplog):
    """A sink raising ``SystemExit`` (a ``sys.exit`` in a client library) ended the worker:
    the records queued behind were lost, with ``sink_errors`` 0 and nothing logged (an SRE
    trial)."""
    delivered: list[int] = []

    def exits(record: dict) -> None:
        if record["n"] == 1:
            raise SystemExit(3)
        delivered.append(record["n"])

    keeper = RecordKeeper(sinks=[exits])
    with caplog.at_level(logging.WARNING, logger="fairrag_core.kit.records"):
        keeper.add([{"n": n} for n in range(5)])
        assert keeper.close(WAIT)
    assert delivered == [0, 2, 3, 4]
    assert keeper.sink_errors == 1
    assert "failed" in caplog.text


def test_a_copied_handler_keeps_the_users_provider_and_client(no_tracing):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    otel = OpenTelemetrySink(provider)
    feedback = _sink("http://127.0.0.1:9", project_id=uuid.uuid4())
    retriever, chain = _langchain_chain("standard")
    handler = FairnessCallbackHandler.from_retriever(retriever, sinks=[otel])
    copied = copy.deepcopy(handler)
    copied_feedback = copy.deepcopy(feedback)
    assert copied._kept.sinks[0] is otel
    assert copied_feedback.client is feedback.client
    chain.invoke(QUESTION, config={"callbacks": [copied]})
    assert flush_sinks(WAIT)
    names = {
        metric.name
        for resource in reader.get_metrics_data().resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert "fairrag.exposure_share" in names  # counted by the user's provider
    provider.shutdown()


def test_records_still_queued_reach_the_sinks_at_exit(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "delivered.txt"
    script = f"""
import time
from fairrag_core.kit import RecordKeeper

def slow(record):
    time.sleep(0.05)
    with open({str(out)!r}, "a") as f:
        f.write(str(record["n"]) + "\\n")

keeper = RecordKeeper(sinks=[slow])
keeper.add([{{"n": n}} for n in range(5)])
"""  # the interpreter exits at once: flush_sinks (atexit) waits for the queue
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", script], cwd=root, check=True, timeout=WAIT)
    assert out.read_text().split() == ["0", "1", "2", "3", "4"]

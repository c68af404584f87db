"""What a monitoring outage adds to an answer: a LangChain chain's latency with record sinks.

Run: ``.venv/bin/python benchmarks/bench_sinks.py [--calls N]``. The chain is a
FairReranker over a list retriever and a fake citing chat model (the tests' doubles, so the
figures are the handler's and its sinks' cost alone). Printed: the median of what the sinks add
to one ``invoke`` and one ``ainvoke`` (ms), each call paired with one just before it through a
handler without sinks, for an OpenTelemetrySink on an SDK meter provider and a
LangSmithFeedbackSink whose server (a loopback stub) answers 500 or hangs (the goal: at most
1 ms, docs/SPEC.md "Records" → Where records go).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _paired(chain, handler, baseline, question: str, calls: int) -> tuple[float, float]:
    """Median of ``handler``'s call minus the ``baseline`` handler's call just before it (ms),
    sync and async: pairs share the machine's load of the moment."""
    with_sinks, without = {"callbacks": [handler]}, {"callbacks": [baseline]}
    for _ in range(3):
        chain.invoke(question, config=with_sinks)

    def timed(config) -> float:
        start = time.perf_counter()
        chain.invoke(question, config=config)
        return time.perf_counter() - start

    sync = [-timed(without) + timed(with_sinks) for _ in range(calls)]

    async def atimed(config) -> float:
        start = time.perf_counter()
        await chain.ainvoke(question, config=config)
        return time.perf_counter() - start

    async def run() -> list[float]:
        return [-(await atimed(without)) + await atimed(with_sinks) for _ in range(calls)]

    return statistics.median(sync) * 1e3, statistics.median(asyncio.run(run())) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()

    from langsmith import Client
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from fairrag_core.telemetry import LangSmithFeedbackSink, OpenTelemetrySink
    from fairrag_langchain import FairnessCallbackHandler
    from tests.reliability.request_path_test import QUESTION, _Stub, langsmith_stub
    from tests.telemetry_test import _langchain_chain

    retriever, chain = _langchain_chain("representative_stochastic")
    baseline = FairnessCallbackHandler.from_retriever(retriever)
    rows: list[tuple[str, float, float]] = []

    def measure(name: str, sinks: list) -> None:
        handler = FairnessCallbackHandler.from_retriever(retriever, sinks=sinks)
        rows.append((name, *_paired(chain, handler, baseline, QUESTION, args.calls)))

    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    measure("OpenTelemetry", [OpenTelemetrySink(provider)])
    for mode in ("500", "hang"):
        with langsmith_stub(mode) as url:
            client = Client(api_url=url, api_key="bench", timeout_ms=(2_000, 5_000))
            sink = LangSmithFeedbackSink(client, project_id=uuid.uuid4(), attempts=1)
            measure(f"LangSmith {mode}", [sink])
            _Stub.release.set()
    print("median added to one answer by the sinks (ms; paired with a handler without sinks)")
    print(f"{'sinks':<16}{'invoke':>10}{'ainvoke':>10}")
    for name, sync, asynchronous in rows:
        print(f"{name:<16}{sync:>10.3f}{asynchronous:>10.3f}")


if __name__ == "__main__":
    main()

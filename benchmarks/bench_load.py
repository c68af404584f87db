"""Load: 1,000 concurrent async retrievals through FairRetriever against a Chroma server, with
the FairnessCallbackHandler logging every run. A benchmark (it prints figures), not a test.

Run: ``.venv/bin/python benchmarks/bench_load.py [--runs 1000] [--docs 300] [--host H --port P]
[--persist DIR]`` with ``FAIRRAG_DATA`` pointing at ``trec_gender_2022.csv``.

Without ``--host``, it starts ``chroma run`` from this venv on a free loopback port (data in
``--persist`` or a temporary folder) and stops it at the end. It indexes a seeded TREC subset
(``--docs`` documents of 3 topics, embedded with all-MiniLM-L6-v2; nothing is embedded again
with ``--persist``), embeds the 12 scenario questions once, then launches all ``--runs``
``FairRetriever.ainvoke`` calls at once (``asyncio.gather``; pool 50, k 5,
representative_stochastic, a seed per run, the questions in turn), each with the handler
writing its record to a JSON-lines file. Query vectors are looked up, so the figures are the
store, the re-ranking and the logging, not the model.

Prints: wall time and throughput (runs/s); latency per run as the caller sees it (from the
launch of all runs to its own end, so queueing behind the others is included) at p50/p99/max;
the records in the log file, checked to be valid JSON lines, one per run, each run's own (the
count must equal the number of runs; the exit status is 1 otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the test helper that runs `chroma run` (tests/reliability)

TOPICS = ("Computer science", "Medicine", "Tennis")


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def index_subset(client, docs: int, seed: int):
    from fairrag_study.data import build_corpus, load_documents, locate_data
    from fairrag_study.embedding import load_sentence_transformer
    from fairrag_study.index import embed_missing, open_collection

    corpus = build_corpus(load_documents(locate_data(download=False)), "natural", topics=TOPICS)
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.choice(len(corpus), size=min(docs, len(corpus)), replace=False))
    subset = [corpus[i] for i in chosen]
    collection = open_collection(client, f"bench-load-{len(subset)}-{seed}")
    model = load_sentence_transformer()
    start = time.perf_counter()
    added = embed_missing(collection, subset, model)
    if added:
        print(f"indexed {added} documents in {time.perf_counter() - start:.1f} s")
    return collection, model, len(subset)


class QueryVectors:
    """LangChain embeddings answering the benchmark's questions from vectors computed once."""

    def __init__(self, model, questions) -> None:
        vectors = model.encode(list(questions), normalize_embeddings=True).tolist()
        self.vectors = dict(zip(questions, vectors, strict=True))

    def embed_query(self, text: str) -> list[float]:
        return list(self.vectors[text])

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)

    def embed_documents(self, texts):
        raise NotImplementedError("documents are indexed with their own vectors")


async def drive(retriever, handler, questions, runs: int):
    """Launch every run at once; per-run latency from the common launch to its end."""
    launch = time.perf_counter()
    ends: list[float] = [0.0] * runs
    failures: list[BaseException] = []

    async def one(i: int) -> None:
        try:
            docs = await retriever.ainvoke(
                questions[i % len(questions)], {"callbacks": [handler]}, seed=i
            )
            assert len(docs) == 5
        except Exception as exc:  # counted and shown, never hidden
            failures.append(exc)
        ends[i] = time.perf_counter()

    await asyncio.gather(*(one(i) for i in range(runs)))
    wall = time.perf_counter() - launch
    return wall, [end - launch for end in ends], failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--docs", type=int, default=300, help="documents in the index")
    parser.add_argument("--host", help="a running Chroma server (default: start one)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--persist", help="--path of the server this script starts (kept)")
    parser.add_argument("--log", help="the handler's JSON-lines file (default: temporary)")
    parser.add_argument("--workers", type=int, help="threads of the event loop's executor")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.log and Path(args.log).exists():
        parser.error(f"--log {args.log} exists; give a new file (the records are counted in it)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

    from langchain_chroma import Chroma

    from fairrag_core.prompts import scenario_question
    from fairrag_langchain import FairnessCallbackHandler, FairRetriever
    from fairrag_study.index import connect_chroma_server
    from tests.reliability.chroma_server import ChromaServer

    scratch = Path(tempfile.mkdtemp(prefix="fairrag-bench-load-"))  # removed at the end
    server = None
    try:
        if args.host is None:
            folder = Path(args.persist) if args.persist else scratch / "chroma"
            server = ChromaServer(folder).start()
            host, port = server.host, server.port
            print(f"started chroma run on {server.url} (--path {folder})")
        else:
            host, port = args.host, args.port
        client = connect_chroma_server(host, port)
        collection, model, n_docs = index_subset(client, args.docs, args.seed)
        questions = [scenario_question(s, topic) for topic in TOPICS for s in range(1, 5)]
        store = Chroma(
            client=client,
            collection_name=collection.name,
            embedding_function=QueryVectors(model, questions),
        )
        retriever = FairRetriever(
            vectorstore=store,
            ranker="representative_stochastic",
            group_key="gender",
            protected="female",
        )
        log_path = Path(args.log) if args.log else scratch / "runs.jsonl"
        handler = FairnessCallbackHandler(group_key="gender", protected="female", path=log_path)
        for question in questions:  # warm-up: connections, caches (not logged)
            retriever.invoke(question, seed=0)

        loop = asyncio.new_event_loop()
        if args.workers:
            loop.set_default_executor(ThreadPoolExecutor(args.workers))
        try:
            wall, latencies, failures = loop.run_until_complete(
                drive(retriever, handler, questions, args.runs)
            )
        finally:
            loop.close()
        lines = log_path.read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines]  # raises on any torn or invalid line
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    distinct_runs = len({r["run_id"] for r in records})
    workers = args.workers or min(32, (os.cpu_count() or 1) + 4)
    print(f"\n{args.runs} concurrent FairRetriever.ainvoke against Chroma at {host}:{port}")
    print(f"  index: {n_docs} documents; pool 50, k 5, representative_stochastic; "
          f"{len(questions)} questions; executor threads {workers}")  # fmt: skip
    print(f"  wall time        {wall:8.2f} s")
    print(f"  throughput       {args.runs / wall:8.1f} runs/s")
    print(f"  latency p50      {statistics.median(latencies) * 1e3:8.1f} ms")
    print(f"  latency p99      {percentile(latencies, 99) * 1e3:8.1f} ms")
    print(f"  latency max      {max(latencies) * 1e3:8.1f} ms")
    print(f"  failed runs      {len(failures):8d}")
    print(
        f"  records written  {len(records):8d}  (valid JSON lines; distinct runs {distinct_runs})"
    )
    ok = len(records) == distinct_runs == args.runs and not failures
    print(f"  records == runs: {'yes' if ok else 'NO'}")
    for failure in failures[:3]:
        print(f"  failure: {type(failure).__name__}: {failure}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

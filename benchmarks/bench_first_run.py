"""The study's first run: loading the embedding model, embedding the corpus, adding it to Chroma.

Run: ``.venv/bin/python benchmarks/bench_first_run.py [--docs N] [--repeats R]`` (needs the TREC
data: ``--data`` or ``$FAIRRAG_DATA``). Prints, with the load average beside every figure:

1. import + load time of each embedding backend in fresh processes (median of ``--repeats``;
   wall and CPU time; whether torch was imported), after the ONNX export is made once;
2. the time to embed the balanced corpus (3,366 documents) with each backend and ordering:
   ``chunks64`` (the study before: chunks of 64 in corpus order, sorted within each chunk),
   ``chars`` (whole set, longest first by characters), ``tokens`` and ``tokens-short`` (whole
   set by tokens, longest or shortest first; the study's :func:`embedding_order` is
   ``tokens``), in forward passes of ``--batch-sizes`` texts; process CPU time beside wall time
   (a shared machine inflates wall time more);
3. adding the vectors to an embedded Chroma collection in slices of 64 and of 1,024;
4. pool identity on the study's 80 questions (ids in order, pools of 50, the study's collection
   settings): every variant's index queried with the question vectors of each backend, against
   the study before (torch, ``chunks64``), and each variant's largest vector difference from it.

Runs in one process, so the variants are compared on the same machine state (A/B); the export
goes to ``--cache-dir`` (default: a temporary folder, so the export itself is timed).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fairrag_study.data import build_corpus, load_documents, locate_data, study_topics  # noqa: E402
from fairrag_study.embedding import (  # noqa: E402
    DEFAULT_MODEL,
    load_embedding_model,
    load_sentence_transformer,
    token_lengths,
)
from fairrag_study.index import open_collection  # noqa: E402
from fairrag_study.plan import plan_trials  # noqa: E402

ORDERS = ("chunks64", "chars", "tokens", "tokens-short")
LOAD = """
import json, resource, sys, time
start = time.perf_counter()
from fairrag_study.embedding import load_embedding_model
model = load_embedding_model(backend={backend!r}, cache_dir={cache!r})
model.encode(["warm up"], normalize_embeddings=True)
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps([time.perf_counter() - start, usage.ru_utime + usage.ru_stime,
                  "torch" in sys.modules]))
"""


def load_average() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def fresh_load(backend: str, cache: Path, repeats: int) -> tuple[float, float, bool]:
    """Median (wall, CPU) of fresh processes importing and loading ``backend``, and whether
    torch was imported."""
    import json

    walls, cpus, torch_seen = [], [], False
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    for _ in range(repeats):
        done = subprocess.run(
            [sys.executable, "-c", LOAD.format(backend=backend, cache=str(cache))],
            capture_output=True, text=True, check=True, env=env, cwd=ROOT,
        )  # fmt: skip
        wall, cpu, torch_imported = json.loads(done.stdout.strip().splitlines()[-1])
        walls.append(wall)
        cpus.append(cpu)
        torch_seen |= torch_imported
    return statistics.median(walls), statistics.median(cpus), torch_seen


def order_of(name: str, model: Any, texts: Sequence[str]) -> list[int]:
    if name == "chunks64":
        return list(range(len(texts)))
    if name == "chars":
        lengths = [len(text) for text in texts]
    else:
        lengths = token_lengths(model, texts)
    sign = 1 if name == "tokens-short" else -1
    return sorted(range(len(texts)), key=lambda i: sign * lengths[i])


def embed(model: Any, texts: Sequence[str], order: str, batch: int) -> tuple[np.ndarray, float]:
    """Vectors in corpus order, and the process CPU seconds it took."""
    vectors = np.empty((len(texts), 384), dtype=np.float32)
    cpu = time.process_time()
    if order == "chunks64":  # the study before: encode() per chunk of 64, in corpus order
        for start in range(0, len(texts), 64):
            vectors[start : start + 64] = model.encode(
                list(texts[start : start + 64]), batch_size=batch, normalize_embeddings=True
            )
    else:
        ranked = order_of(order, model, texts)
        for start in range(0, len(ranked), batch):
            rows = ranked[start : start + batch]
            vectors[rows] = model.encode(
                [texts[i] for i in rows], batch_size=batch, normalize_embeddings=True
            )
    return vectors, time.process_time() - cpu


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = call()
    return result, time.perf_counter() - start


def add_all(client: Any, corpus: Sequence[Any], vectors: np.ndarray, step: int) -> Any:
    collection = open_collection(client, f"bench-{uuid.uuid4().hex[:8]}")
    for start in range(0, len(corpus), step):
        batch = corpus[start : start + step]
        collection.add(
            ids=[doc.doc_id for doc in batch],
            embeddings=vectors[start : start + step].tolist(),
            documents=[doc.page_content for doc in batch],
            metadatas=[doc.metadata() for doc in batch],
        )
    return collection


def pools(collection: Any, queries: np.ndarray) -> list[list[str]]:
    found = collection.query(query_embeddings=queries.tolist(), n_results=50, include=[])
    return [list(ids) for ids in found["ids"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, help="trec_gender_2022.csv (else $FAIRRAG_DATA)")
    parser.add_argument("--docs", type=int, help="embed only the first N corpus documents")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per backend")
    parser.add_argument("--orders", default=",".join(ORDERS), help=f"of {', '.join(ORDERS)}")
    parser.add_argument("--backends", default="torch,onnx")
    parser.add_argument("--batch-sizes", default="16", help="texts per forward pass, e.g. 16,32")
    parser.add_argument("--cache-dir", type=Path, help="where the ONNX export goes")
    parser.add_argument(
        "--rounds", type=int, default=1, help="embed every variant this many times, in turn"
    )
    args = parser.parse_args()
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    backends = args.backends.split(",")
    orders = args.orders.split(",")
    batches = [int(b) for b in args.batch_sizes.split(",")]
    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="bench-first-run-"))

    documents = load_documents(locate_data(args.data))
    corpus = build_corpus(documents, "balanced")[: args.docs]
    texts = [doc.page_content for doc in corpus]
    questions = [t.question for t in plan_trials(study_topics(documents), 80, 2026)]
    print(f"balanced corpus: {len(corpus)} documents; {len(questions)} questions; {cache}")
    print(f"cpu count {os.cpu_count()}; {load_average()}")

    print("\n1. import + load in a fresh process (median)")
    if "onnx" in backends:
        _, seconds = timed(lambda: subprocess.run(
            [sys.executable, "-c", LOAD.format(backend="onnx", cache=str(cache))],
            capture_output=True, check=True, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
        ))  # fmt: skip
        print(f"   the ONNX export, once (a fresh process, torch imported): {seconds:.1f} s wall")
    for backend in backends:
        wall, cpu, torch_seen = fresh_load(backend, cache, args.repeats)
        print(
            f"   {backend:<6} {wall:6.2f} s wall {cpu:6.2f} s cpu  torch imported: "
            f"{'yes' if torch_seen else 'no'}  ({load_average()})"
        )

    models = {
        "torch": load_sentence_transformer(DEFAULT_MODEL),
        "onnx": load_embedding_model(DEFAULT_MODEL, "onnx", cache_dir=cache),
    }
    models = {name: models[name] for name in backends}
    queries = {
        name: model.encode(questions, batch_size=64, normalize_embeddings=True)
        for name, model in models.items()
    }

    for model in models.values():  # warm up: first calls allocate and fill caches
        embed(model, texts[:64], "tokens", batches[0])
    print("\n2. embedding the corpus (encode only; rounds in turn)")
    print(f"   {'backend':<8}{'order':<14}{'batch':>6}{'wall s':>9}{'cpu s':>9}   load average")
    vectors: dict[tuple[str, str, int], np.ndarray] = {}
    for _ in range(args.rounds):
        for backend, model in models.items():
            for order in orders:
                for batch in batches:
                    (found, cpu), wall = timed(
                        lambda m=model, o=order, b=batch: embed(m, texts, o, b)
                    )
                    vectors[backend, order, batch] = found
                    print(
                        f"   {backend:<8}{order:<14}{batch:>6}{wall:>9.1f}{cpu:>9.1f}   "
                        f"{load_average()}",
                        flush=True,
                    )

    import chromadb

    client = chromadb.EphemeralClient()
    print("\n3. adding to Chroma (embedded, the study's collection settings)")
    some = next(iter(vectors.values()))
    for step in (64, 1024):
        cpu = time.process_time()
        _, wall = timed(lambda s=step: add_all(client, corpus, some, s))
        print(
            f"   slices of {step:>5}: {wall:6.2f} s wall {time.process_time() - cpu:6.2f} s cpu"
            f"  ({load_average()})"
        )

    reference_key = ("torch", "chunks64", batches[0])
    if reference_key not in vectors:
        print("\n4. pools: skipped (needs the torch backend and the chunks64 order)")
        return
    reference = pools(add_all(client, corpus, vectors[reference_key], 1024), queries["torch"])
    print(f"\n4. pools of the {len(questions)} questions identical to the study before (torch, ")
    print("   chunks64; ids in order), per index and per backend of the question vectors")
    print(f"   {'index':<30}{'max |diff|':>12}  " + "  ".join(f"{b} queries" for b in models))
    for key, found in vectors.items():
        collection = add_all(client, corpus, found, 1024)
        counts = []
        for backend in models:
            same = sum(
                a == b for a, b in zip(pools(collection, queries[backend]), reference, strict=True)
            )
            counts.append(f"{same:>5}/{len(reference):<7}")
        label = f"{key[0]} {key[1]} {key[2]}"
        difference = float(np.abs(found - vectors[reference_key]).max())
        print(f"   {label:<30}{difference:>12.2e}  " + "  ".join(counts))
    query_difference = float(np.abs(queries["torch"] - queries.get("onnx", queries["torch"])).max())
    print(f"   question vectors, onnx vs torch: max |diff| {query_difference:.2e}")
    print(f"\n{load_average()}; peak memory {peak_mib():.0f} MiB")


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    main()

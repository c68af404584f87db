"""Does ``asyncio.gather`` of many ``FairRetriever.ainvoke`` calls with a per-call seed on Chroma
reproduce its lists? (issue 32, item 4; docs/SPEC.md, "Adapters" → Seeds.)

Runs 200 distinct questions, each ``ainvoke(q, seed=0)``, all at once with ``asyncio.gather``,
twice, on a real persistent Chroma collection of the TREC subset (the real all-MiniLM-L6-v2), and
prints in how many questions the two runs showed the same list; then the same for the pools
Chroma returned (``asimilarity_search_with_score`` under ``gather``) and for ``abatch``. Usage:
``FAIRRAG_DATA=... python benchmarks/gather_chroma_seeds.py``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QUESTIONS = 200


def main() -> None:
    import chromadb
    from langchain_chroma import Chroma
    from langchain_huggingface import HuggingFaceEmbeddings

    from fairrag_langchain import FairRetriever
    from fairrag_study.embedding import load_sentence_transformer, resolve_model_path
    from tests.chroma_pool import build_chroma_pool, load_subset
    from tests.langchain.conftest import MemoizedQueryEmbeddings

    warnings.simplefilter("ignore")
    documents = load_subset()
    client = chromadb.PersistentClient(path=tempfile.mkdtemp(prefix="fairrag-gather-"))
    collection = build_chroma_pool(client, "trec-subset", documents, load_sentence_transformer())
    embeddings = MemoizedQueryEmbeddings(
        HuggingFaceEmbeddings(
            model_name=resolve_model_path(), encode_kwargs={"normalize_embeddings": True}
        )
    )
    store = Chroma(client=client, collection_name=collection.name, embedding_function=embeddings)
    retriever = FairRetriever(
        vectorstore=store, group_key="gender", protected="female", pool_size=50, k=5
    )
    topics = ["computer science", "medicine", "tennis", "physics", "music"]
    questions = [f"Who are influential people in {topics[i % 5]}? ({i})" for i in range(QUESTIONS)]
    for q in questions:
        embeddings.embed_query(q)  # embedded once, outside the timing of the runs

    def ids(documents):
        return tuple(d.id for d in documents)

    async def gathered():
        lists = await asyncio.gather(*(retriever.ainvoke(q, seed=0) for q in questions))
        return [ids(d) for d in lists]

    async def pools():
        found = await asyncio.gather(
            *(store.asimilarity_search_with_score(q, k=50) for q in questions)
        )
        return [tuple((d.id, round(s, 12)) for d, s in pool) for pool in found]

    sequential = [ids(retriever.invoke(q, seed=0)) for q in questions]
    sequential_pools = [
        tuple((d.id, round(s, 12)) for d, s in store.similarity_search_with_score(q, k=50))
        for q in questions
    ]
    for run in (1, 2):
        lists = asyncio.run(gathered())
        same = sum(a == b for a, b in zip(lists, sequential, strict=True))
        pooled = asyncio.run(pools())
        same_pools = sum(a == b for a, b in zip(pooled, sequential_pools, strict=True))
        batched = [ids(d) for d in retriever.batch(questions, seed=[0] * QUESTIONS)]
        same_batch = sum(a == b for a, b in zip(batched, sequential, strict=True))
        print(
            f"run {run}: gather of ainvoke(seed=0): {same}/{QUESTIONS} lists as sequential; "
            f"Chroma pools under gather: {same_pools}/{QUESTIONS} as sequential; "
            f"batch(seed=[0]*n): {same_batch}/{QUESTIONS}"
        )


if __name__ == "__main__":
    main()

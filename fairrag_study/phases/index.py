"""The index phase: the corpus embedded in Chroma (the embedded, persistent index of this
corpus and model, or a collection on a Chroma server), verified, and the question embeddings
the trials and the many-rankings phase share (docs/SPEC.md, "The study")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from fairrag_core.kit import TOP_UPS, first_occurrences, lacking

from ..data import (
    CorpusDocument,
    default_cache_dir,
)
from ..embedding import embedding_backend, load_embedding_model
from ..errors import (
    IndexDamagedError,
)
from ..index import (
    collection_name,
    corpus_fingerprint,
    embed_missing,
    index_folder,
    open_collection,
    open_embedded_index,
    verify_collection,
)
from ..settings import IndexSettings

COLLECTION = "fairrag-corpus"
"""The collection's name in the study's own embedded index folder (one folder per corpus)."""


def open_index(
    settings: IndexSettings,
    corpus: Sequence[CorpusDocument],
    model: Any,
    server: Any,
    log: Callable[[str], None],
) -> tuple[Any, Path | str, str, int]:
    """``(client, where, collection name, documents embedded now)``, the index verified.

    On a server, the corpus's collection (:func:`collection_name`); embedded, the persistent
    index folder of this corpus and model (:func:`open_embedded_index` checks it, rebuilding a
    damaged one).
    """
    fingerprint = corpus_fingerprint(corpus, settings.model, settings.text)
    if server is not None:
        where = f"http://{settings.chroma_host}:{settings.chroma_port}"
        kind = settings.dataset.index_kind(settings.corpus, ((d.doc_id, d.group) for d in corpus))
        name = collection_name(kind, settings.model, fingerprint, settings.text)
        collection = open_collection(server, name)
        added = embed_missing(collection, corpus, model, progress=settings.progress)
        verify_collection(collection, corpus, model, where=f"{where} (collection {name})")
        return server, where, name, added
    cache = settings.cache_dir or default_cache_dir()
    kind = settings.dataset.index_kind(settings.corpus, ((d.doc_id, d.group) for d in corpus))
    folder = index_folder(cache, kind, settings.model, fingerprint, settings.text)
    client, _, added = open_embedded_index(
        folder, COLLECTION, corpus, model, progress=settings.progress, log=log
    )
    return client, folder, COLLECTION, added


@dataclass(frozen=True)
class StudyIndex:
    """The verified index the trials search: its client, where it is (for messages), the
    collection's name, the embedding model, how many documents it holds and embedded now."""

    client: Any
    where: Path | str
    collection: str
    model: Any
    size: int
    added: int

    def checked_collection(self) -> Any:
        """The collection, refusing a short pool (:class:`PoolCheckedCollection`)."""
        return PoolCheckedCollection(
            self.client.get_collection(self.collection), self.size, self.where
        )


def embed_corpus(
    settings: IndexSettings,
    corpus: Sequence[CorpusDocument],
    server: Any,
    log: Callable[[str], None],
) -> StudyIndex:
    """The index phase's entry: the embedding model loaded and the corpus's index opened
    (embedding what is missing) and verified (:func:`open_index`)."""
    model = load_embedding_model(
        settings.model, settings.embedding_backend, cache_dir=settings.cache_dir, log=log
    )
    log(f"embedding with {settings.model} on {embedding_backend(model)}")
    client, where, name, added = open_index(settings, corpus, model, server, log)
    log(f"index {where}: {len(corpus)} documents ({added} embedded now)")
    return StudyIndex(client, where, name, model, len(corpus), added)


@lru_cache(maxsize=4)
def query_embeddings(model: Any) -> Any:
    """LangChain embeddings over the loaded model; each distinct query is embedded once.

    ``prefill`` embeds all of the study's questions in one batch; every later ``embed_query``
    for them is a dictionary lookup. One object per model (cached, as the models are), so the
    trials and the many-rankings phase share it: the questions are embedded once per run.
    """
    from langchain_core.embeddings import Embeddings

    class CachedQueryEmbeddings(Embeddings):
        def __init__(self) -> None:
            self.cache: dict[str, list[float]] = {}

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return model.encode(texts, normalize_embeddings=True, batch_size=64).tolist()

        def embed_query(self, text: str) -> list[float]:
            if text not in self.cache:
                self.cache[text] = self.embed_documents([text])[0]
            return self.cache[text]

        def prefill(self, queries: Sequence[str]) -> None:
            todo = sorted(set(queries) - set(self.cache))
            self.cache.update(zip(todo, self.embed_documents(todo), strict=True))

    return CachedQueryEmbeddings()


def checked_store(
    client: Any, collection: str, embeddings: Any, expected: int, where: object
) -> Any:
    """The study's LangChain Chroma store, refusing a short pool.

    A query for ``n`` candidates must return ``min(n, expected)`` of them (``expected``: the
    documents the index holds); fewer means a damaged index (e.g. its HNSW files lost), whose
    report would look right and be wrong, so the study stops with :class:`IndexDamagedError`.
    The check sits on the Chroma collection's ``query``, which every search of the store
    (LangChain's methods, or a retriever reading the collection directly) goes through.
    """
    from langchain_chroma import Chroma

    store = Chroma(client=client, collection_name=collection, embedding_function=embeddings)
    checked: Any = PoolCheckedCollection(store._collection, expected, where)
    store._chroma_collection = checked
    return store


class PoolCheckedCollection:
    """A Chroma collection whose unfiltered queries must return full pools of distinct
    documents (else :class:`IndexDamagedError`); every other attribute is the collection's own.

    A reopened persistent Chroma index can return one document twice in a query (its HNSW
    index and its brute-force buffer both hold it: chroma-core/chroma#3638 is the same
    family; here 3 of 20 queries for 50 on the study's reopened index, so a third of the
    study's pools held 49 documents on a rerun and 50 on the run that built the index). A
    query whose rows repeat an id is asked again for as many more candidates as the most
    repeated row lacks (at most :data:`TOP_UPS` times), and each row keeps the first
    occurrence of each id, up to the number asked for."""

    TOP_UPS = TOP_UPS

    def __init__(self, collection: Any, expected: int, where: object) -> None:
        self._wrapped, self._expected, self._where = collection, expected, where

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)

    def query(self, *args: Any, **kwargs: Any) -> Any:
        result = self._wrapped.query(*args, **kwargs)
        if kwargs.get("where") or kwargs.get("where_document"):
            return result  # a filtered pool may legitimately be short
        asked = int(kwargs.get("n_results", 10))
        more = 0
        for _ in range(self.TOP_UPS):
            # a row shorter than asked for holds every candidate the store has: not topped up
            lack = max((lacking(ids, asked + more, asked) for ids in result["ids"]), default=0)
            if lack <= 0:
                break
            more += lack
            result = self._wrapped.query(*args, **{**kwargs, "n_results": asked + more})
        if more or any(len(set(ids)) != len(ids) for ids in result["ids"]):
            result = _first_occurrences(result, asked)  # at most asked, repeats dropped
        wanted = min(asked, self._expected)
        for ids in result["ids"]:
            if len(ids) != wanted or len(set(ids)) != len(ids):
                raise IndexDamagedError(
                    f"the index at {self._where} returned {len(set(ids))} distinct candidates "
                    f"for a pool of {wanted} (it holds {self._expected} documents): it is "
                    "damaged. Delete it and run again to rebuild it"
                )
        return result


def _first_occurrences(result: Any, asked: int) -> dict[str, Any]:
    """Chroma's query ``result`` with each row keeping the first occurrence of each id, at
    most ``asked`` of them (every per-row field alike)."""
    kept = [first_occurrences(ids, asked) for ids in result["ids"]]
    out = dict(result)
    for key, rows in result.items():
        if key != "included" and isinstance(rows, list) and len(rows) == len(kept):
            out[key] = [
                None if row is None else [row[at] for at in keep]
                for row, keep in zip(rows, kept, strict=True)
            ]
    return out

"""The study's vector index: a persistent, cosine Chroma collection of the corpus, built once,
embedded or on a Chroma server (:func:`connect_chroma_server`)."""

from __future__ import annotations

import functools
import hashlib
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fairrag_core import VectorStoreUnavailableError
from fairrag_core.breaker import CircuitBreaker as _CoreBreaker

from .data import CorpusDocument
from .embedding import token_lengths
from .errors import IndexDamagedError
from .integrity import manifest_mismatch, probe_collection, probe_folder, write_manifest
from .progress import progress_bar

__all__ = [
    "COLLECTION_SPACE",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_COOLDOWN",
    "DEFAULT_TIMEOUT",
    "EF_SEARCH",
    "CircuitBreaker",
    "circuit_breaker",
    "collection_name",
    "connect_chroma_server",
    "corpus_fingerprint",
    "embed_missing",
    "embedding_order",
    "open_collection",
    "open_embedded_index",
    "verify_collection",
]

EF_SEARCH = 2000
"""HNSW search breadth of the study's collections. With Chroma's default (100) the 50-candidate
pool differed from the exact cosine top-50 for 40 of the study's 80 questions on the balanced
corpus (3,366 documents), and which documents were missed changed from run to run; 200 left 11
inexact pools there, 500 none. On the natural corpus (19,466 documents) 500 left 8 of 80 pools
inexact and 1,000 two; 2,000 none (4.3 ms a query against 1.6 ms at 500)."""
COLLECTION_SPACE = {"hnsw": {"space": "cosine", "ef_search": EF_SEARCH}}
DEFAULT_TIMEOUT = 30.0
"""Seconds a Chroma server request may wait for an answer (read, write, pool) before failing."""
DEFAULT_CONNECT_TIMEOUT = 5.0
"""Seconds to establish a connection to a Chroma server."""
DEFAULT_COOLDOWN = 5.0
"""Seconds a Chroma server client fails fast after a timeout or a lost connection."""
ENCODE_BATCH = 16
"""Texts per forward pass (sorted by length over the whole set, :func:`embedding_order`)."""
ADD_BATCH = 1024
"""Documents per ``collection.add``: one transaction per slice (on the balanced corpus, adds of
64 took 3.64 s and slices of 1,024 2.76 s: benchmarks/bench_first_run.py); a multiple of
:data:`ENCODE_BATCH`, so slices do not change the forward passes."""


def corpus_fingerprint(
    documents: Sequence[CorpusDocument], model_name: str, text: str = "csv"
) -> str:
    """A short hash of the corpus (ids and texts), the model and the text source (``csv`` or
    ``wikipedia``; docs/SPEC.md, "The study", Index): the index cache key. ``csv`` adds nothing,
    so indexes cached before the text source was chosen keep their key."""
    digest = hashlib.sha256(model_name.encode())
    if text != "csv":
        digest.update(b"\0text\0" + text.encode())
    for doc in documents:
        digest.update(b"\0" + doc.doc_id.encode() + b"\0" + doc.page_content.encode())
    return digest.hexdigest()[:16]


def connect_chroma_server(
    host: str,
    port: int,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    cooldown: float = DEFAULT_COOLDOWN,
) -> Any:
    """A ``chromadb.HttpClient`` to the server at ``host:port``, with timeouts and typed errors.

    ``chromadb.HttpClient`` waits forever by default (its HTTP session has no timeout), so a
    server that stops answering would hang every query. This client's requests fail after
    ``connect_timeout`` seconds to connect and ``timeout`` seconds for the answer, and each
    request as a whole (connecting, sending, the headers and the whole body) ends within
    ``connect_timeout + timeout`` seconds, however slowly the server trickles its answer
    (:mod:`fairrag_study.http_deadline`; a user trial found a trickled query with ``timeout=2``
    still waiting after 20 s); any
    transport failure (connection refused or reset, timeout) raises
    :class:`fairrag_core.VectorStoreUnavailableError` naming the server and the request, with
    chromadb's ``httpx`` error as ``__cause__``. Nothing is retried. Errors the server sends
    back (a missing collection, a bad argument) stay chromadb's own.

    Once a request times out or loses its connection, the server is known to be down: for
    ``cooldown`` seconds every request fails at once with the same typed error (the last
    transport error as its cause) instead of waiting out its own timeout, so callers queued
    behind a frozen server fail within about one timeout, not one timeout each; then one
    request is let through as a probe (others still fail fast while it runs), and its success
    closes the circuit (:class:`CircuitBreaker`). Once the server is back (e.g. restarted on the
    same port and ``--path``), the same client, stores and retrievers work again after at most
    the cool-down.

    The server is checked first (its heartbeat, within the timeouts), so an unreachable one
    fails here, fast, not in the middle of a run. Each ``HttpClient`` has its own connection
    pool: the timeouts apply to this client (and every store or index built on it) only.
    """
    from .options import SECONDS, seconds_problem

    for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number of seconds, got {value!r}")
        problem = seconds_problem(float(value))
        if problem is not None:
            raise ValueError(
                f"{name} must be a finite number of seconds from {SECONDS[0]:g} to "
                f"{SECONDS[1]:g}: {problem}"
            )
    import chromadb
    import httpx

    from .http_deadline import bound_whole_requests, deadline

    where = f"{host}:{port}"
    limits = httpx.Timeout(timeout, connect=connect_timeout)
    whole = connect_timeout + timeout  # one request's deadline, start to last byte
    try:
        with httpx.Client(timeout=limits) as probe:  # the heartbeat, within one deadline
            bound_whole_requests(probe)
            with deadline(whole):
                probe.get(f"http://{where}/api/v2/heartbeat").raise_for_status()
        client = _built_within(
            lambda: chromadb.HttpClient(host=host, port=port), _BUILD_REQUESTS * whole, where
        )
    except (httpx.TransportError, httpx.HTTPStatusError) as exc:
        raise VectorStoreUnavailableError(
            f"no Chroma server answers at http://{where} ({type(exc).__name__}: "
            f"{exc or 'no detail'}); start one with `chroma run --path <folder> --host {host} "
            f"--port {port}`, or give the host and port of a running one"
        ) from exc
    # chromadb.api.fastapi.FastAPI: the HTTP session and its requests
    server = client._server
    try:
        session, make_request = server._session, server._make_request
    except AttributeError as exc:  # pragma: no cover - a chromadb whose internals moved
        raise RuntimeError(
            f"cannot set timeouts on chromadb {chromadb.__version__}'s HttpClient "
            f"({type(server).__name__} has no _session/_make_request); fairrag is tested with "
            "chromadb 1.5"
        ) from exc
    session.timeout = limits
    if not getattr(make_request, "_fairrag_typed_errors", False):
        bound_whole_requests(session)  # a trickled answer ends on the deadline too
        breaker = CircuitBreaker(where, cooldown)
        server._make_request = _typed_transport_errors(make_request, where, limits, breaker)
    return client


_BUILD_REQUESTS = 3
"""Requests ``chromadb.HttpClient`` makes while it is built (its identity, tenant and
database checks): building it waits at most this many whole-request deadlines."""


def _built_within(build: Callable[[], Any], seconds: float, where: str) -> Any:
    """``build()``, given at most ``seconds``: chromadb's client makes its first requests while
    it is built, on a session with no timeout yet (a review: 21 s behind a trickling proxy with
    1 s timeouts). Past them, a :class:`~fairrag_core.VectorStoreUnavailableError`; the
    building thread is left to end on its own (a daemon; limit: it waits as long as the server
    holds its request open, chromadb's session having no timeout while it is built)."""
    import threading

    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["client"] = build()
        except BaseException as exc:  # handed to the caller below
            done["error"] = exc

    builder = threading.Thread(target=run, name="fairrag-chroma-connect", daemon=True)
    builder.start()
    builder.join(seconds)
    if builder.is_alive():
        raise VectorStoreUnavailableError(
            f"Chroma server at http://{where} did not answer while the client was built "
            f"({seconds:g} s: {_BUILD_REQUESTS} requests' deadlines); nothing was retried"
        )
    if "error" in done:
        raise done["error"]
    return done["client"]


def circuit_breaker(client: Any) -> CircuitBreaker | None:
    """The :class:`CircuitBreaker` of a client made by :func:`connect_chroma_server`."""
    request = getattr(getattr(client, "_server", None), "_make_request", None)
    return getattr(request, "breaker", None)


class CircuitBreaker(_CoreBreaker):
    """Fail fast while a Chroma server is known to be down
    (:class:`fairrag_core.breaker.CircuitBreaker`: closed -> open -> half-open), raising
    :class:`~fairrag_core.VectorStoreUnavailableError`."""

    def __init__(self, where: str, cooldown: float = DEFAULT_COOLDOWN) -> None:
        super().__init__(f"Chroma server at http://{where}", cooldown, VectorStoreUnavailableError)
        self.where = where

    def before(self, method: str, path: str) -> None:
        """Let a request through, or raise the typed error at once while the circuit is open."""
        self.check(f"{method.upper()} {path}")


def _typed_transport_errors(
    make_request: Any, where: str, limits: Any, breaker: CircuitBreaker
) -> Callable[..., Any]:
    """Wrap chromadb's one request method: transport errors become typed, with the cause kept,
    and the breaker fails requests fast while the server is known to be down."""
    import httpx

    from .http_deadline import deadline

    whole = limits.connect + limits.read  # one request's deadline, start to last byte

    @functools.wraps(make_request)
    def request(method: str, path: str, **kwargs: Any) -> Any:
        breaker.before(method, path)
        try:
            with deadline(whole):
                result = make_request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            breaker.failed(exc, f"{method.upper()} {path}: {type(exc).__name__}")
            raise VectorStoreUnavailableError(
                f"Chroma server at http://{where} did not answer {method.upper()} {path} in time "
                f"(connect {limits.connect:g} s, read {limits.read:g} s, the whole request "
                f"{whole:g} s; {type(exc).__name__}); nothing was retried"
            ) from exc
        except httpx.TransportError as exc:
            breaker.failed(exc, f"{method.upper()} {path}: {type(exc).__name__}")
            raise VectorStoreUnavailableError(
                f"Chroma server at http://{where} is unavailable: {method.upper()} {path} failed "
                f"with {type(exc).__name__}: {exc or 'no detail'}; nothing was retried"
            ) from exc
        except Exception:
            breaker.succeeded()  # the server answered (with an error of its own)
            raise
        except BaseException:
            breaker.abandoned()  # stopped (KeyboardInterrupt): nothing learnt of the server
            raise
        breaker.succeeded()
        return result

    request._fairrag_typed_errors = True  # type: ignore[attr-defined]
    request.breaker = breaker  # type: ignore[attr-defined]
    return request


def collection_name(corpus: str, model_name: str, fingerprint: str, text: str = "csv") -> str:
    """``fairrag-<corpus>[-<text>]-<model>-<fingerprint>``: the study's collection on a shared
    server (the text source named unless it is ``csv``).

    On a server one collection per corpus, text source and model (as one folder each embedded,
    :func:`index_folder`), so runs with other topics, texts or models never mix documents.
    """
    return f"fairrag-{_with_text(corpus, text)}-{_slug(model_name)}-{fingerprint}"


def open_collection(client: Any, name: str) -> Any:
    """Get or create ``name`` with cosine space, :data:`EF_SEARCH`, no Chroma embedding function.

    ``embedding_function=None`` stops Chroma from running (and downloading) its default ONNX
    model: embeddings are always computed by us and passed in. A collection made before
    :data:`EF_SEARCH` was set (an index cached by an earlier version) gets it in place: search
    breadth can change without rebuilding the index.
    """
    collection = client.get_or_create_collection(
        name, configuration=COLLECTION_SPACE, embedding_function=None
    )
    hnsw = (collection.configuration or {}).get("hnsw") or {}
    if hnsw.get("ef_search") != EF_SEARCH:
        collection.modify(configuration={"hnsw": {"ef_search": EF_SEARCH}})
    return collection


def embedding_order(model: Any, texts: Sequence[str]) -> list[int]:
    """The order to embed ``texts`` in: longest first by tokens (:func:`token_lengths`), ties in
    their given order, so each forward pass pads as little as the whole set allows."""
    lengths = token_lengths(model, texts)
    return sorted(range(len(texts)), key=lambda i: -lengths[i])


def embed_missing(
    collection: Any,
    documents: Sequence[CorpusDocument],
    model: Any,
    *,
    add_batch: int = ADD_BATCH,
    progress: bool = False,
) -> int:
    """Embed and add the documents the collection does not hold yet; returns how many.

    docs/SPEC.md, "The study": Index build. The missing documents are embedded in
    :func:`embedding_order` over all of them (not chunk by chunk), :data:`ENCODE_BATCH` texts a
    forward pass, and added in slices of ``add_batch`` (at most the client's maximum batch),
    each slice added as soon as it is embedded. Resumable: an interrupted build keeps the
    slices already added, and the next call embeds only the rest. Embeddings are
    L2-normalised so cosine distance is ``1 - dot``. ``progress`` shows a bar of documents
    embedded.
    """
    if isinstance(add_batch, bool) or not isinstance(add_batch, int) or add_batch < 1:
        raise ValueError(f"add_batch must be an integer >= 1, got {add_batch!r}")
    have: set[str] = set()
    ids = [doc.doc_id for doc in documents]
    for start in range(0, len(ids), 5000):
        have.update(collection.get(ids=ids[start : start + 5000], include=[])["ids"])
    todo = [doc for doc in documents if doc.doc_id not in have]
    if not todo:
        return 0
    todo = [todo[i] for i in embedding_order(model, [doc.page_content for doc in todo])]
    step = min(add_batch, _max_add_batch(collection))
    bar = progress_bar(progress, len(todo), "embedding corpus", "doc")
    try:
        for start in range(0, len(todo), step):
            batch = todo[start : start + step]
            texts = [doc.page_content for doc in batch]
            vectors: list[list[float]] = []
            for first in range(0, len(texts), ENCODE_BATCH):
                chunk = texts[first : first + ENCODE_BATCH]
                encoded = model.encode(chunk, batch_size=ENCODE_BATCH, normalize_embeddings=True)
                vectors.extend(encoded.tolist())
                bar.update(len(chunk))
            collection.add(
                ids=[doc.doc_id for doc in batch],
                embeddings=vectors,
                documents=texts,
                metadatas=[doc.metadata() for doc in batch],
            )
    finally:
        bar.close()
    return len(todo)


def _max_add_batch(collection: Any) -> int:
    """The most records the collection's client takes in one ``add`` (:data:`ADD_BATCH` if
    the client does not say)."""
    limit = getattr(getattr(collection, "_client", None), "get_max_batch_size", None)
    value = limit() if callable(limit) else None
    return value if isinstance(value, int) and value > 0 else ADD_BATCH


def probe_vectors(documents: Sequence[CorpusDocument], model: Any) -> list[tuple[str, list[float]]]:
    """Three documents of the corpus (first, middle, last) with their vectors, for a probe."""
    if not documents:
        return []
    chosen = {0: documents[0], 1: documents[len(documents) // 2], 2: documents[-1]}
    picked = list({doc.doc_id: doc for doc in chosen.values()}.values())
    vectors = model.encode(
        [doc.page_content for doc in picked], batch_size=ENCODE_BATCH, normalize_embeddings=True
    )
    return [(doc.doc_id, vector.tolist()) for doc, vector in zip(picked, vectors, strict=True)]


def open_embedded_index(
    folder: Path,
    name: str,
    documents: Sequence[CorpusDocument],
    model: Any,
    *,
    progress: bool = False,
    log: Callable[[str], None] = print,
) -> tuple[Any, Any, int]:
    """``(client, collection, added)``: the persistent index in ``folder``, verified, completed.

    A cached index is trusted when its segment files match the manifest written when it was
    last verified (:mod:`fairrag_study.integrity`); otherwise it is probed in a child process,
    and a damaged one (segment folder deleted, a data file zeroed, truncated or overwritten,
    Chroma crashing on it) is deleted and rebuilt, with a message naming the folder. After the
    documents are embedded the index must hold exactly the corpus and pass the probe, else
    :class:`IndexDamagedError` names the folder; then the manifest is written.
    """
    import chromadb

    probes: list[tuple[str, list[float]]] | None = None
    verified = False
    if (folder / "chroma.sqlite3").exists():
        mismatch = manifest_mismatch(folder, name, len(documents))
        if mismatch is None:
            verified = True
        else:
            probes = probe_vectors(documents, model)
            problem = probe_folder(folder, name, probes, expected_count=None)
            if problem is not None:
                log(f"index {folder} is damaged ({problem}; {mismatch}): rebuilding it")
                shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    client: Any = chromadb.PersistentClient(path=str(folder))
    try:
        collection = open_collection(client, name)
        added = embed_missing(collection, documents, model, progress=progress)
        count = collection.count()  # every corpus id is there now; nothing else may be
        if count != len(documents):
            raise IndexDamagedError(
                f"the index at {folder} holds {count} documents, the corpus {len(documents)}: "
                "it holds documents the corpus does not. Delete the folder and run again"
            )
        if not verified or added:
            verify_collection(collection, documents, model, where=str(folder), probes=probes)
            write_manifest(folder, name, collection.count())
    except BaseException:
        client.close()
        raise
    return client, collection, added


def verify_collection(
    collection: Any,
    documents: Sequence[CorpusDocument],
    model: Any,
    *,
    where: str,
    probes: list[tuple[str, list[float]]] | None = None,
) -> None:
    """The collection holds exactly the corpus and answers probes exactly, else
    :class:`IndexDamagedError` naming ``where`` (the index folder or the server)."""
    problem = probe_collection(
        collection, probes or probe_vectors(documents, model), expected_count=len(documents)
    )
    if problem is not None:
        raise IndexDamagedError(
            f"the index at {where} is not the corpus's: {problem}. Delete it (embedded: the "
            "folder; server: the collection) and run again to rebuild it"
        )


def index_folder(
    cache_dir: Path, corpus: str, model_name: str, fingerprint: str, text: str = "csv"
) -> Path:
    """``<cache>/index/<corpus>[-<text>]-<model>-<fingerprint>``: one folder per corpus, text
    source (named unless it is ``csv``; docs/SPEC.md, "The study", Index) and model."""
    return cache_dir / "index" / f"{_with_text(corpus, text)}-{_slug(model_name)}-{fingerprint}"


def _with_text(corpus: str, text: str) -> str:
    return corpus if text == "csv" else f"{corpus}-{text}"


def _slug(model_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model_name.rsplit("/", 1)[-1])

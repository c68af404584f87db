"""Is a cached index what the corpus says? A manifest of its segment files, and a probe run in a
child process (a damaged HNSW file can crash Chroma's native code; the child's crash becomes a
clear error here instead of ending the study).

Chroma's embedded index keeps documents and metadata in ``chroma.sqlite3`` and the vectors'
HNSW graph in one folder per segment, written every ``sync_threshold`` (1,000) vectors. With
that folder deleted, or its ``data_level0.bin`` zeroed or truncated, Chroma still reports the
full count but answers queries from the few vectors it had not flushed (pools of one document);
with random bytes there it fails to find ids, and with random neighbour ids in the graph's link
lists it crashes (SIGSEGV). So the index is trusted only when its segment files
match the manifest written when it was built and verified, else after a probe: query documents
whose own vectors are known, and check each finds itself (distance ~0) in a pool of
``min(n, count)`` candidates.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .data import sha256_of

__all__ = [
    "INDEX_MANIFEST",
    "PROBE_TIMEOUT",
    "probe_collection",
    "probe_folder",
    "read_manifest",
    "segment_files",
    "write_manifest",
]

INDEX_MANIFEST = "fairrag-index.json"
"""In the index folder: the segment files (size, sha256) of the index as last verified."""
PROBE_TIMEOUT = 300.0
"""Seconds the probe child may take (a hung native library must not hang the study)."""
PROBE_DISTANCE = 1e-3
"""A document queried with its own vector is at cosine distance ~0 (float32 rounding)."""
PROBE_POOL = 50


def segment_files(folder: Path) -> dict[str, dict[str, Any]]:
    """``{relative path: {"size", "sha256"}}`` of the files in the index's segment folders.

    ``chroma.sqlite3`` is left out: Chroma rewrites it on every open. The segment files change
    only when vectors are added (checked: identical after reopening and querying).
    """
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*/*")):
        if path.is_file():
            rel = path.relative_to(folder).as_posix()
            files[rel] = {"size": path.stat().st_size, "sha256": sha256_of(path)}
    return files


def write_manifest(folder: Path, collection: str, count: int) -> None:
    """Record the verified index: its collection, document count and segment files."""
    payload = {"collection": collection, "count": count, "segments": segment_files(folder)}
    tmp = folder / (INDEX_MANIFEST + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, folder / INDEX_MANIFEST)


def read_manifest(folder: Path) -> dict[str, Any] | None:
    try:
        payload = json.loads((folder / INDEX_MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


def manifest_mismatch(folder: Path, collection: str, count: int) -> str | None:
    """Why the folder's segment files differ from its manifest (or there is none), else None."""
    manifest = read_manifest(folder)
    if manifest is None:
        return f"no readable {INDEX_MANIFEST}"
    if manifest.get("collection") != collection or manifest.get("count") != count:
        return (
            f"{INDEX_MANIFEST} describes collection {manifest.get('collection')!r} with "
            f"{manifest.get('count')} documents, expected {collection!r} with {count}"
        )
    expected, actual = manifest.get("segments") or {}, segment_files(folder)
    if not expected:
        return f"{INDEX_MANIFEST} lists no segment files"
    for name, meta in expected.items():
        if name not in actual:
            return f"segment file {name} is missing"
        if actual[name]["size"] != meta.get("size"):
            size = actual[name]["size"]
            return f"segment file {name} has {size} bytes, expected {meta.get('size')}"
        if actual[name]["sha256"] != meta.get("sha256"):
            return f"segment file {name} differs from the one verified (sha256)"
    extra = sorted(set(actual) - set(expected))
    if extra:
        return f"segment files {extra} are not in {INDEX_MANIFEST}"
    return None


def probe_collection(
    collection: Any, probes: Sequence[tuple[str, Sequence[float]]], expected_count: int | None
) -> str | None:
    """Why ``collection`` is not the index it should be, or ``None`` when it passes.

    ``expected_count`` documents must be there, and every probe ``(id, vector)``; with
    ``expected_count=None`` (an index whose build may have been interrupted) only the probes
    the collection holds must be found. Each probe vector is queried (first, as the study
    would: that is where a damaged segment crashes Chroma) for ``min(PROBE_POOL, count)``
    candidates; every query must return that many, a held probe must find itself at distance
    ~0, and the candidates' distances must be the exact cosine top ones over every stored
    vector (an approximate index that lost its graph would return others).
    """
    import numpy as np

    count = collection.count()
    if expected_count is not None and count != expected_count:
        return f"the collection holds {count} documents, the corpus {expected_count}"
    if count == 0 or not probes:
        return None
    n_results = min(PROBE_POOL, count)
    vectors = np.asarray([list(map(float, vector)) for _, vector in probes])
    answer = collection.query(
        query_embeddings=vectors.tolist(), n_results=n_results, include=["distances"]
    )
    held = set(collection.get(ids=[doc_id for doc_id, _ in probes], include=[])["ids"])
    if expected_count is not None and len(held) < len(probes):
        missing = sorted({doc_id for doc_id, _ in probes} - held)
        return f"documents {missing} of the corpus are not in the collection"
    stored = np.asarray(collection.get(include=["embeddings"])["embeddings"], dtype=float)
    stored /= np.maximum(np.linalg.norm(stored, axis=1, keepdims=True), 1e-12)
    queries = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    exact = np.sort(1.0 - queries @ stored.T, axis=1)[:, :n_results]
    answers = zip(probes, answer["ids"], answer["distances"], exact, strict=True)
    for (doc_id, _), ids, distances, best in answers:
        if len(ids) != n_results:
            return (
                f"a query returned {len(ids)} candidates, expected {n_results} "
                f"(min({PROBE_POOL}, {count} documents))"
            )
        found = [i for i, d in zip(ids, distances, strict=True) if d <= PROBE_DISTANCE]
        if doc_id in held and doc_id not in found:
            return f"document {doc_id} queried with its own vector did not find itself"
        if not np.allclose(np.sort(distances), best, atol=PROBE_DISTANCE):
            return "a query's candidates are not the exact nearest documents"
    return None


def probe_folder(
    folder: Path,
    collection: str,
    probes: Sequence[tuple[str, Sequence[float]]],
    expected_count: int | None,
    *,
    timeout: float = PROBE_TIMEOUT,
) -> str | None:
    """:func:`probe_collection` on the embedded index in ``folder``, run in a child process.

    Returns why the index fails (a crash or a timeout of the child included), or ``None``.
    """
    request = {
        "folder": str(folder),
        "collection": collection,
        "probes": [[doc_id, list(map(float, vector))] for doc_id, vector in probes],
        "expected_count": expected_count,
    }
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    try:
        child = subprocess.run(
            [sys.executable, "-m", "fairrag_study.integrity"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return f"opening and querying it took more than {timeout:g} s (the probe was stopped)"
    if child.returncode < 0:
        name = signal.Signals(-child.returncode).name
        return f"opening and querying it crashed Chroma ({name})"
    lines = child.stdout.strip().splitlines()
    try:
        verdict = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (child.stderr.strip().splitlines() or ["no output"])[-1]
        return f"the probe ended with status {child.returncode}: {tail}"
    return verdict.get("problem")


def _probe_main() -> int:
    """The child: read the request on stdin, print ``{"problem": ...}`` as the last line."""
    request = json.loads(sys.stdin.read())
    try:
        import chromadb

        client: Any = chromadb.PersistentClient(path=request["folder"])
        try:
            collection = client.get_collection(request["collection"])
            problem = probe_collection(
                collection, [tuple(p) for p in request["probes"]], request["expected_count"]
            )
        finally:
            client.close()
    except Exception as exc:  # any failure to open or query is the verdict, not a crash here
        problem = f"opening and querying it failed with {type(exc).__name__}: {exc}"
    print(json.dumps({"problem": problem}))
    return 0


if __name__ == "__main__":
    sys.exit(_probe_main())

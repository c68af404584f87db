"""A damaged cached index is found before it is trusted and rebuilt, never reported on.

The index is a real one built by the study from real documents, with its HNSW segment on disk:
Chroma writes the segment every ``sync_threshold`` vectors (1,000 by default), so the test's
collection is created with a threshold of 10 and 72 documents suffice. Each kind of damage the
issue found (segment folder deleted, data file zeroed, truncated, overwritten with random bytes)
and random neighbour ids in its link lists (which crash Chroma) must end in a rebuilt index
answering as the intact one did, and a study on it in the very records of an intact run.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fairrag_study.cli import main
from fairrag_study.data import CorpusDocument, build_corpus, load_documents
from fairrag_study.embedding import DEFAULT_MODEL, load_sentence_transformer
from fairrag_study.index import corpus_fingerprint, index_folder, open_embedded_index, probe_vectors
from fairrag_study.integrity import INDEX_MANIFEST
from fairrag_study.phases.index import COLLECTION
from tests.chroma_pool import data_path_or_skip

pytestmark = pytest.mark.integration

TOPICS = ("Computer science", "Medicine", "Tennis")
PER_GROUP = 12
SYNC_THRESHOLD = 10
"""Vectors between two writes of the HNSW segment (Chroma's default is 1,000)."""


def _records(out: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return [(r["ranker"], r["trial"], r["titles"], r["groups"], r["exposure_share"]) for r in rows]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The study's index, built once with its segment on disk, kept as a pristine copy; and the
    records of an intact run."""
    import chromadb

    data = data_path_or_skip()
    root = tmp_path_factory.mktemp("damaged")
    cache = root / "cache"
    corpus = build_corpus(load_documents(data), "balanced", topics=TOPICS, per_group=PER_GROUP)
    folder = index_folder(
        cache, "balanced", DEFAULT_MODEL, corpus_fingerprint(corpus, DEFAULT_MODEL)
    )
    client = chromadb.PersistentClient(path=str(folder))
    hnsw = {"space": "cosine", "ef_search": 500, "sync_threshold": SYNC_THRESHOLD}
    client.create_collection(
        COLLECTION,
        configuration={"hnsw": {**hnsw, "batch_size": SYNC_THRESHOLD}},
        embedding_function=None,
    )
    client.close()
    args = [
        "study", "--data", str(data), "--topics", ",".join(TOPICS), "--per-group", str(PER_GROUP),
        "--trials", "4", "--rankers", "standard,representative_stochastic", "--llm", "none",
        "--cache-dir", str(cache), "--no-progress",
    ]  # fmt: skip
    assert main([*args, "--out", str(root / "intact")]) == 0
    (segment,) = [p for p in folder.iterdir() if p.is_dir()]
    assert (segment / "data_level0.bin").stat().st_size > 0  # the vectors are on disk
    assert (folder / INDEX_MANIFEST).is_file()
    pristine = root / "pristine"
    shutil.copytree(folder, pristine)
    model = load_sentence_transformer(DEFAULT_MODEL)
    queries = probe_vectors(corpus, model)
    return {
        "model": model,
        "queries": queries,
        "pools": _pools(folder, corpus, model, queries),
        "args": args,
        "folder": folder,
        "pristine": pristine,
        "corpus": corpus,
        "records": _records(root / "intact"),
    }


def _pools(
    folder: Path,
    corpus: list[CorpusDocument],
    model: Any,
    queries: list[tuple[str, list[float]]],
    log: Callable[[str], None] = print,
) -> list[list[str]]:
    """Every id, nearest first, per query vector, from the index in ``folder`` (study-opened)."""
    client, collection, _ = open_embedded_index(folder, COLLECTION, corpus, model, log=log)
    try:
        answer = collection.query(query_embeddings=[v for _, v in queries], n_results=len(corpus))
    finally:
        client.close()
    return answer["ids"]


def _restore(built: dict[str, Any]) -> Path:
    shutil.rmtree(built["folder"], ignore_errors=True)
    shutil.copytree(built["pristine"], built["folder"])
    (segment,) = [p for p in built["folder"].iterdir() if p.is_dir()]
    return segment


def _delete_folder(segment: Path) -> None:
    shutil.rmtree(segment)


def _zero(segment: Path) -> None:
    data = segment / "data_level0.bin"
    data.write_bytes(bytes(data.stat().st_size))


def _truncate(segment: Path) -> None:
    (segment / "data_level0.bin").write_bytes(b"")


def _random_bytes(segment: Path) -> None:
    data = segment / "data_level0.bin"
    data.write_bytes(np.random.default_rng(0).bytes(data.stat().st_size))  # labels lost too


LINKS = 4 + 2 * 16 * 4
"""Bytes of an element's level-0 link list in hnswlib's data_level0.bin: a count and 2 M
neighbour ids (M = 16, Chroma's max_neighbors); then the vector (384 float32) and the label."""
ELEMENT = LINKS + 384 * 4 + 8


def _random_links(segment: Path) -> None:
    """Random neighbour ids in every element's link list, labels and vectors kept: the graph
    search follows ids outside the index (hnswlib does not check them) and Chroma crashes."""
    data = segment / "data_level0.bin"
    raw = bytearray(data.read_bytes())
    assert len(raw) % ELEMENT == 0, (len(raw), ELEMENT)
    rng = np.random.default_rng(0)
    for start in range(0, len(raw), ELEMENT):
        raw[start + 4 : start + LINKS] = rng.bytes(LINKS - 4)
    data.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    "damage, why",
    [
        (_delete_folder, "is missing"),
        (_zero, "differs from the one verified"),
        (_truncate, "has 0 bytes"),
        (_random_bytes, "failed with InternalError"),
        (_random_links, "crashed Chroma (SIGSEGV)"),
    ],
    ids=[
        "segment-folder-deleted",
        "data-zeroed",
        "data-truncated",
        "data-random-bytes",
        "data-random-links",
    ],
)
def test_a_damaged_index_is_found_and_rebuilt(
    built: dict[str, Any], damage: Callable[[Path], None], why: str
) -> None:
    damage(_restore(built))
    said: list[str] = []
    pools = _pools(built["folder"], built["corpus"], built["model"], built["queries"], said.append)
    assert len(said) == 1
    assert said[0].startswith(f"index {built['folder']} is damaged (")
    assert said[0].endswith("rebuilding it") and why in said[0]  # a crash is the probe child's
    assert pools == built["pools"]
    assert (built["folder"] / INDEX_MANIFEST).is_file()


def test_a_study_on_a_damaged_index_rebuilds_it_and_reports_right(
    built: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _delete_folder(_restore(built))  # the case: pools of one document, exit 0
    out = tmp_path / "out"
    assert main([*built["args"], "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"index {built['folder']} is damaged (" in printed
    assert f"({len(built['corpus'])} embedded now)" in printed
    assert _records(out) == built["records"]
    assert json.loads((out / "run.json").read_text())["status"] == "complete"


def test_an_intact_index_without_a_manifest_is_probed_and_kept(
    built: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _restore(built)
    (built["folder"] / INDEX_MANIFEST).unlink()  # as cached by a version without manifests
    out = tmp_path / "out"
    assert main([*built["args"], "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "is damaged" not in printed and "(0 embedded now)" in printed
    assert (built["folder"] / INDEX_MANIFEST).is_file()
    assert _records(out) == built["records"]


def test_a_short_pool_stops_the_study_naming_the_index(
    built: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The last check: were a damaged index trusted, its short pools stop the run (exit 2)."""
    import fairrag_study.index as index_module

    _delete_folder(_restore(built))
    monkeypatch.setattr(index_module, "manifest_mismatch", lambda *args: None)  # trust blindly
    out = tmp_path / "out"
    assert main([*built["args"], "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert f"the index at {built['folder']} returned" in error
    assert "for a pool of 50 (it holds 72 documents): it is damaged" in error
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and "IndexDamagedError" in run["error"]
    assert not (out / "report.md").exists()


def test_an_index_holding_documents_the_corpus_does_not_is_refused(built: dict[str, Any]) -> None:
    import chromadb

    from fairrag_study.errors import IndexDamagedError

    _restore(built)
    client = chromadb.PersistentClient(path=str(built["folder"]))
    client.get_collection(COLLECTION).add(
        ids=["not-in-the-corpus"], embeddings=[built["queries"][0][1]], documents=["Title: X"]
    )
    client.close()
    with pytest.raises(IndexDamagedError, match="holds 73 documents, the corpus 72"):
        _pools(built["folder"], built["corpus"], built["model"], built["queries"])

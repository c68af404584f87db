"""The study's embedding: the ONNX export gives sentence-transformers' vectors and pools, the
corpus is embedded longest first over the whole set, an interrupted build resumes, and the
backend flag is checked (docs/SPEC.md, "The study": Embedding, Index build)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
import pytest

from fairrag_study import embedding
from fairrag_study.cli import main
from fairrag_study.data import build_corpus, load_documents, sha256_of, study_topics
from fairrag_study.embedding import (
    DEFAULT_MODEL,
    MAX_ABS_DIFF,
    EmbeddingBackendWarning,
    OnnxEmbedder,
    embedding_backend,
    load_embedding_model,
    onnx_folder,
    record_path,
    token_lengths,
)
from fairrag_study.errors import ModelNotFoundError
from fairrag_study.index import ENCODE_BATCH, embed_missing, open_collection
from fairrag_study.plan import plan_trials
from fairrag_study.study import StudyConfig, run_study
from tests.chroma_pool import data_path_or_skip

ROOT = Path(__file__).resolve().parents[2]
TOPICS = ("Computer science", "Medicine", "Tennis")
PER_GROUP = 30
"""3 topics x 2 groups x 30: 180 documents, pools of 50 (the study's size)."""


class Spy:
    """A model that records the texts of every ``encode`` call (all else is the model's)."""

    def __init__(self, model: Any) -> None:
        self.model, self.calls = model, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def encode(self, texts: Any, **kwargs: Any) -> Any:
        self.calls.append(list(texts))
        return self.model.encode(texts, **kwargs)


def _stored(collection: Any) -> dict[str, np.ndarray]:
    got = collection.get(include=["embeddings"])
    return dict(zip(got["ids"], np.asarray(got["embeddings"], dtype=np.float32), strict=True))


def _pools(collection: Any, queries: np.ndarray) -> list[list[str]]:
    found = collection.query(query_embeddings=queries.tolist(), n_results=50, include=[])
    return [list(ids) for ids in found["ids"]]


@pytest.fixture(scope="module")
def real() -> dict[str, Any]:
    """A real subset of the balanced corpus and the study's questions on its topics."""
    documents = load_documents(data_path_or_skip())
    corpus = build_corpus(documents, "balanced", topics=TOPICS, per_group=PER_GROUP)
    trials = plan_trials(study_topics(documents, TOPICS), 12, 2026)
    return {"corpus": corpus, "questions": [t.question for t in trials]}


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory: pytest.TempPathFactory, sentence_model: Any) -> OnnxEmbedder:
    """The export of the packaged model, made once for this module in its own cache."""
    model = load_embedding_model(cache_dir=tmp_path_factory.mktemp("cache"), log=lambda _: None)
    assert isinstance(model, OnnxEmbedder)
    return model


@pytest.fixture(scope="module")
def built(real: dict[str, Any], sentence_model: Any, onnx_model: OnnxEmbedder) -> dict[str, Any]:
    """The subset embedded by embed_missing with each backend (every encode call recorded)."""
    client = chromadb.EphemeralClient()
    result: dict[str, Any] = {}
    for backend, model in (("torch", sentence_model), ("onnx", onnx_model)):
        spy = Spy(model)
        collection = open_collection(client, f"{backend}-{uuid.uuid4().hex[:8]}")
        assert embed_missing(collection, real["corpus"], spy) == len(real["corpus"])
        queries = model.encode(real["questions"], batch_size=64, normalize_embeddings=True)
        result[backend] = {"collection": collection, "calls": spy.calls, "queries": queries}
    return result


@pytest.mark.integration
def test_both_backends_give_the_same_vectors_and_identical_pools(built: dict[str, Any]) -> None:
    torch, onnx = built["torch"], built["onnx"]
    vectors = {name: _stored(side["collection"]) for name, side in built.items()}
    assert vectors["torch"].keys() == vectors["onnx"].keys()
    worst = max(
        float(np.abs(vectors["torch"][i] - vectors["onnx"][i]).max()) for i in vectors["torch"]
    )
    assert worst <= MAX_ABS_DIFF  # measured here: ~1.5e-7
    assert np.abs(torch["queries"] - onnx["queries"]).max() <= MAX_ABS_DIFF
    # ids in order: each index with its own question vectors, and crossed (the index cache
    # serves either backend)
    pools = _pools(torch["collection"], torch["queries"])
    assert len(pools) == 12 and all(len(p) == 50 for p in pools)
    assert _pools(onnx["collection"], onnx["queries"]) == pools
    assert _pools(torch["collection"], onnx["queries"]) == pools
    assert _pools(onnx["collection"], torch["queries"]) == pools


@pytest.mark.integration
def test_the_export_tokenizes_as_sentence_transformers(
    real: dict[str, Any], sentence_model: Any, onnx_model: OnnxEmbedder
) -> None:
    texts = [doc.page_content for doc in real["corpus"]]
    texts += ["", "  spaces around  ", "Title: É\n" + "long text " * 300, *real["questions"]]
    for start in range(0, len(texts), ENCODE_BATCH):
        batch = texts[start : start + ENCODE_BATCH]
        want = sentence_model.preprocess(batch)
        got = onnx_model.tokenize(batch)
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            assert np.array_equal(got[key], want[key].numpy()), (key, start)
    assert max(token_lengths(onnx_model, texts)) == 256  # truncated at max_seq_length
    assert token_lengths(onnx_model, texts) == token_lengths(sentence_model, texts)


@pytest.mark.integration
def test_the_corpus_is_embedded_longest_first_with_the_vectors_of_corpus_order(
    real: dict[str, Any], built: dict[str, Any], sentence_model: Any
) -> None:
    texts = [doc.page_content for doc in real["corpus"]]
    for side in built.values():
        calls = side["calls"]
        assert all(len(call) <= ENCODE_BATCH for call in calls)
        assert sorted(text for call in calls for text in call) == sorted(texts)
        lengths = token_lengths(sentence_model, [text for call in calls for text in call])
        assert lengths == sorted(lengths, reverse=True)  # one order over the whole set
    # The study before embedded chunks of 64 in corpus order: the same vector for every id.
    before = np.concatenate(
        [
            sentence_model.encode(texts[s : s + 64], batch_size=16, normalize_embeddings=True)
            for s in range(0, len(texts), 64)
        ]
    )
    stored = _stored(built["torch"]["collection"])
    worst = max(
        float(np.abs(stored[doc.doc_id] - vector).max())
        for doc, vector in zip(real["corpus"], before, strict=True)
    )
    assert worst <= MAX_ABS_DIFF  # measured here: ~1.5e-7 (only the padding changed)


class Interrupting:
    """A collection whose ``add`` is interrupted on call ``stop`` (before it adds anything), and
    whose client allows at most ``max_batch`` records per add."""

    def __init__(self, collection: Any, stop: int | None, max_batch: int) -> None:
        self.collection, self.stop, self.sizes = collection, stop, []
        self._client = type("Client", (), {"get_max_batch_size": lambda _: max_batch})()

    def get(self, **kwargs: Any) -> Any:
        return self.collection.get(**kwargs)

    def add(self, **kwargs: Any) -> None:
        if len(self.sizes) + 1 == self.stop:
            raise KeyboardInterrupt
        self.sizes.append(len(kwargs["ids"]))
        self.collection.add(**kwargs)


@pytest.mark.integration
def test_an_interrupted_build_resumes_where_it_stopped(
    tmp_path: Path, real: dict[str, Any], onnx_model: OnnxEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = real["corpus"][:100]
    client = chromadb.PersistentClient(path=str(tmp_path / "index"))
    first = Interrupting(open_collection(client, "corpus"), stop=3, max_batch=1000)
    with pytest.raises(KeyboardInterrupt):
        embed_missing(first, corpus, onnx_model, add_batch=32)
    assert first.sizes == [32, 32]
    client.close()

    bars: list[Any] = []

    def recording_bar(show: bool, total: int, desc: str, unit: str) -> Any:
        bars.append({"total": total, "done": 0, "closed": False, "desc": desc})

        class Bar:
            def update(self, n: int) -> None:
                bars[-1]["done"] += n

            def close(self) -> None:
                bars[-1]["closed"] = True

        return Bar()

    monkeypatch.setattr("fairrag_study.index.progress_bar", recording_bar)
    client = chromadb.PersistentClient(path=str(tmp_path / "index"))  # a new process would
    collection = open_collection(client, "corpus")
    kept = set(collection.get(include=[])["ids"])
    assert len(kept) == 64  # the two slices added before the interruption stayed
    spy = Spy(onnx_model)
    again = Interrupting(collection, stop=None, max_batch=10)  # the client's limit applies
    assert embed_missing(again, corpus, spy, add_batch=32, progress=True) == 36
    assert again.sizes == [10, 10, 10, 6]
    embedded = {text for call in spy.calls for text in call}
    assert embedded == {doc.page_content for doc in corpus if doc.doc_id not in kept}
    assert bars == [{"total": 36, "done": 36, "closed": True, "desc": "embedding corpus"}]
    assert embed_missing(collection, corpus, spy) == 0  # complete: nothing more to embed

    whole = open_collection(chromadb.EphemeralClient(), f"whole-{uuid.uuid4().hex[:8]}")
    embed_missing(whole, corpus, onnx_model)
    resumed, uninterrupted = _stored(collection), _stored(whole)
    assert resumed.keys() == uninterrupted.keys()
    assert max(float(np.abs(resumed[i] - uninterrupted[i]).max()) for i in resumed) <= MAX_ABS_DIFF
    client.close()


def _records(out: Path) -> list[tuple[Any, ...]]:
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return [(r["ranker"], r["trial"], r["doc_ids"], r["exposure_share"]) for r in rows]


@pytest.mark.integration
def test_an_interrupted_first_study_resumes_its_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's promise, through the study: Ctrl-C while the corpus is being added keeps
    the slices added; the next run passes the index's probe (no manifest yet: the probe of an
    interrupted build), embeds only the rest, and reports as an uninterrupted run."""
    from chromadb.api.models.Collection import Collection

    monkeypatch.setattr("fairrag_study.index._max_add_batch", lambda collection: 16)
    real_add, sizes = Collection.add, []

    def interrupted_add(self: Any, *args: Any, **kwargs: Any) -> Any:
        sizes.append(len(kwargs["ids"]))
        if len(sizes) == 2:
            raise KeyboardInterrupt
        return real_add(self, *args, **kwargs)

    monkeypatch.setattr(Collection, "add", interrupted_add)
    args = [
        "study", "--data", str(data_path_or_skip()), "--topics", "Tennis", "--per-group", "20",
        "--trials", "4", "--rankers", "standard,representative_stochastic", "--llm", "none",
        "--no-progress",
    ]  # fmt: skip
    cache = ["--cache-dir", str(tmp_path / "cache")]
    assert main([*args, *cache, "--out", str(tmp_path / "first")]) == 130
    assert sizes == [16, 16]  # the first slice was added, the second interrupted
    monkeypatch.setattr(Collection, "add", real_add)
    capsys.readouterr()
    assert main([*args, *cache, "--out", str(tmp_path / "resumed")]) == 0
    printed = capsys.readouterr().out
    assert ": 40 documents (24 embedded now)" in printed and "damaged" not in printed
    other = ["--cache-dir", str(tmp_path / "other")]
    assert main([*args, *other, "--out", str(tmp_path / "whole")]) == 0
    assert ": 40 documents (40 embedded now)" in capsys.readouterr().out
    assert _records(tmp_path / "resumed") == _records(tmp_path / "whole")


@pytest.mark.integration
def test_the_study_on_the_onnx_backend_never_imports_torch(
    tmp_path: Path, onnx_model: OnnxEmbedder
) -> None:
    cache = tmp_path / "cache"
    # exported already: the folder and its digest record, kept beside it
    _copy_with_record(onnx_model.folder, onnx_folder(cache, DEFAULT_MODEL))
    child = (
        "import json, sys\n"
        "from fairrag_study.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "heavy = ('torch', 'sentence_transformers', 'transformers')\n"
        "print(json.dumps([code, [m for m in heavy if m in sys.modules]]))\n"
    )
    args = [
        "study", "--data", str(data_path_or_skip()), "--topics", "Tennis", "--per-group", "10",
        "--trials", "4", "--rankers", "standard", "--llm", "none", "--no-progress",
        "--cache-dir", str(cache), "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", child, *args], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert "embedding with sentence-transformers/all-MiniLM-L6-v2 on onnx" in done.stdout
    assert "exporting" not in done.stdout
    assert json.loads(done.stdout.splitlines()[-1]) == [0, []]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "sentence-transformers/all-MiniLM-L6-v2 (onnx)" in report  # the backend is named


@pytest.mark.integration
@pytest.mark.parametrize(
    ("damage", "words", "again"),
    [
        # no export checked in this process: traced again from the model
        ("weights", "model.onnx differs from the file exported (sha256)", "exporting"),
        # the export checked in this process (the module's) is copied instead
        ("numbers", "probe vectors differ from those recorded at export by", "copying"),
        # a meta.json cut short (or of another format): not an export, made again
        ("meta", "is incomplete or of another format", "copying"),
    ],
)
def test_a_damaged_export_is_made_again(
    damage: str,
    words: str,
    again: str,
    tmp_path: Path,
    onnx_model: OnnxEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = onnx_folder(tmp_path, DEFAULT_MODEL)
    _copy_with_record(onnx_model.folder, folder)
    if damage == "weights":  # bytes in the middle: weights, that load and answer
        monkeypatch.setattr(embedding, "_VERIFIED", {})
        _damage_weights(folder)
    elif damage == "numbers":  # as if this onnxruntime computed otherwise than the one that
        meta = json.loads((folder / "meta.json").read_text())  # verified the export
        meta["probe_vectors"][0][0] += 1e-5
        (folder / "meta.json").write_text(json.dumps(meta))
    else:
        text = (folder / "meta.json").read_text()
        (folder / "meta.json").write_text(text[: len(text) // 2])
    said: list[str] = []
    model = load_embedding_model(cache_dir=tmp_path, log=said.append)
    assert isinstance(model, OnnxEmbedder) and model.check() <= MAX_ABS_DIFF
    assert model.folder == folder
    assert len(said) == 2 and words in said[0] and "exporting it again" in said[0]
    assert said[1].startswith(again) and "sentence-transformers/all-MiniLM-L6-v2" in said[1]


def _copy_with_record(source: Path, folder: Path) -> None:
    """An export folder copied with the digest record kept beside it."""
    shutil.copytree(source, folder)
    shutil.copyfile(record_path(source), record_path(folder))


def _damage_weights(folder: Path) -> None:
    """Random bytes in the middle of model.onnx: weights that still load and answer."""
    weights = folder / "model.onnx"
    with open(weights, "r+b") as handle:
        handle.seek(weights.stat().st_size // 2)
        handle.write(np.random.default_rng(0).bytes(4096))


@pytest.mark.integration
@pytest.mark.parametrize(
    ("case", "words"),
    [
        # the folder's own meta.json naming no files used to waive the check
        ("meta lists no files", "model.onnx differs from the file exported (sha256)"),
        ("record lists no files", "names []; expected a sha256 for each of"),
        ("record lists the tokenizer only", "names ['tokenizer.json']; expected a sha256"),
        ("no record (a folder copied alone)", "it has no digest record"),
    ],
)
def test_the_digests_come_from_a_record_beside_the_folder_naming_every_file(
    case: str, words: str, tmp_path: Path, onnx_model: OnnxEmbedder
) -> None:
    """A damaged model.onnx is never loaded on the word of its own folder (issue 25): the files
    to check are fixed by the code, their digests kept outside the folder they protect."""
    folder = onnx_folder(tmp_path, DEFAULT_MODEL)
    _copy_with_record(onnx_model.folder, folder)
    _damage_weights(folder)
    record = json.loads(record_path(folder).read_text())
    if case == "meta lists no files":
        meta = json.loads((folder / "meta.json").read_text())
        meta["files"] = {}
        (folder / "meta.json").write_text(json.dumps(meta))
    elif case == "record lists no files":
        record_path(folder).write_text(json.dumps({**record, "files": {}}))
    elif case == "record lists the tokenizer only":
        del record["files"]["model.onnx"]
        record_path(folder).write_text(json.dumps(record))
    else:
        record_path(folder).unlink()
    said: list[str] = []
    model = load_embedding_model(cache_dir=tmp_path, log=said.append)
    assert isinstance(model, OnnxEmbedder) and model.folder == folder
    assert len(said) == 2 and words in said[0] and "exporting it again" in said[0], said
    assert said[1].startswith("copying")  # the export checked in this process, with its record
    assert (
        json.loads(record_path(folder).read_text())["files"]
        == json.loads(record_path(onnx_model.folder).read_text())["files"]
    )
    assert sha256_of(folder / "model.onnx") == sha256_of(onnx_model.folder / "model.onnx")
    assert model.check() <= MAX_ABS_DIFF


@pytest.mark.integration
def test_a_second_cache_folder_copies_the_export_checked_in_this_process(
    tmp_path: Path, onnx_model: OnnxEmbedder
) -> None:
    said: list[str] = []
    model = load_embedding_model(cache_dir=tmp_path / "other", log=said.append)
    assert isinstance(model, OnnxEmbedder)
    assert model.folder == onnx_folder(tmp_path / "other", DEFAULT_MODEL) != onnx_model.folder
    assert len(said) == 1 and said[0].endswith(f" to {model.folder}")
    assert said[0].startswith(
        "copying the ONNX export of sentence-transformers/all-MiniLM-L6-v2 checked in this "
        "process from "
    )
    assert sorted(p.name for p in model.folder.iterdir()) == [
        "meta.json", "model.onnx", "tokenizer.json"
    ]  # fmt: skip
    texts = ["Title: Grace Hopper\nGrace Hopper was a computer scientist.", "Who invented COBOL?"]
    assert np.array_equal(model.encode(texts), onnx_model.encode(texts))


@pytest.mark.integration
@pytest.mark.parametrize(
    ("missing", "words"),
    [
        ("onnxruntime", "onnxruntime is not installed"),
        ("onnx", "exporting needs onnx, which is not installed"),
    ],
)
def test_without_what_onnx_needs_the_study_embeds_with_torch_and_says_why(
    missing: str, words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sentence_model: Any
) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # import fails as if not installed
    monkeypatch.setattr(embedding, "_VERIFIED", {})  # no export to copy: it must trace one
    with pytest.warns(EmbeddingBackendWarning, match=words) as caught:
        model = load_embedding_model(cache_dir=tmp_path, log=lambda _: None)
    assert model is sentence_model and embedding_backend(model) == "torch"
    assert "embedding with torch" in str(caught[0].message)
    assert not (tmp_path / "onnx").exists() or not any((tmp_path / "onnx").iterdir())


def test_a_model_found_nowhere_is_named_before_any_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hub name that is neither installed nor in the hub cache (offline here): the ONNX
    backend says it found no files and the torch load that follows fails with an error naming
    the flag and the model (the study's exit 2); nothing is exported."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    name = "fairrag-tests/no-such-model"
    with (
        pytest.warns(EmbeddingBackendWarning, match="the model's files were not found"),
        pytest.raises(ModelNotFoundError, match="--model 'fairrag-tests/no-such-model' was not"),
    ):
        load_embedding_model(name, cache_dir=tmp_path, log=lambda _: None)
    assert not (tmp_path / "onnx").exists()


@pytest.mark.parametrize("command", ["study", "sweep"])
def test_the_backend_flag_is_checked(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([command, "--embedding-backend", "int8"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "--embedding-backend" in err and "'int8'" in err
    assert "onnx" in err.split("'int8'", 1)[1] and "torch" in err.split("'int8'", 1)[1]


def test_the_backend_defaults_to_onnx_and_is_checked_before_any_work(tmp_path: Path) -> None:
    from fairrag_study.cli import build_parser

    assert build_parser().parse_args(["study"]).embedding_backend == "onnx"
    parsed = build_parser().parse_args(["sweep", "--embedding-backend", "torch"])
    assert parsed.embedding_backend == "torch"
    assert StudyConfig().embedding_backend == "onnx"
    with pytest.raises(ValueError, match="embedding_backend must be one of onnx, torch"):
        run_study(StudyConfig(out=tmp_path / "out", embedding_backend="bf16"))
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="unknown embedding backend 'bf16'"):
        load_embedding_model(backend="bf16", cache_dir=tmp_path)


def test_loading_the_embedding_model_draws_no_progress_bar():
    """A user trial: ``fairrag study --no-progress`` on a fresh cache drew transformers'
    ``Loading weights`` bar while sentence-transformers loaded the model (to export it). The
    load is quiet, and transformers' settings are as they were afterwards."""
    import contextlib
    import io

    from transformers.utils import logging as hf_logging

    embedding._sentence_transformer.cache_clear()  # a load in this process, not a cached one
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    written = io.StringIO()
    with contextlib.redirect_stderr(written):
        embedding.load_sentence_transformer(DEFAULT_MODEL)
    assert "Loading weights" not in written.getvalue() and "%|" not in written.getvalue()
    assert (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()) == (verbosity, bars)

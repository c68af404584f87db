"""Fixtures the study's tests share: a cache folder per test module, an OpenAI key for the
modules whose studies ask a stub server (``pytest.mark.usefixtures("api_key")``), and the real
local model loaded once per test process."""

from __future__ import annotations

import contextlib
import io
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class LoadedModel:
    """The local model as this test process's first load of it left it."""

    tokenizer: Any
    model: Any
    stderr: str
    """What the load wrote to ``sys.stderr`` (where tqdm draws its bars)."""
    bar_put_back: bool
    """Whether the GGUF reader's ``tqdm`` is, after the load, the one it had before."""


@pytest.fixture(scope="session")
def local_model() -> Iterator[LoadedModel]:
    """SmolLM2-135M at 1 torch thread (``_load("smollm2", 1)``, the study's threads on 2 cores),
    loaded once per test process: the GGUF file is de-quantised once (about a minute here) and
    its conversion kept in this process's cache (``$FAIRRAG_CACHE``, tests/conftest.py), and
    that first load's stderr is kept for the progress-bar test. Every test that loads the real
    model asks for this fixture, so the first load is always this one (checked)."""
    from fairrag_study import local_llm
    from fairrag_study.converted_model import converted_folder
    from fairrag_study.data import default_cache_dir
    from tests.study.local_llm_test import _weights_or_skip

    _weights_or_skip()
    before = sorted(key for key in local_llm._LOADED if key[0] == "smollm2")
    assert not before, (
        f"the local model was loaded before this fixture ({before}): a test loading it must "
        "ask for the local_model fixture"
    )
    from transformers import modeling_gguf_pytorch_utils as gguf_module

    bar = gguf_module.tqdm
    written = io.StringIO()
    spec = local_llm.LOCAL_MODELS["smollm2"]
    folder = converted_folder(default_cache_dir(), "smollm2", spec.sha256)
    made = not folder.exists()
    with contextlib.redirect_stderr(written):
        tokenizer, model = local_llm._load("smollm2", 1)
    yield LoadedModel(tokenizer, model, written.getvalue(), gguf_module.tqdm is bar)
    if made:  # the conversion this load kept (538 MB), not left in pytest's kept temp folders
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """The study's cache folder, one per test module (its small index is built once there)."""
    return tmp_path_factory.mktemp(f"{request.module.__name__.rpartition('.')[2]}-cache")


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key for the stub servers, and no base URL from the environment (each test names
    its server)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-stub-key")
    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(name, raising=False)

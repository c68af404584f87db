"""Fixtures the study's tests share: a cache folder per test module, and an OpenAI key for
the modules whose studies ask a stub server (``pytest.mark.usefixtures("api_key")``)."""

from __future__ import annotations

from pathlib import Path

import pytest


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

"""The study's generation metrics whatever style the answers cite in (docs/SPEC.md,
"Attribution"): a loopback OpenAI-protocol server answering with context entry numbers,
bracketed titles or names alone; the report and figure say why the paper's metrics are n/a."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from fairrag_study.cli import main
from fairrag_study.config import StudyConfig
from fairrag_study.phases.generation import LOOPBACK_TIMEOUT, chat_model, llm_timeout
from tests.chroma_pool import data_path_or_skip
from tests.study.openai_stub import OpenAIStub

pytestmark = pytest.mark.integration

PAPER = ["standard", "stochastic", "forced_exposure", "representative_stochastic"]


def _chat_model(config: StudyConfig, answers: bool = False) -> Any:
    """The generation phase's chat model for ``config`` (its generation settings)."""
    return chat_model(config.generation_settings(), answers=answers)


def _llm_timeout(config: StudyConfig) -> float:
    return llm_timeout(config.generation_settings())


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-stub-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)


def test_numbered_bracketed_and_uncited_answers_are_measured_for_every_ranker(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    with OpenAIStub(style="rotate") as stub:  # request i answers in style i mod 3
        args = [
            "study", "--data", str(data_path_or_skip()), "--topics", "Tennis", "--per-group",
            "6", "--trials", "3", "--rankers", "paper", "--llm", "openai:stub-model",
            "--base-url", stub.url, "--no-answer-cache", "--out", str(out), "--cache-dir",
            str(tmp_path / "cache"), "--no-progress",
        ]  # fmt: skip
        assert main(args) == 0
        assert len(stub.requests) == 12
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [r["ranker"] for r in records] == [r for r in PAPER for _ in range(3)]
    seen = {}
    for record in records:
        assert record["follows_citation_format"] is False  # no (DocTitle: X) anywhere
        assert record["generation_parity"] is None  # the paper's metric: n/a (null)
        assert record["n_attribution_bullets"] == record["n_attributed_bullets"] == 3
        assert 0.0 <= record["attributed_generation_parity"] <= 1.0
        assert record["attributed_groundedness"] == 1.0
        assert math.isfinite(record["attributed_fairness_gap"])
        (style,) = record["citation_styles"]
        seen.setdefault(record["ranker"], set()).add(style)
        shown = record["titles"][:3]
        assert [s["title"] for s in record["attributed_sources"]] == shown
    assert seen == {r: {"numbered", "bracketed_title", "implicit"} for r in PAPER}
    table = (out / "table_attributed_generation_parity.md").read_text()
    for ranker in PAPER:
        assert f"| {ranker} |" in table
    report = (out / "report.md").read_text()
    assert "## Why the generation metrics are what they are" in report
    assert "Of 12 answers, 0 cited in the requested format" in report
    assert "| implicit | 4 |" in report and "| numbered | 4 |" in report
    assert "12 answers have no paper generation parity (n/a)" in report
    summary = (out / "summary.csv").read_text()
    assert "attributed_generation_parity" in summary
    assert (out / "figures" / "generation.png").read_bytes()[:4] == b"\x89PNG"


def test_a_loopback_server_gets_a_timeout_fit_for_cpu_serving() -> None:
    local = StudyConfig(llm="openai:m", base_url="http://127.0.0.1:8080/v1")
    assert _llm_timeout(local) == LOOPBACK_TIMEOUT == 600.0
    assert _llm_timeout(StudyConfig(llm="openai:m", base_url="http://localhost:1/v1")) == 600.0
    assert _llm_timeout(StudyConfig(llm="openai:m", base_url="https://api.example.com/v1")) == 60
    assert _llm_timeout(StudyConfig(llm="openai:m", llm_timeout=5.0, base_url=local.base_url)) == 5
    llm, _ = _chat_model(local)
    assert llm.request_timeout == 600.0


def test_max_tokens_reaches_the_openai_client() -> None:
    from fairrag_langchain.chains import default_chat_model

    llm, _ = _chat_model(StudyConfig(llm="openai:m", max_tokens=64))
    assert llm.max_tokens == 64
    assert _chat_model(StudyConfig(llm="openai:m"))[0].max_tokens is None
    assert default_chat_model(max_tokens=32).max_tokens == 32
    with pytest.raises(ValueError, match="max_tokens must be an int >= 1"):
        default_chat_model(max_tokens=0)
    with pytest.raises(ValueError, match="max_tokens must be an integer from 1 to 131,072"):
        StudyConfig(llm="openai:m", max_tokens=0)

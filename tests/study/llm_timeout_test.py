"""The study's generator over real HTTP (ChatOpenAI against a local OpenAI-protocol stub):
`--llm-timeout` and `--llm-retries` reach the client, and a server that fails or never answers
ends the study with exit 2 and a message naming the server, keeping the records written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fairrag_study.cli import main
from fairrag_study.config import StudyConfig
from fairrag_study.phases.generation import chat_model
from tests.chroma_pool import data_path_or_skip
from tests.reliability.chroma_server import free_port
from tests.study.openai_stub import OpenAIStub

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("api_key")]


def _chat_model(config: StudyConfig, answers: bool = False) -> Any:
    """The generation phase's chat model for ``config`` (its generation settings)."""
    return chat_model(config.generation_settings(), answers=answers)


def _args(out: Path, cache: Path, base_url: str, *extra: str) -> list[str]:
    return [
        "study", "--data", str(data_path_or_skip()), "--topics", "Tennis", "--per-group", "6",
        "--trials", "4", "--rankers", "standard", "--llm", "openai:stub-model",
        "--base-url", base_url, "--out", str(out), "--cache-dir", str(cache), "--no-progress",
        *extra,
    ]  # fmt: skip


def _lines(out: Path) -> list[dict]:
    path = out / "records.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_timeout_and_retries_reach_the_chat_model() -> None:
    llm, _ = _chat_model(StudyConfig(llm="openai:m", llm_timeout=1.5, llm_retries=0))
    assert (llm.request_timeout, llm.max_retries) == (1.5, 0)
    llm, _ = _chat_model(StudyConfig(llm="openai:m"))
    assert (llm.request_timeout, llm.max_retries) == (60.0, 2)  # default_chat_model's


def test_a_study_generates_through_the_real_http_client(tmp_path: Path, cache: Path) -> None:
    with OpenAIStub("ok") as stub:
        assert main(_args(tmp_path / "out", cache, stub.url, "--llm-timeout", "30")) == 0
    assert len(stub.requests) == 4
    assert {r["model"] for r in stub.requests} == {"stub-model"}
    assert {h["authorization"] for h in stub.headers} == {"Bearer sk-stub-key"}
    records = _lines(tmp_path / "out")
    assert len(records) == 4
    assert all(r["groundedness"] == 1.0 and r["n_valid_citations"] == 3 for r in records)
    assert (tmp_path / "out" / "table_generation_parity.md").is_file()


def test_an_http_error_ends_the_study_with_exit_2_keeping_the_records(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    with OpenAIStub("fail", status=500, fail_after=2) as stub:
        assert main(_args(out, cache, stub.url, "--llm-retries", "1")) == 2
    assert len(stub.requests) == 2 + 1 + 1  # two answered, the third failed and retried once
    error = capsys.readouterr().err
    assert f"the chat model server {stub.url} answered HTTP 500" in error
    assert "trial 2 of standard; 2 records kept" in error and "Traceback" not in error
    assert [r["trial"] for r in _lines(out)] == [0, 1]
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and run["error"].startswith("GeneratorUnavailableError")


def test_a_server_that_never_answers_times_out(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    with OpenAIStub("hang") as stub:
        args = _args(out, cache, stub.url, "--llm-timeout", "1", "--llm-retries", "0")
        assert main(args) == 2
    assert len(stub.requests) == 1  # no retry: --llm-retries 0
    error = capsys.readouterr().err
    assert f"the chat model server {stub.url} did not answer within --llm-timeout 1 s" in error
    assert _lines(out) == []
    assert json.loads((out / "run.json").read_text())["status"] == "failed"


def test_a_server_that_is_not_there_is_named(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    assert main(_args(tmp_path / "out", cache, url, "--llm-retries", "0")) == 2
    error = capsys.readouterr().err
    assert f"the chat model server {url} could not be reached (ConnectionRefusedError)" in error

"""A paid run never pays twice: the study's answer store (fairrag_study.answers) against the real
ChatOpenAI HTTP path and a local OpenAI-protocol stub (success, 500, 429 with Retry-After,
timeout, malformed bodies, Ctrl-C, a killed process), and its key (docs/SPEC.md, "The study",
answer store)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from fairrag_study.answers import ANSWERS_FILE, AnswerStore, answer_settings
from fairrag_study.cli import main
from fairrag_study.errors import AnswerStoreError, GeneratorUnavailableError
from fairrag_study.phases.generation import answer_store_path
from fairrag_study.study import StudyConfig, run_study
from tests.chroma_pool import data_path_or_skip
from tests.study.openai_stub import OpenAIStub

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("api_key")]

ROOT = Path(__file__).resolve().parents[2]
VOLATILE = ("timestamp", "run_id", "framework")
"""Record fields that differ between two runs of the same trials (``framework`` holds
LangChain's run ids)."""


def _config(tmp_path: Path, cache: Path, url: str, **changes: Any) -> StudyConfig:
    """Four trials of one ranker on one topic (four distinct prompts), answers in tmp_path."""
    fields: dict[str, Any] = {
        "data": data_path_or_skip(),
        "topics": ("Tennis",),
        "per_group": 6,
        "trials": 4,
        "rankers": ("standard",),
        "llm": "openai:gpt-4o-mini",
        "base_url": url,
        "llm_retries": 0,
        "out": tmp_path / "out",
        "cache_dir": cache,
        "answers": tmp_path / "answers.sqlite",
        "progress": False,
    }
    return StudyConfig(**{**fields, **changes})


def _run(config: StudyConfig) -> tuple[list[dict], list[str]]:
    said: list[str] = []
    records = run_study(config, log=said.append).records
    return records, said


def _run_json(config: StudyConfig) -> dict:
    return json.loads((config.out / "run.json").read_text())


def _stable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in records]


def _stored_prompts(path: Path) -> list[str]:
    """The text of each stored prompt (LangChain keys a chat prompt by its serialised
    messages)."""
    with sqlite3.connect(path) as db:
        prompts = [json.loads(row[0]) for row in db.execute("SELECT prompt FROM answers")]
    return ["\n".join(m["kwargs"]["content"] for m in messages) for messages in prompts]


def _prompt_of(request: dict) -> str:
    return "\n".join(str(m.get("content", "")) for m in request["messages"])


def test_a_rerun_pays_for_nothing_and_gives_the_same_records(tmp_path: Path, cache: Path) -> None:
    with OpenAIStub("ok") as stub:
        # The default store: answers.sqlite in the cache folder, not in --out.
        first = _config(tmp_path, cache, stub.url, answers=None, cache_dir=tmp_path / "cache")
        records, said = _run(first)
        assert len(stub.requests) == 4
        store = tmp_path / "cache" / ANSWERS_FILE
        assert answer_store_path(first.generation_settings()) == store and store.is_file()
        assert not list(first.out.glob("*.sqlite*"))
        assert f"answers: 4 paid, 0 reused (answer store {store})" in said
        assert _run_json(first)["answers"] == {"store": str(store), "reused": 0, "paid": 4}
        report = (first.out / "report.md").read_text()
        assert "- answers: `4 paid, 0 reused" in report
        # the server is named: a stub answering as gpt-4o-mini is not the paper's generator
        assert f"at {stub.url}" in report and f"served by {stub.url}" in report

        # Another timeout and retry count: transport settings, not part of the key.
        again, said = _run(
            _config(tmp_path, cache, stub.url, answers=None, cache_dir=tmp_path / "cache",
                    llm_timeout=7.0, llm_retries=1)
        )  # fmt: skip
        assert len(stub.requests) == 4  # nothing paid again
    differ = {k for a, b in zip(again, records, strict=True) for k in a if a[k] != b.get(k)}
    assert differ <= set(VOLATILE), differ  # only ids and times: answers and metrics equal
    assert _stable(again) == _stable(records)
    assert [r["answer"] for r in again] == [r["answer"] for r in records]
    assert all(r["n_valid_citations"] == 3 for r in again)
    assert f"answers: 0 paid, 4 reused (answer store {store})" in said
    assert _run_json(first)["answers"] == {"store": str(store), "reused": 4, "paid": 0}
    assert "- answers: `0 paid, 4 reused" in (first.out / "report.md").read_text()


def test_a_failing_server_stops_the_study_and_a_rerun_pays_only_the_missing_answers(
    tmp_path: Path, cache: Path
) -> None:
    config = _config(tmp_path, cache, "")
    with OpenAIStub("fail", status=500, fail_after=2) as stub:
        config.base_url = stub.url
        with pytest.raises(GeneratorUnavailableError) as stopped:
            _run(config)
        message = str(stopped.value)
        assert f"the chat model server {stub.url} answered HTTP 500" in message
        assert "trial 2 of standard; 2 records kept" in message
        assert (
            f"the 2 answers paid in this run are kept in {config.answers} (2 in all), "
            "and a re-run reuses them"
        ) in message
        assert len(stub.requests) == 3
        assert sorted(_stored_prompts(config.answers)) == sorted(
            _prompt_of(r) for r in stub.requests[:2]
        )
        run = _run_json(config)
        assert run["status"] == "failed" and run["answers"]["paid"] == 2

        stub.mode = "ok"  # the server recovers, at the same address
        records, _ = _run(config)
        assert len(stub.requests) == 3 + 2  # only the two answers never paid for
        prompts = [_prompt_of(r) for r in stub.requests]
        assert prompts[3] == prompts[2]  # the one that failed, then the last trial's
        assert not set(prompts[3:]) & set(prompts[:2])
    assert len(records) == 4 and all(r["groundedness"] == 1.0 for r in records)
    assert _run_json(config)["answers"] == {"store": str(config.answers), "reused": 2, "paid": 2}
    assert len(AnswerStore(config.answers)) == 4


def test_a_429_with_retry_after_is_retried_and_the_study_finishes(
    tmp_path: Path, cache: Path
) -> None:
    config = _config(tmp_path, cache, "", llm_retries=2)
    with OpenAIStub("fail", status=429, fail_after=1, fail_times=1, retry_after="1") as stub:
        config.base_url = stub.url
        records, _ = _run(config)
    assert len(stub.requests) == 5  # the second request was refused once, then retried
    assert stub.requests[1] == stub.requests[2]
    assert len(records) == 4 and all(r["groundedness"] == 1.0 for r in records)
    assert _run_json(config)["answers"]["paid"] == 4
    assert len(AnswerStore(config.answers)) == 4


def test_a_timeout_stops_the_study_keeping_the_paid_answers(tmp_path: Path, cache: Path) -> None:
    config = _config(tmp_path, cache, "", llm_timeout=1.0)
    with OpenAIStub("hang", fail_after=1, hang_seconds=10) as stub:
        config.base_url = stub.url
        with pytest.raises(GeneratorUnavailableError) as stopped:
            _run(config)
        assert len(stub.requests) == 2  # no retry (--llm-retries 0)
    message = str(stopped.value)
    assert f"the chat model server {stub.url} did not answer within --llm-timeout 1 s" in message
    assert "the 1 answers paid in this run are kept in" in message
    assert _stored_prompts(config.answers) == [_prompt_of(stub.requests[0])]


@pytest.mark.parametrize(
    "mode, words",
    [("invalid_json", "JSONDecodeError"), ("no_choices", "null value for 'choices'")],
)
def test_a_malformed_reply_is_a_clear_error_and_is_never_stored(
    mode: str, words: str, tmp_path: Path, cache: Path
) -> None:
    config = _config(tmp_path, cache, "")
    with OpenAIStub(mode, fail_after=1) as stub:
        config.base_url = stub.url
        with pytest.raises(GeneratorUnavailableError) as stopped:
            _run(config)
        message = str(stopped.value)
        assert f"the chat model server {stub.url} sent a reply the client could not read" in message
        assert words in message and "trial 1 of standard; 1 records kept" in message
        assert _stored_prompts(config.answers) == [_prompt_of(stub.requests[0])]
        stub.mode = "ok"
        records, _ = _run(config)
        assert len(stub.requests) == 2 + 3  # the malformed reply was not reused
    assert all(r["groundedness"] == 1.0 for r in records)


def _cli_args(url: str, tmp_path: Path, cache: Path, *extra: str) -> list[str]:
    """A small study through the CLI against the stub server at ``url``: 2 trials of standard."""
    return [
        "study", "--data", str(data_path_or_skip()), "--topics", "Tennis", "--per-group", "6",
        "--trials", "2", "--rankers", "standard", "--llm", "openai:gpt-4o-mini",
        "--base-url", url, "--out", str(tmp_path / "out"), "--cache-dir", str(cache),
        "--no-progress", *extra,
    ]  # fmt: skip


def test_the_cli_names_a_malformed_reply_with_exit_2(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAIStub("no_choices") as stub:
        args = _cli_args(stub.url, tmp_path, cache, "--answers", str(tmp_path / "answers.sqlite"))
        assert main(args) == 2
    error = capsys.readouterr().err
    assert f"the chat model server {stub.url} sent a reply the client could not read" in error
    assert "Traceback" not in error
    assert len(AnswerStore(tmp_path / "answers.sqlite")) == 0


def test_another_model_does_not_reuse_answers(tmp_path: Path, cache: Path) -> None:
    with OpenAIStub("ok") as stub:
        _run(_config(tmp_path, cache, stub.url))
        _run(_config(tmp_path, cache, stub.url, llm="openai:gpt-4.1-mini"))
        assert [r["model"] for r in stub.requests] == ["gpt-4o-mini"] * 4 + ["gpt-4.1-mini"] * 4
        _run(_config(tmp_path, cache, stub.url, llm="openai:gpt-4.1-mini"))
        assert len(stub.requests) == 8
    store = AnswerStore(tmp_path / "answers.sqlite")
    assert len(store) == 8
    store.clear(model="gpt-4o-mini")
    assert len(store) == 4


def _chat(url: str, store: AnswerStore, **changes: Any) -> ChatOpenAI:
    fields: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "temperature": 0.1,
        "base_url": url,
        "timeout": 5.0,
        "max_retries": 0,
        "cache": store,
    }
    return ChatOpenAI(**{**fields, **changes})


def test_the_key_holds_model_temperature_and_server_not_timeout_or_retries(
    tmp_path: Path,
) -> None:
    store = AnswerStore(tmp_path / "answers.sqlite")
    prompt = "Title: Ada Lovelace\nWho?"
    with OpenAIStub("ok") as stub, OpenAIStub("ok") as other:
        assert (
            _chat(stub.url, store).invoke(prompt).content
            == "- Ada Lovelace (DocTitle: Ada Lovelace)"
        )
        for same in ({"timeout": 60.0, "max_retries": 5}, {"base_url": stub.url + "/"}):
            _chat(stub.url, store, **same).invoke(prompt)
        assert len(stub.requests) == 1
        for different in ({"temperature": 0.2}, {"model": "gpt-4.1-mini"}, {"seed": 7}):
            _chat(stub.url, store, **different).invoke(prompt)
        assert len(stub.requests) == 4
        _chat(other.url, store).invoke(prompt)  # another server: perhaps another model
        assert (len(stub.requests), len(other.requests)) == (4, 1)
    assert (store.reused, store.stored) == (2, 5)
    # What LangChain's llm_string holds for ChatOpenAI, and what the key keeps of it.
    llm_string = _chat(stub.url, store)._get_llm_string()
    assert '"request_timeout": 5.0' in llm_string and '"max_retries": 0' in llm_string
    kept = answer_settings(llm_string)
    assert '"model_name": "gpt-4o-mini"' in kept and '"temperature": 0.1' in kept
    assert f'"openai_api_base": "{stub.url}"' in kept
    assert "request_timeout" not in kept and "max_retries" not in kept and "api_key" not in kept
    default = ChatOpenAI(model="m", base_url="https://api.openai.com/v1/")._get_llm_string()
    assert answer_settings(default) == answer_settings(ChatOpenAI(model="m")._get_llm_string())


def test_async_calls_use_the_store(tmp_path: Path) -> None:
    store = AnswerStore(tmp_path / "answers.sqlite")
    with OpenAIStub("ok") as stub:
        llm = _chat(stub.url, store)

        async def twice() -> list[str]:
            return [str((await llm.ainvoke("Title: Alan Turing\nWho?")).content) for _ in "ab"]

        first, second = asyncio.run(twice())
        assert len(stub.requests) == 1 and first == second
    assert (store.reused, store.stored) == (1, 1)


def test_streaming_reads_the_store_only_with_streaming_disabled(tmp_path: Path) -> None:
    """langchain-core's `BaseChatModel.stream` calls the server without looking in the cache
    when the model can stream (README, "The study"); with `disable_streaming=True`, `stream`
    goes through `invoke` and yields the stored answer as one chunk."""
    store = AnswerStore(tmp_path / "answers.sqlite")
    prompt = "Title: Grace Hopper\nWho?"
    with OpenAIStub("ok") as stub:
        answer = _chat(stub.url, store).invoke(prompt).content
        streamed = "".join(str(c.content) for c in _chat(stub.url, store).stream(prompt))
        assert len(stub.requests) == 2 and stub.requests[1].get("stream") is True
        assert streamed.strip() == answer
        llm = _chat(stub.url, store, disable_streaming=True)
        assert [c.content for c in llm.stream(prompt)] == [answer]
        assert len(stub.requests) == 2


@pytest.mark.parametrize("answered", [True, False], ids=["answer-arrives", "no-answer"])
def test_ctrl_c_keeps_the_paid_answers_and_says_a_rerun_reuses_them(
    answered: bool, tmp_path: Path, cache: Path
) -> None:
    """Ctrl-C (SIGINT to the main thread) while the third request is out. LangChain's chain
    waits for the worker thread running the request, so the study stops once that request ends:
    an answer arriving then is stored too; a request never answered ends at --llm-timeout."""
    main_thread = threading.main_thread().ident
    assert main_thread is not None
    # Python's own Ctrl-C handler, as a `fairrag study` process has it: a library run earlier in
    # this test process (make test runs two, each a different mix of test files) may have left
    # another, and the Ctrl-C then never reached the study (seen once in CI)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_the_third(answered, tmp_path, cache, main_thread)
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_the_third(answered: bool, tmp_path: Path, cache: Path, main_thread: int) -> None:
    def interrupt_the_third(number: int) -> None:
        if number == 3:
            signal.pthread_kill(main_thread, signal.SIGINT)

    # 8 s: an answered loopback request must not time out on a busy machine (at load 10+ a
    # 2 s timeout ended requests 1-2 before the Ctrl-C); the hang outlasts it
    config = _config(tmp_path, cache, "", llm_timeout=8.0)
    said: list[str] = []
    mode = "ok" if answered else "hang"
    with OpenAIStub(mode, fail_after=2, on_request=interrupt_the_third, hang_seconds=30) as stub:
        config.base_url = stub.url
        with pytest.raises(KeyboardInterrupt):
            run_study(config, log=said.append)
        assert len(stub.requests) == 3
        kept = 3 if answered else 2
        assert len(AnswerStore(config.answers)) == kept
        stub.mode = "ok"
        records, _ = _run(config)
        assert len(stub.requests) == 3 + (4 - kept)  # only the answers never received
    stopped = next(line for line in said if line.startswith("interrupted"))
    assert (
        f"the {kept} answers paid in this run are kept in {config.answers} ({kept} in all), "
        "and a re-run reuses them"
    ) in stopped
    assert json.loads((config.out / "run.json").read_text())["answers"]["reused"] == kept
    assert len(records) == 4 and all(r["groundedness"] == 1.0 for r in records)


CHILD = r"""
import json, sys
from pathlib import Path
from fairrag_study.study import StudyConfig, run_study
fields = json.loads(sys.argv[1])
for name in ("data", "out", "cache_dir", "answers"):
    fields[name] = Path(fields[name])
fields["topics"], fields["rankers"] = tuple(fields["topics"]), tuple(fields["rankers"])
run_study(StudyConfig(**fields))
"""


def test_a_killed_study_keeps_every_answer_it_paid_for(tmp_path: Path, cache: Path) -> None:
    config = _config(tmp_path, cache, "", llm_timeout=60.0)
    with OpenAIStub("hang", fail_after=2, hang_seconds=120) as stub:
        config.base_url = stub.url
        fields = {
            name: (str(value) if isinstance(value, Path) else value)
            for name, value in vars(config).items()
            if name != "dataset"
        }
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        errors = tmp_path / "child-stderr.txt"
        with open(errors, "wb") as stderr:
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, json.dumps(fields)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        try:
            deadline = time.monotonic() + 300
            while len(stub.requests) < 3 and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert len(stub.requests) == 3, errors.read_text()
        finally:
            child.kill()  # SIGKILL while the third answer is awaited
            child.wait(30)
        assert child.returncode == -signal.SIGKILL
        assert sorted(_stored_prompts(config.answers)) == sorted(
            _prompt_of(r) for r in stub.requests[:2]
        )
        assert _run_json(config)["status"] == "running"  # it had no chance to say anything
        stub.mode = "ok"
        _, said = _run(config)
        assert len(stub.requests) == 3 + 2
    assert any("crashed" in line and "killed" in line for line in said)
    assert _run_json(config)["answers"]["reused"] == 2


def test_a_damaged_store_stops_the_study_before_any_work_and_is_left_untouched(
    tmp_path: Path, cache: Path
) -> None:
    config = _config(tmp_path, cache, "http://127.0.0.1:9/v1")
    config.answers.write_bytes(b"\x00not a database" * 100)
    with pytest.raises(AnswerStoreError) as refused:
        _run(config)
    assert f"{str(config.answers)!r} is not a FairRAG answer store" in str(refused.value)
    assert config.answers.read_bytes() == b"\x00not a database" * 100
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    before = other.read_bytes()
    with pytest.raises(AnswerStoreError, match=r"it holds other tables: \['notes'\]"):
        AnswerStore(other)
    assert other.read_bytes() == before  # not even switched to WAL
    assert sorted(p.name for p in tmp_path.glob("other.sqlite*")) == ["other.sqlite"]
    with pytest.raises(AnswerStoreError, match="is a folder; expected a file path"):
        AnswerStore(tmp_path)


def test_without_the_answer_store_every_run_pays(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAIStub("ok") as stub:
        args = _cli_args(stub.url, tmp_path, cache, "--no-answer-cache")
        assert main(args) == 0 and main(args) == 0
        assert len(stub.requests) == 4
    assert not (cache / ANSWERS_FILE).exists()
    assert "answers: every answer paid for (answer store off: --no-answer-cache)" in (
        capsys.readouterr().out
    )
    assert json.loads((tmp_path / "out" / "run.json").read_text())["answers"] is None


def test_openai_without_a_key_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    args = [
        "study", "--data", str(data_path_or_skip()), "--topics", "Tennis", "--per-group", "6",
        "--trials", "2", "--llm", "openai:gpt-4o-mini", "--out", str(tmp_path / "out"),
        "--cache-dir", str(tmp_path / "cache"), "--no-progress",
    ]  # fmt: skip
    for store in ([], ["--answers", str(tmp_path / "answers.sqlite")]):
        assert main([*args, *store]) == 2
        said = capsys.readouterr()
        error = said.err
        assert "--llm openai:gpt-4o-mini needs OPENAI_API_KEY" in error and "--llm none" in error
        # nothing was paid and no store opened: a user trial read "the answer store is off
        # (--no-answer-cache)" although --answers was given
        assert "answer store" not in said.out + error
    assert not (tmp_path / "cache" / ANSWERS_FILE).exists()
    # --llm auto (the default) with --base-url and no key: a server was named to answer; the
    # run went on retrieval-only for minutes and said so at its end (a researcher's trial)
    # before --out is claimed: a previous study's outputs there stay (a review found them
    # deleted first)
    auto = [a for a in args if a not in ("--llm", "openai:gpt-4o-mini")]
    (tmp_path / "out").mkdir(exist_ok=True)
    (tmp_path / "out" / "records.jsonl").write_text("{}\n")
    assert main([*auto, "--base-url", "http://127.0.0.1:9/v1"]) == 2
    error = capsys.readouterr().err
    assert "--base-url http://127.0.0.1:9/v1 names a server, but --llm auto" in error
    assert "OPENAI_API_KEY" in error
    assert (tmp_path / "out" / "records.jsonl").read_text() == "{}\n"


def test_bad_answer_store_flags_exit_2_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"these are notes, not answers")
    base = ["study", "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")]
    cases = [
        (["--answers", str(tmp_path)], "argument --answers: ", "is a folder"),
        (["--answers", str(garbage)], "argument --answers: ", "is not a SQLite file"),
        (
            ["--answers", "/proc/fairrag/answers.sqlite"],
            "argument --answers: ",
            "cannot be created",
        ),
        (
            ["--answers", str(tmp_path / "a.sqlite"), "--no-answer-cache"],
            "argument --no-answer-cache: ",
            "not allowed with argument --answers",
        ),
    ]
    for flags, flag, words in cases:
        with pytest.raises(SystemExit) as exited:
            main([*base, *flags])
        error = capsys.readouterr().err
        assert exited.value.code == 2 and flag in error and words in error, (flags, error)
    assert garbage.read_bytes() == b"these are notes, not answers"
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()
    assert not (tmp_path / "a.sqlite").exists()


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("answers", 5, "answers must be a file path or None"),
        ("answer_cache", "yes", "answer_cache must be True or False"),
    ],
)
def test_run_study_checks_the_answer_store_fields(
    field: str, value: object, words: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=words):  # when the configuration is made
        run_study(StudyConfig(out=tmp_path / "out", cache_dir=tmp_path / "cache", **{field: value}))
    assert not (tmp_path / "out").exists()


def test_two_stores_on_one_file_share_answers_and_refuse_empty_ones(tmp_path: Path) -> None:
    """Two processes (here two objects, two connections) see each other's committed answers;
    an empty answer is never stored."""
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, Generation

    one, two = AnswerStore(tmp_path / "a.sqlite"), AnswerStore(tmp_path / "a.sqlite")
    settings = ChatOpenAI(model="m", temperature=0.1)._get_llm_string()
    answer = [ChatGeneration(message=AIMessage(content="- A (DocTitle: A)"))]
    one.update("prompt", settings, answer)
    one.update("empty", settings, [])
    found = two.lookup("prompt", settings)
    assert found is not None and found[0].text == "- A (DocTitle: A)"
    assert two.lookup("empty", settings) is None and len(two) == 1
    one.update("text", settings, [Generation(text="plain")])
    assert [g.text for g in two.lookup("text", settings) or []] == ["plain"]
    assert asyncio.run(two.alookup("prompt", settings)) is not None
    asyncio.run(two.aclear())
    assert len(one) == 0
    with pytest.raises(TypeError, match="takes only model="):
        one.clear(topic="x")


FULL_DISK = r"""
import resource, signal, sys
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration
from fairrag_study.answers import AnswerStore
from fairrag_study.errors import AnswerStoreError
store = AnswerStore(sys.argv[1])
store.update("first", "settings", [ChatGeneration(message=AIMessage(content="kept"))])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))
try:
    store.update("second", "settings", [ChatGeneration(message=AIMessage(content="x" * 10**6))])
except AnswerStoreError as exc:
    print(exc)
"""


def test_a_full_disk_is_a_clear_error_and_keeps_the_answers_stored(tmp_path: Path) -> None:
    """A real file-size limit (RLIMIT_FSIZE) in a child process stands for a full disk."""
    path = tmp_path / "answers.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert child.returncode == 0, child.stderr
    assert f"the answer store {str(path)!r} could not store the answer just received" in (
        child.stdout
    )
    assert "the answers stored before it are kept" in child.stdout
    store = AnswerStore(path)
    assert len(store) == 1 and store.lookup("second", "settings") is None
    assert [g.text for g in store.lookup("first", "settings") or []] == ["kept"]


def test_run_json_counts_the_position_curves_answers_too(tmp_path: Path, cache: Path) -> None:
    """A researcher's trial: after ``--position-curve``, the log and the report said "48 paid"
    while ``run.json`` said 16 (the trials' alone): it was not updated after the curve."""
    with OpenAIStub("ok") as stub:
        config = _config(
            tmp_path, cache, stub.url, topics=("Tennis", "Medicine"), trials=6, position_curve=6
        )
        _, said = _run(config)
        paid = len(stub.requests)
    # the trials, then each question's top-k in its k shifts (the unshifted one is a trial's
    # prompt: reused from the store)
    reused = 6 + 6 * config.k - paid
    assert reused == 6
    counts = {"store": str(config.answers), "reused": reused, "paid": paid}
    assert _run_json(config)["answers"] == counts
    assert f"answers: {paid} paid, {reused} reused (answer store {config.answers})" in said
    # one model, one name in both files and the fitted curve (the curve wrote
    # "openai:gpt-4o-mini" where the records, as LangChain reports it, say "gpt-4o-mini")
    names = {
        json.loads(line)["model"]
        for name in ("records.jsonl", "position_curve.jsonl")
        for line in (config.out / name).read_text().splitlines()
    }
    fitted = json.loads((config.out / "exposure_fitted.json").read_text())
    assert names == {"gpt-4o-mini"} and "gpt-4o-mini" in json.dumps(fitted)

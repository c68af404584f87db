"""``fairrag study --concurrency N``: answers asked for at once, with the sequential run's
records, order, callback log and answer store (docs/SPEC.md, "The study", concurrency), against
the real ChatOpenAI HTTP path and a loopback OpenAI-protocol stub; 429 and 5xx answers retried
within ``--llm-retries``; the flags range-checked; ``--threads``' default."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fairrag_study import local_llm
from fairrag_study.cli import main
from fairrag_study.errors import GeneratorUnavailableError
from fairrag_study.study import StudyConfig, run_study
from tests.chroma_pool import data_path_or_skip
from tests.study.openai_stub import OpenAIStub

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("api_key")]

VOLATILE = ("timestamp", "run_id", "framework")
"""Record fields that differ between two runs of the same trials: the time, and LangChain's
run ids (``framework`` holds them)."""
RANKERS = ("standard", "representative_stochastic", "amortized")
"""A deterministic ranker, a seeded random one, and one whose ledger carries state from trial
to trial (the one the order of retrievals could change)."""


def _config(folder: Path, cache: Path, url: str, **changes: Any) -> StudyConfig:
    fields: dict[str, Any] = {
        "data": data_path_or_skip(),
        "topics": ("Tennis", "Cricket"),
        "per_group": 6,
        "trials": 8,
        "rankers": RANKERS,
        "llm": "openai:gpt-4o-mini",
        "base_url": url,
        "llm_retries": 0,
        "out": folder / "out",
        "cache_dir": cache,
        "answers": folder / "answers.sqlite",
        "progress": False,
    }
    return StudyConfig(**{**fields, **changes})


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _stable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in records]


def _store(path: Path) -> dict[str, tuple[str, str]]:
    """Each stored row's settings and prompt by key, and its answer's text."""
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT key, settings, prompt, answer FROM answers").fetchall()
    return {
        key: (settings, prompt, json.loads(answer)[0]["message"]["data"]["content"])
        for key, settings, prompt, answer in rows
    }


def test_concurrent_answers_give_the_sequential_runs_records_in_trial_order(
    tmp_path: Path, cache: Path
) -> None:
    runs = {}
    with OpenAIStub() as stub:  # one server: its address is part of the answers' key
        for concurrency in (1, 4):
            folder = tmp_path / f"c{concurrency}"
            asked = len(stub.requests)
            said: list[str] = []
            config = _config(folder, cache, stub.url, concurrency=concurrency)
            result = run_study(config, log=said.append)
            assert len(stub.requests) - asked == 8 * len(RANKERS)  # every answer paid once
            assert any(f"answers/s, --concurrency {concurrency})" in line for line in said)
            runs[concurrency] = (
                result.records,
                _lines(config.out / "records.jsonl"),
                _lines(config.out / "callback_log.jsonl"),
                _store(folder / "answers.sqlite"),
            )
    (seq, seq_file, seq_log, seq_store), (par, par_file, par_log, par_store) = runs[1], runs[4]
    assert [(r["ranker"], r["trial"]) for r in par_file] == [
        (ranker, trial) for ranker in RANKERS for trial in range(8)
    ]
    for one, other in ((seq, par), (seq_file, par_file), (seq_log, par_log)):
        assert len(one) == len(other) == 8 * len(RANKERS)
        for a, b in zip(_stable(one), _stable(other), strict=True):
            assert a.keys() == b.keys()
            for name in a:  # field by field, so a difference names its field
                assert a[name] == b[name], (name, a.get("ranker"), a.get("trial"))
    assert all(r["answer"] for r in par)  # the answers are in the records compared
    assert par_store == seq_store and len(par_store) == 8 * len(RANKERS)


def test_a_429_with_retry_after_is_retried_under_concurrency(tmp_path: Path, cache: Path) -> None:
    # The first three requests answer 429 with Retry-After: the client waits it out and asks
    # again (--llm-retries), and the run's records are the undisturbed run's.
    changes = {"rankers": ("amortized",), "llm_retries": 2, "concurrency": 4}
    with OpenAIStub() as stub:
        calm = run_study(_config(tmp_path / "calm", cache, stub.url, **changes), log=lambda _: None)
    with OpenAIStub("fail", status=429, fail_times=3, retry_after="0.2") as stub:
        busy = run_study(_config(tmp_path / "busy", cache, stub.url, **changes), log=lambda _: None)
    assert len(stub.requests) == 8 + 3
    assert _stable(busy.records) == _stable(calm.records)


def test_a_server_that_keeps_failing_stops_the_run_with_the_records_before_it(
    tmp_path: Path, cache: Path
) -> None:
    # Two answers, then HTTP 500 for good: the run stops at the first trial (in trial order)
    # without an answer and keeps those before it, in order; the trials still queued are
    # cancelled, not asked for (each asked is tried 1 + --llm-retries times): of the 24
    # trials, those in flight when trial 2 failed are asked, not the 22 failing ones' 44.
    changes = {"llm_retries": 1, "concurrency": 4}
    with OpenAIStub("fail", status=500, fail_after=2, retry_after="0") as stub:
        config = _config(tmp_path, cache, stub.url, **changes)
        with pytest.raises(GeneratorUnavailableError, match="answered HTTP 500"):
            run_study(config, log=lambda _: None)
    kept = [r["trial"] for r in _lines(config.out / "records.jsonl")]
    assert kept == list(range(len(kept))) and len(kept) <= 2
    assert len(stub.requests) <= 2 + 2 * 12


@pytest.mark.parametrize(
    ("flags", "flag", "words"),
    [
        (["--concurrency", "0"], "--concurrency", "0 is out of range"),
        (["--concurrency", "65"], "--concurrency", "expected an integer from 1 to 64"),
        (["--concurrency", "many"], "--concurrency", "many"),
        (["--threads", "0", "--llm", "local"], "--threads", "0 is out of range"),
        (["--threads", "2", "--llm", "none"], "--threads", "only used with --llm local"),
        # a generator setting the --llm chosen never reads was dropped without a word
        (["--llm", "none", "--concurrency", "16"], "--concurrency", "--llm none asks no"),
        (["--llm", "none", "--max-tokens", "64"], "--max-tokens", "drop --max-tokens"),
        (["--llm", "none", "--no-answer-cache"], "--no-answer-cache", "--llm none asks no"),
        (["--llm", "none", "--answers", "a.sqlite"], "--answers", "only used with --llm auto"),
        (["--llm", "fake", "--llm-retries", "3"], "--llm-retries", "the offline test double"),
        (["--llm", "fake", "--max-tokens", "64"], "--max-tokens", "or local; --llm fake"),
        (["--llm", "local", "--llm-timeout", "5"], "--llm-timeout", "in this process"),
        (["--llm", "local", "--llm-retries", "1"], "--llm-retries", "openai:<model>; --llm"),
    ],
)
def test_bad_concurrency_and_threads_exit_2_naming_the_flag(
    flags: list[str], flag: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["study", "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c"), *flags]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    stderr = capsys.readouterr().err
    assert f"argument {flag}: " in stderr and words in stderr, stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("llm", "changes"),
    [
        ("fake", {"concurrency": 4}),
        ("local", {"max_tokens": 64, "answer_cache": False, "concurrency": 2}),
        ("openai:gpt-4o-mini", {"llm_timeout": 5.0, "llm_retries": 0, "max_tokens": 64}),
        ("auto", {"llm_timeout": 5.0, "answers": Path("a.sqlite")}),
    ],
)
def test_generator_settings_the_llm_reads_are_kept(llm: str, changes: dict[str, object]) -> None:
    config = StudyConfig(llm=llm, **changes)  # type: ignore[arg-type]
    assert {name: getattr(config, name) for name in changes} == changes


@pytest.mark.parametrize("value", [0, 65, True, 2.0])
def test_run_study_checks_concurrency(value: object, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="concurrency must be an integer from 1 to 64"):
        run_study(StudyConfig(concurrency=value, out=tmp_path / "out"))  # type: ignore[arg-type]


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 1), (3, 3), (16, 16)])
def test_local_threads_default_to_one_on_two_cores_or_fewer(
    cores: int, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_llm.os, "sched_getaffinity", lambda _: set(range(cores)))
    assert local_llm.default_threads() == threads


def test_the_local_model_caps_the_processs_malloc_arenas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The study caps glibc's arenas before its trial threads decode (docs/SPEC.md, "Local
    batches"); a process that set MALLOC_ARENA_MAX keeps its own. In a child process: the cap
    is the process's for good."""
    from fairrag_study.phases.generation import chat_model

    probe = "from fairrag_study.local_llm import cap_malloc_arenas as c; print(c())"
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    capped = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert capped.stdout.strip() == "True", capped.stderr
    kept = subprocess.run(
        [sys.executable, "-c", probe], env={**env, "MALLOC_ARENA_MAX": "4"}, capture_output=True
    )
    assert kept.stdout.strip() == b"False"
    calls: list[int] = []
    monkeypatch.setattr(local_llm, "cap_malloc_arenas", lambda: calls.append(1) or True)
    chat_model(StudyConfig(llm="local", threads=1).generation_settings())
    assert calls == [1]


def test_trials_queued_when_one_fails_are_never_asked() -> None:
    """A researcher's trial: with ``--concurrency 4``, after a trial failed the pool kept
    starting queued trials until the consumer reached it in order (requests 5 to 8 paid after
    the failure). ``answered_in_order`` with chains that are test doubles, two at a time:
    trial 0 fails once trial 1 is in flight, its worker then takes trial 2, which is never
    asked; trial 1 finishes once the consumer holds trial 0's failure, and its worker's next
    trial is never asked either. No clock: each step waits for the one before it."""
    import threading

    from fairrag_study.phases.trials import answered_in_order
    from fairrag_study.plan import Trial

    failure_seen, second_started = threading.Event(), threading.Event()
    asked: list[int] = []

    class Chain:  # a test double of the trial chain
        def __init__(self, index: int) -> None:
            self.index = index

        def invoke(self, inputs: dict[str, Any], config: Any) -> dict[str, Any]:
            asked.append(self.index)
            if self.index == 0:  # fails once trial 1 is in flight
                assert second_started.wait(60), "trial 1 never started"
                raise RuntimeError("HTTP 500")
            second_started.set()
            assert failure_seen.wait(60), "the consumer never got trial 0's failure"
            return {"context": []}

    jobs = [(Chain(i), Trial(i, 1, "Tennis", f"question {i}", i)) for i in range(8)]
    done = answered_in_order(jobs, lambda: None, [], concurrency=2)
    results = []
    for trial, _, _, failure in done:
        results.append((trial.index, failure))
        failure_seen.set()
    assert [index for index, _ in results] == list(range(8))
    assert str(results[0][1]) == "HTTP 500" and results[1][1] is None
    assert all("not asked" in str(failure) for _, failure in results[2:])
    assert sorted(asked) == [0, 1]

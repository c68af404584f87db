"""The answer store's rows are checked before they are served (issue 25): a row whose answer was
changed after it was stored, moved under another question, or damaged stops the call with an
error naming the row, never passes as the model's answer. Real ChatOpenAI, real SQLite, the
local OpenAI-protocol stub."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from fairrag_core.prompts import render_prompt
from fairrag_study.answers import AnswerStore
from fairrag_study.errors import AnswerStoreError
from tests.study.openai_stub import OpenAIStub

QUESTION = "Who are some notable role models in the field of Tennis?"
PROMPT = render_prompt(QUESTION, ["Title: Ada Lovelace\nAda Lovelace was a mathematician."])
OTHER = render_prompt("Who leads in Medicine?", ["Title: Alan Turing\nAlan Turing was a logician."])


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-stub-key")


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


def _rows(path: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(path) as db:
        # in the order the rows were written (``created`` has whole seconds: two rows written
        # in one second fell back to key order, which made the first row another question's)
        return list(db.execute("SELECT key, answer, digest FROM answers ORDER BY rowid"))


def _set(path: Path, key: str, **values: Any) -> None:
    with sqlite3.connect(path) as db:
        assignments = ", ".join(f"{column} = ?" for column in values)
        db.execute(f"UPDATE answers SET {assignments} WHERE key = ?", (*values.values(), key))


def _poisoned(answer: str) -> str:
    """The stored answer with its message's text replaced (what an edit of the file does)."""
    items = json.loads(answer)
    items[0]["message"]["data"]["content"] = "- Mallory (DocTitle: Ada Lovelace)"
    return json.dumps(items)


def test_a_row_whose_answer_was_changed_is_refused_naming_the_row(tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    with OpenAIStub("ok") as stub:
        store = AnswerStore(path)
        paid = _chat(stub.url, store, seed=7).invoke(PROMPT).content
        ((key, answer, _),) = _rows(path)
        _set(path, key, answer=_poisoned(answer))
        with pytest.raises(AnswerStoreError) as refused:
            _chat(stub.url, AnswerStore(path), seed=7).invoke(PROMPT)
        assert len(stub.requests) == 1  # neither served nor silently paid for again
    message = str(refused.value)
    assert "holds an answer that does not match its row's digest" in message
    assert f"row key {key}" in message and f"question {QUESTION!r}" in message
    assert "seed 7" in message and "model gpt-4o-mini" in message
    assert f"DELETE FROM answers WHERE key = '{key}'" in message
    assert "Mallory" not in message and paid != "- Mallory (DocTitle: Ada Lovelace)"


def test_an_answer_moved_to_another_questions_row_is_refused(tmp_path: Path) -> None:
    """Two rows' answers swapped, digests and all: each digest seals its own key, so neither
    answer passes for the other question's."""
    path = tmp_path / "answers.sqlite"
    with OpenAIStub("ok") as stub:
        store = AnswerStore(path)
        for prompt in (PROMPT, OTHER):
            _chat(stub.url, store).invoke(prompt)
        (one, a, sealed_a), (two, b, sealed_b) = _rows(path)
        _set(path, one, answer=b, digest=sealed_b)
        _set(path, two, answer=a, digest=sealed_a)
        for prompt in (PROMPT, OTHER):
            with pytest.raises(AnswerStoreError, match="does not match its row's digest"):
                _chat(stub.url, store).invoke(prompt)
        assert len(stub.requests) == 2

        # A row whose stored prompt is not the one its key was made from is not served
        # either: a miss, paid again, and the row replaced by the answer received.
        _set(path, one, answer=a, digest=sealed_a)
        with sqlite3.connect(path) as db:
            (stored,) = db.execute("SELECT prompt FROM answers WHERE key = ?", (one,)).fetchone()
        _set(path, one, prompt=stored.replace("Ada Lovelace", "Mallory"))
        _chat(stub.url, store).invoke(PROMPT)
        assert len(stub.requests) == 3 and store.reused == 0
        _chat(stub.url, store).invoke(PROMPT)
        assert len(stub.requests) == 3 and store.reused == 1


def test_a_damaged_answer_names_its_row(tmp_path: Path) -> None:
    """An answer that does not decode (its digest recomputed, as a tool rewriting the row
    would): the error names the row, not only the file."""
    import hashlib

    path = tmp_path / "answers.sqlite"
    with OpenAIStub("ok") as stub:
        store = AnswerStore(path)
        _chat(stub.url, store).invoke(PROMPT)
        ((key, _, _),) = _rows(path)
        for damaged in ("[{]", "[]", "[1]", '{"text": "x"}'):
            sealed = hashlib.sha256(f"{key}\0{damaged}".encode()).hexdigest()
            _set(path, key, answer=damaged, digest=sealed)
            with pytest.raises(AnswerStoreError) as refused:
                _chat(stub.url, store).invoke(PROMPT)
            message = str(refused.value)
            assert "holds a damaged answer" in message, message
            assert f"row key {key}" in message and f"question {QUESTION!r}" in message
        assert len(stub.requests) == 1


def _version_1_store(path: Path, rows: list[tuple[str, ...]]) -> None:
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE answers (key TEXT PRIMARY KEY, model TEXT, settings TEXT NOT NULL, "
            "prompt TEXT NOT NULL, answer TEXT NOT NULL, created TEXT NOT NULL)"
        )
        db.executemany("INSERT INTO answers VALUES (?, ?, ?, ?, ?, ?)", rows)
        db.execute("PRAGMA user_version = 1")


def test_a_version_1_store_is_upgraded_and_its_answers_reused(tmp_path: Path) -> None:
    """Stores written before the digests keep every answer: sealed as they are when first
    opened (nothing older can be checked), then checked like any other row."""
    fresh = tmp_path / "fresh.sqlite"
    with OpenAIStub("ok") as stub:
        _chat(stub.url, AnswerStore(fresh)).invoke(PROMPT)
        with sqlite3.connect(fresh) as db:
            old = [row[:6] for row in db.execute("SELECT * FROM answers")]
        path = tmp_path / "answers.sqlite"
        _version_1_store(path, old)
        store = AnswerStore(path)
        again = _chat(stub.url, store).invoke(PROMPT)
        assert len(stub.requests) == 1 and store.reused == 1
        assert again.content == "- Ada Lovelace (DocTitle: Ada Lovelace)"
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2
    assert _rows(path)[0][2] == _rows(fresh)[0][2]  # sealed as a fresh store seals it


def test_a_table_of_other_columns_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE answers (key TEXT PRIMARY KEY, note TEXT)")
        db.execute("PRAGMA user_version = 1")
    before = path.read_bytes()
    with pytest.raises(AnswerStoreError, match=r"its answers table has columns \['key', 'note'\]"):
        AnswerStore(path)
    assert path.read_bytes() == before


def test_a_local_models_answers_are_filed_and_cleared_under_its_name(tmp_path: Path) -> None:
    """LangChain writes a chat model it cannot serialise (the local model) as the repr of its
    parameters: its rows had no model name, so ``clear(model="smollm2")`` deleted nothing;
    rows stored that way before are named when a clear by model looks for them."""
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration

    local = "[('_type', 'fairrag-local'), ('model_name', 'smollm2'), ('stop', None)]"
    answer = [ChatGeneration(message=AIMessage(content="- Ada Lovelace (DocTitle: Ada Lovelace)"))]
    store = AnswerStore(tmp_path / "a.sqlite")
    store.update(PROMPT, local, answer)
    store.update(OTHER, local, answer)
    with sqlite3.connect(tmp_path / "a.sqlite") as db:
        assert db.execute("SELECT DISTINCT model FROM answers").fetchall() == [("smollm2",)]
        db.execute("UPDATE answers SET model = NULL WHERE prompt = ?", (OTHER,))  # as before
    store.clear(model="smollm2")
    assert _rows(tmp_path / "a.sqlite") == []

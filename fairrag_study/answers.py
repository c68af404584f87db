"""The answer store: a durable LangChain cache of chat model answers, so that a paid answer is
never paid for twice (docs/SPEC.md, "The study", answer store).

:class:`AnswerStore` is a ``langchain_core.caches.BaseCache`` backed by one SQLite file. Give it
to any LangChain chat model (``ChatOpenAI(..., cache=AnswerStore(path))``): the model looks an
answer up before it calls its server and stores what the server answered right after, each
answer committed on its own, so answers paid before a crash, a kill or a Ctrl-C stay on disk and
the next run reuses them.

The key is LangChain's: the prompt (the serialised messages) and the model's ``llm_string``
(its class and every generation setting: model name, temperature, top_p, max tokens, seed, stop
words, the server when one is named). The store takes the request's transport settings out of
the ``llm_string`` before keying (:data:`TRANSPORT_SETTINGS`: timeout, retries, API key,
streaming switches, proxy), since they change how an answer is fetched, not what it says: a run
with another ``--llm-timeout`` reuses the answers of the last one.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import re
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.caches import RETURN_VAL_TYPE, BaseCache
from langchain_core.messages import message_to_dict, messages_from_dict
from langchain_core.outputs import ChatGeneration, Generation

from .errors import AnswerStoreError

__all__ = [
    "ANSWERS_FILE",
    "DEFAULT_OPENAI_ENDPOINT",
    "TRANSPORT_SETTINGS",
    "AnswerStore",
    "answer_settings",
]

ANSWERS_FILE = "answers.sqlite"
"""The store's file name in the study's cache folder."""
SCHEMA_VERSION = 2
"""1: the answers; 2: each row sealed with a digest of its key and answer (a version 1 store is
upgraded in place when opened, its rows sealed as they are then)."""
_COLUMNS_V1 = ("key", "model", "settings", "prompt", "answer", "created")
_COLUMNS = (*_COLUMNS_V1, "digest")
TRANSPORT_SETTINGS = frozenset(
    {
        "request_timeout",
        "timeout",
        "max_retries",
        "openai_api_key",
        "api_key",
        "streaming",
        "disable_streaming",
        "stream_usage",
        "openai_proxy",
        "http_client",
        "http_async_client",
        "rate_limiter",
        "callbacks",
        "verbose",
    }
)
"""Chat model fields left out of the key: how a request is sent, not what it asks for."""
DEFAULT_OPENAI_ENDPOINT = "https://api.openai.com/v1"
"""OpenAI's endpoint, keyed as "no server named" (naming it explicitly reuses the same answers)."""
_SEPARATOR = "---"  # between the model's JSON and the call's parameters in an llm_string


def answer_settings(llm_string: str) -> str:
    """The part of LangChain's ``llm_string`` that keys an answer (docs/SPEC.md, answer store).

    A serialisable chat model's ``llm_string`` is its constructor as JSON, ``---``, then the
    call's parameters (stop words and keyword arguments). The constructor's
    :data:`TRANSPORT_SETTINGS` are removed, a named server loses its trailing ``/`` (and is
    dropped when it is OpenAI's own :data:`DEFAULT_OPENAI_ENDPOINT`), and the JSON is written
    again with sorted keys. Any other ``llm_string`` (a model LangChain cannot serialise) is
    kept whole.
    """
    head, separator, params = llm_string.partition(_SEPARATOR)
    try:
        model = json.loads(head)
    except json.JSONDecodeError:
        return llm_string
    if not separator or not isinstance(model, dict) or not isinstance(model.get("kwargs"), dict):
        return llm_string
    kwargs = {k: v for k, v in model["kwargs"].items() if k not in TRANSPORT_SETTINGS}
    for name in ("openai_api_base", "base_url"):
        server = kwargs.get(name)
        if isinstance(server, str):
            server = server.rstrip("/")
            if server == DEFAULT_OPENAI_ENDPOINT:
                del kwargs[name]
            else:
                kwargs[name] = server
    return json.dumps({**model, "kwargs": kwargs}, sort_keys=True) + _SEPARATOR + params


def _model_name(settings: str) -> str | None:
    """The model a request's settings name: LangChain writes a serialisable chat model's as
    JSON (its ``kwargs``), another's (the local model's) as the repr of its sorted
    parameters, a list of pairs."""
    head = settings.partition(_SEPARATOR)[0]
    try:
        kwargs = json.loads(head).get("kwargs", {})
    except (json.JSONDecodeError, AttributeError):
        try:
            pairs = ast.literal_eval(head) if head.startswith("[") else None
            kwargs = dict(pairs) if isinstance(pairs, list) else {}
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    for name in ("model_name", "model", "model_id"):
        if isinstance(kwargs.get(name), str):
            return str(kwargs[name])
    return None


def _encode(generations: RETURN_VAL_TYPE) -> str:
    items = []
    for generation in generations:
        item: dict[str, Any]
        if isinstance(generation, ChatGeneration):
            item = {"message": message_to_dict(generation.message)}
        elif isinstance(generation, Generation):
            item = {"text": generation.text}
        else:
            raise TypeError(f"an answer must be a list of Generation, got {generation!r:.100}")
        items.append({**item, "generation_info": generation.generation_info})
    return json.dumps(items, ensure_ascii=False, default=str)


def _seal(key: object, answer: object) -> str:
    """A row's digest: sha256 of its key, NUL, its stored answer (``""`` for an answer that is
    not text, which no digest matches)."""
    if not isinstance(key, str) or not isinstance(answer, str):
        return ""
    return hashlib.sha256(f"{key}\0{answer}".encode()).hexdigest()


def _question_of(prompt: str) -> str | None:
    """The question of a stored prompt, for naming its row: the study prompt's ``Question:``
    line, else the start of the last message (at most 200 characters)."""
    try:
        messages = json.loads(prompt)
    except ValueError:
        messages = None
    texts: list[str] = []
    if isinstance(messages, list):
        for message in messages:
            kwargs = message.get("kwargs") if isinstance(message, dict) else None
            content = kwargs.get("content") if isinstance(kwargs, dict) else None
            if isinstance(content, str):
                texts.append(content)
    elif isinstance(prompt, str):
        texts.append(prompt)
    for text in reversed(texts):
        for line in text.splitlines():
            if line.startswith("Question: "):
                return line[len("Question: ") :][:200]
    return " ".join(texts[-1].split())[:200] if texts else None


def _seed_of(settings: str) -> str | None:
    """The generation seed the settings carry (the model's ``seed``, or the call's), if any."""
    head, _, params = settings.partition(_SEPARATOR)
    try:
        kwargs = json.loads(head).get("kwargs", {})
    except (json.JSONDecodeError, AttributeError):
        kwargs = {}
    if isinstance(kwargs, dict) and kwargs.get("seed") is not None:
        return str(kwargs["seed"])
    found = re.search(r"\('seed', (-?\d+)\)", params)
    return found.group(1) if found else None


def _decode(text: str) -> list[Generation]:
    generations: list[Generation] = []
    items = json.loads(text)
    if not isinstance(items, list) or not items:
        raise ValueError("not a list of generations")
    for item in items:
        info = item.get("generation_info")
        if "message" in item:
            message = messages_from_dict([item["message"]])[0]
            generations.append(ChatGeneration(message=message, generation_info=info))
        else:
            generations.append(Generation(text=item["text"], generation_info=info))
    return generations


class AnswerStore(BaseCache):
    """Chat model answers in one SQLite file, keyed by prompt and model settings.

    Rules (docs/SPEC.md, "The study", answer store):

    - key: sha256 of :func:`answer_settings` of the ``llm_string`` and of the prompt, both
      kept beside the answer (a lookup checks them, so two keys never share an answer);
    - every :meth:`update` is its own committed transaction (WAL, ``synchronous=FULL``): an
      answer is on disk before the chat model returns it, and a killed process loses at most
      the answer it was receiving;
    - an empty answer (no generation) is never stored; an answer already stored is replaced by
      a new one for the same key (two processes that paid for it at once);
    - several threads and processes may share the file (one connection under a lock;
      ``busy_timeout`` 30 s between processes); the async methods run the same code in a
      worker thread;
    - :attr:`reused` counts the lookups answered from the store, :attr:`stored` the answers
      written, since this object was made;
    - a file that is not an answer store (another SQLite file, damaged bytes, a newer schema)
      raises :class:`~fairrag_study.errors.AnswerStoreError` naming it, and is never modified;
      any later SQLite failure (full disk) raises the same error;
    - each row is sealed with a digest of its key and answer (:func:`_seal`): a row whose
      answer no longer matches it (changed after it was stored, by a tool, a hand or a bad
      disk), or that does not decode, raises :class:`AnswerStoreError` naming the row (key,
      question, seed, model, date) instead of being served as the model's answer. A row filed
      under another prompt's key is not served either (a miss; the next answer replaces it).
      The digest is not a secret: it protects against damage and edits of the answer alone,
      not against someone who can write the file and recompute it (docs/SPEC.md, trust model).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        if self.path.is_dir():
            raise AnswerStoreError(
                f"the answer store {str(self.path)!r} is a folder; expected a file path "
                f"(e.g. {str(self.path / ANSWERS_FILE)!r})"
            )
        self.reused = 0
        self.stored = 0
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._connection = sqlite3.connect(
                self.path, timeout=30.0, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise AnswerStoreError(
                f"the answer store {str(self.path)!r} cannot be opened: {exc}"
            ) from exc
        try:
            self._prepare()
        except sqlite3.OperationalError as exc:  # locked, I/O error: the file may be fine
            self._connection.close()
            raise AnswerStoreError(
                f"the answer store {str(self.path)!r} cannot be opened: {exc}"
            ) from exc
        except sqlite3.DatabaseError as exc:
            self._connection.close()
            raise AnswerStoreError(
                f"{str(self.path)!r} is not a FairRAG answer store ({exc}); it was left "
                "untouched: move it away, or give another path (--answers)"
            ) from exc

    def _prepare(self) -> None:
        """Check the file, then create the table in the same write transaction (two processes
        opening a new store at once create it once); a file that is not a store is refused
        before anything is written to it, WAL included."""
        db = self._connection
        db.execute("BEGIN IMMEDIATE")
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            if version == 0 and tables:
                raise sqlite3.DatabaseError(f"it holds other tables: {sorted(tables)}")
            if version > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(
                    f"its schema version {version} is newer than this FairRAG's ({SCHEMA_VERSION})"
                )
            if version == 0:
                db.execute(
                    "CREATE TABLE answers (key TEXT PRIMARY KEY, model TEXT, "
                    "settings TEXT NOT NULL, prompt TEXT NOT NULL, answer TEXT NOT NULL, "
                    "created TEXT NOT NULL, digest TEXT NOT NULL)"
                )
            else:
                columns = tuple(row[1] for row in db.execute("PRAGMA table_info(answers)"))
                if columns != (_COLUMNS_V1 if version == 1 else _COLUMNS):
                    raise sqlite3.DatabaseError(
                        f"its answers table has columns {list(columns)}, not a version "
                        f"{version} store's"
                    )
            if version == 1:  # sealed as they are now: nothing older can be checked
                db.create_function("fairrag_seal", 2, _seal, deterministic=True)
                db.execute("ALTER TABLE answers ADD COLUMN digest TEXT NOT NULL DEFAULT ''")
                db.execute("UPDATE answers SET digest = fairrag_seal(key, answer)")
            if version < SCHEMA_VERSION:
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")

    def __repr__(self) -> str:
        return f"AnswerStore({str(self.path)!r})"

    def __len__(self) -> int:
        return int(self._run("SELECT COUNT(*) FROM answers")[0][0])

    @staticmethod
    def key(prompt: str, llm_string: str) -> str:
        """The row key of ``(prompt, llm_string)``: sha256 of the settings, NUL, the prompt."""
        settings = answer_settings(llm_string)
        return hashlib.sha256(f"{settings}\0{prompt}".encode()).hexdigest()

    def _run(self, sql: str, args: Sequence[Any] = (), doing: str = "be read") -> list[Any]:
        """The rows of one statement, committed at once (autocommit), under the lock."""
        with self._lock:
            try:
                return self._connection.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise AnswerStoreError(
                    f"the answer store {str(self.path)!r} could not {doing} ({exc})"
                ) from exc

    def lookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        """The stored answer to ``prompt`` under these settings, or None.

        A row whose answer does not match its digest, or does not decode, raises
        :class:`AnswerStoreError` naming the row; it is never returned as an answer."""
        settings = answer_settings(llm_string)
        key = self.key(prompt, llm_string)
        rows = self._run(
            "SELECT settings, prompt, answer, digest, created FROM answers WHERE key = ?", (key,)
        )
        if not rows or (rows[0][0], rows[0][1]) != (settings, prompt):
            return None  # none, or filed under another prompt's key: asked again, replaced
        _, _, stored, digest, created = rows[0]
        if digest != _seal(key, stored):
            raise AnswerStoreError(
                f"the answer store {str(self.path)!r} holds an answer that does not match its "
                f"row's digest ({self._row(key, prompt, settings, created)}): it was changed "
                "after it was stored, so it is not used as the model's answer. Delete that row "
                f"(DELETE FROM answers WHERE key = '{key}') or the store to ask the model again"
            )
        try:
            answer = _decode(stored)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise AnswerStoreError(
                f"the answer store {str(self.path)!r} holds a damaged answer ({exc}; "
                f"{self._row(key, prompt, settings, created)}). Delete that row "
                f"(DELETE FROM answers WHERE key = '{key}') or the store to ask the model again"
            ) from exc
        with self._lock:
            self.reused += 1
        return answer

    @staticmethod
    def _row(key: str, prompt: str, settings: str, created: object) -> str:
        """A row in words: its key, question, seed, model and date (those it has)."""
        words = [f"row key {key}"]
        question = _question_of(prompt)
        if question:
            words.append(f"question {question!r}")
        seed = _seed_of(settings)
        if seed is not None:
            words.append(f"seed {seed}")
        model = _model_name(settings)
        if model:
            words.append(f"model {model}")
        if isinstance(created, str):
            words.append(f"stored {created}")
        return ", ".join(words)

    def update(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        """Store the answer, committed before this returns (an empty one is not stored)."""
        if not return_val:
            return
        settings = answer_settings(llm_string)
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        key, answer = self.key(prompt, llm_string), _encode(return_val)
        self._run(
            "INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?, ?, ?, ?)",
            (key, _model_name(settings), settings, prompt, answer, created, _seal(key, answer)),
            doing="store the answer just received, which is lost; the answers stored before "
            "it are kept",
        )
        with self._lock:
            self.stored += 1

    def clear(self, **kwargs: Any) -> None:
        """Delete every answer, or with ``model="gpt-4o-mini"`` only that model's."""
        unknown = sorted(set(kwargs) - {"model"})
        if unknown:
            raise TypeError(f"clear() takes only model=, got {unknown}")
        if "model" in kwargs:
            # rows stored before a local model's name was read from its settings: named now
            for key, settings in self._run("SELECT key, settings FROM answers WHERE model IS NULL"):
                name = _model_name(settings)
                if name is not None:
                    self._run("UPDATE answers SET model = ? WHERE key = ?", (name, key), "be named")
            self._run("DELETE FROM answers WHERE model = ?", (kwargs["model"],), "be cleared")
        else:
            self._run("DELETE FROM answers", doing="be cleared")

    async def alookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        return await asyncio.to_thread(self.lookup, prompt, llm_string)

    async def aupdate(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        await asyncio.to_thread(self.update, prompt, llm_string, return_val)

    async def aclear(self, **kwargs: Any) -> None:
        await asyncio.to_thread(self.clear, **kwargs)

    def close(self) -> None:
        """Close the file (the store cannot be used afterwards)."""
        with self._lock:
            self._connection.close()

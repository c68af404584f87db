"""The generation phase's parts: the chat model a study asks (OpenAI-compatible, local, fake or
none), its answer store, and what a run says about the answers it paid for (docs/SPEC.md, "The
study", generation and answer store). Generation itself runs inside the trials phase."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..data import (
    default_cache_dir,
)
from ..errors import (
    AnswerStoreError,
)
from ..settings import GenerationSettings


@dataclass(frozen=True)
class Generation:
    """What the generation phase hands on: the chat model (None: none), why there is none,
    its answer store (None: none or turned off), its name as the report gives it, and whether
    its answers cost (:func:`pays`)."""

    llm: Any
    note: str | None
    store: Any
    name: str
    paying: bool

    def counts(self) -> dict[str, Any] | None:
        """``run.json``'s ``answers`` (:func:`answer_counts`)."""
        return answer_counts(self.store)

    def line(self) -> str:
        """The log's and the report's line on answers (:func:`answers_line`)."""
        return answers_line(self.store)

    def kept(self) -> str:
        """What a stopped run says about the answers it paid for (:func:`answers_kept`)."""
        return answers_kept(self.store, self.paying)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def check_named_server(settings: GenerationSettings) -> None:
    """``--base-url`` with ``--llm auto`` and no ``OPENAI_API_KEY`` is an error: a server was
    named to answer, and running retrieval only would ignore it (a user trial's run went on
    for six minutes without a model, and said so at its end). Checked before ``--out`` is
    claimed (a review found the previous study's outputs deleted first)."""
    if settings.llm == "auto" and settings.base_url and not os.environ.get("OPENAI_API_KEY"):
        raise ValueError(
            f"--base-url {settings.base_url} names a server, but --llm auto asks a model only "
            "when OPENAI_API_KEY is set, and it is not: set it (any value for a server that "
            "takes none), or drop --base-url to run retrieval only"
        )


def open_generation(settings: GenerationSettings) -> Generation:
    """The generation phase's entry (the generation runs inside the trials): the chat model
    with its answer store (:func:`chat_model`), named, its cost known."""
    llm, note = chat_model(settings, answers=True)
    return Generation(llm, note, store_of(llm), generator_name(settings, llm), pays(settings))


def chat_model(settings: GenerationSettings, answers: bool = False) -> tuple[Any, str | None]:
    """The generator, or ``(None, why not)``.

    An OpenAI generator names its server (``--base-url``, else ``OPENAI_API_BASE`` or
    ``OPENAI_BASE_URL``, else OpenAI's), which is part of its answers' key. With ``answers``
    and ``settings.answer_cache`` it gets the answer store as its LangChain ``cache``
    (:func:`answer_store_path`; docs/SPEC.md, "The study", answer store).
    """
    choice = settings.llm
    if choice == "none":
        return None, "--llm none: retrieval only, as asked."
    if choice == "fake":
        from fairrag_langchain.fakes import FakeCitingChatModel

        return FakeCitingChatModel(seed=settings.seed), None
    if choice == "local" or choice.startswith("local:"):
        from ..local_llm import (
            DEFAULT_LOCAL_MODEL,
            LOCAL_MAX_TOKENS,
            LOCAL_MODELS,
            LocalChatModel,
            cap_malloc_arenas,
            default_threads,
            local_model_file,
        )

        name = choice.partition(":")[2] or DEFAULT_LOCAL_MODEL
        if name not in LOCAL_MODELS:
            raise ValueError(
                f"--llm {choice!r}: unknown local model {name!r}; known: {sorted(LOCAL_MODELS)}"
            )
        local_model_file(name)  # a missing package fails now, saying how to install it
        cap_malloc_arenas()  # before the trial threads take turns decoding (SPEC, Local batches)
        local = LocalChatModel(
            model_name=name,
            max_tokens=settings.max_tokens or LOCAL_MAX_TOKENS,
            threads=settings.threads or default_threads(),
            answer_format=settings.llm_format,
            cache_dir=settings.cache_dir,
        )
        if answers and settings.answer_cache:
            local.cache = answer_store(settings)
        return local, None
    if choice == "auto":
        check_named_server(settings)
        if not os.environ.get("OPENAI_API_KEY"):
            return None, (
                "no chat model: OPENAI_API_KEY is not set. Set it (and --base-url for any "
                "OpenAI-compatible server) or pass --llm openai:<model>; generation parity, "
                "fairness gap and utility need a generator."
            )
        choice = "openai:gpt-4o-mini"
    if choice.startswith("openai:"):
        from fairrag_langchain.chains import default_chat_model

        if not os.environ.get("OPENAI_API_KEY"):
            raise ValueError(
                f"--llm {choice} needs OPENAI_API_KEY (any value for an OpenAI-compatible "
                "server that takes none, with --base-url); or use --llm none (retrieval only) "
                "or --llm fake (the offline test double)"
            )

        endpoint = named_endpoint(settings)
        bounds: dict[str, Any] = {"timeout": llm_timeout(settings)}
        if settings.llm_retries is not None:
            bounds["max_retries"] = settings.llm_retries
        if settings.max_tokens is not None:
            bounds["max_tokens"] = settings.max_tokens
        llm = default_chat_model(endpoint, model=choice.split(":", 1)[1], **bounds)
        if answers and settings.answer_cache:
            llm.cache = answer_store(settings)
        return llm, None
    raise ValueError(
        f"--llm {choice!r} is unknown; use auto, none, fake, local[:<name>] or openai:<model>"
    )


LOOPBACK_TIMEOUT = 600.0
"""``--llm-timeout``'s default for a server on this machine (``--base-url`` on 127.0.0.0/8,
``localhost`` or ``[::1]``): a CPU-served model's first answer took 277 s of wall time under
load (SmolLM2-135M on 2 shared cores, issue 22), far past the 60 s meant for a hosted API, after
which the client re-sends the request and pays again."""


def llm_timeout(settings: GenerationSettings) -> float:
    """Seconds one request may take: ``--llm-timeout``, else :data:`LOOPBACK_TIMEOUT` for a
    server on this machine, else ``default_chat_model``'s 60."""
    from fairrag_langchain.chains import DEFAULT_TIMEOUT as CHAT_TIMEOUT

    if settings.llm_timeout is not None:
        return float(settings.llm_timeout)
    host = urlparse(named_endpoint(settings) or "").hostname or ""
    if host == "localhost" or host == "::1" or host.startswith("127."):
        return LOOPBACK_TIMEOUT
    return CHAT_TIMEOUT


def answer_store_path(settings: GenerationSettings) -> Path:
    """Where the study's answer store is: ``settings.answers``, else ``answers.sqlite`` in the
    cache folder (``settings.cache_dir``, else :func:`~fairrag_study.data.default_cache_dir`),
    never in ``--out``, which a re-run replaces."""
    if settings.answers is not None:
        return Path(settings.answers).expanduser()
    return Path(settings.cache_dir or default_cache_dir()).expanduser() / "answers.sqlite"


def answer_store(settings: GenerationSettings) -> Any:
    """The answer store at :func:`answer_store_path`, opened."""
    from ..answers import AnswerStore

    return AnswerStore(answer_store_path(settings))


def named_endpoint(settings: GenerationSettings) -> str | None:
    """The OpenAI-compatible server the study names: ``--base-url``, else ``OPENAI_API_BASE``,
    else ``OPENAI_BASE_URL`` (``ChatOpenAI``'s and the ``openai`` client's order), else None
    (OpenAI's own)."""
    return (
        settings.base_url
        or os.environ.get("OPENAI_API_BASE")
        or os.environ.get("OPENAI_BASE_URL")
        or None
    )


def store_of(llm: Any) -> Any:
    """The chat model's answer store, or None (no generator, another model, or turned off)."""
    if llm is None:
        return None
    from ..answers import AnswerStore

    cache = getattr(llm, "cache", None)
    return cache if isinstance(cache, AnswerStore) else None


def answer_counts(store: Any) -> dict[str, Any] | None:
    """``run.json``'s ``answers``: the store, answers reused and paid (stored) in this run."""
    if store is None:
        return None
    return {"store": str(store.path), "reused": store.reused, "paid": store.stored}


def pays(settings: GenerationSettings) -> bool:
    """Whether the study's generator's answers cost (a server's: ``openai:<model>``, or
    ``auto`` with a key; or CPU time: ``local``), so the answer store keeps them."""
    return settings.llm.startswith(("openai:", "local")) or (
        settings.llm == "auto" and bool(os.environ.get("OPENAI_API_KEY"))
    )


def answers_line(store: Any) -> str:
    """The log's and the report's line on answers, e.g. ``4 paid, 12 reused (store ...)``."""
    if store is None:
        return "every answer paid for (answer store off: --no-answer-cache)"
    return f"{store.stored} paid, {store.reused} reused (answer store {store.path})"


def answers_kept(store: Any, paying: bool) -> str:
    """What a stopped run says about the answers it paid for (appended to its message);
    ``paying``: :func:`pays`."""
    if store is None:
        if not paying:
            return ""
        return "; the answer store is off (--no-answer-cache): a re-run pays for them again"
    try:
        total = f" ({len(store)} in all)"
    except AnswerStoreError:  # the store itself failed: say what is known
        total = ""
    return (
        f"; the {store.stored} answers paid in this run are kept in {store.path}{total}, "
        "and a re-run reuses them"
    )


def chat_model_errors() -> Any:
    """A LangChain callback handler keeping every error a chat model run raised (``errors``),
    so the study can tell a server's unreadable reply from a failure of its own code."""
    from langchain_core.callbacks import BaseCallbackHandler

    class ChatModelErrors(BaseCallbackHandler):
        def __init__(self) -> None:
            self.errors: list[BaseException] = []

        def on_llm_error(self, error: BaseException, **kwargs: Any) -> None:
            self.errors.append(error)

    return ChatModelErrors()


def generator_name(settings: GenerationSettings, llm: Any) -> str:
    """``none``, ``fake``, ``local:<name>`` or ``openai:<model>``: the generator the trials
    used."""
    if llm is None:
        return "none"
    if settings.llm.startswith("local"):
        return f"local:{llm.model_name}"
    if settings.llm == "auto":
        return f"openai:{getattr(llm, 'model_name', 'gpt-4o-mini')}"
    return settings.llm


def context_callbacks(llm: Any) -> list[Any]:
    """Callback handlers the chat model needs in each trial's run: a
    :class:`~fairrag_study.local_llm.ShownTitles` for a local model held to the paper's format
    (it learns the shown titles through it)."""
    if getattr(llm, "answer_format", "free") != "paper":
        return []
    from ..local_llm import ShownTitles

    return [ShownTitles()]

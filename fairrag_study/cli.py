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
import os
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
    """``fairrag study``: the data set's flags, then those of
    :class:`~fairrag_study.config.StudyConfig`."""
    from . import options
    from .config import StudyConfig, add_flags

    study = commands.add_parser("study", help=COMMANDS["study"][0] + " (needs fairrag[study])")
    # Path flags depend on the disk and on each other: checked after parsing, before any work.
    study.set_defaults(check=lambda args: _check_study(study, args))
    options.add_dataset_arguments(study)
    add_flags(study, StudyConfig)
    return study


def _check_study(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The disk, the data set, then the configuration made once from the flags (``args.config``;
    exit 2 naming the flag, before any work)."""
    from . import options
    from .config import StudyConfig, model_from_args

    options.check_paths(parser, args)
    args.dataset = options.dataset_from_args(parser, args)
    args.config = model_from_args(parser, StudyConfig, args, dataset=args.dataset)


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
    except BrokenPipeError:
        # the reader of stdout stopped (`fairrag audit ... | head -1`; an operator's trial got
        # a traceback): quiet, stdout pointed at nothing so the exit's flush cannot fail again,
        # the status a shell gives a writer SIGPIPE stopped
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13
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
    from .study import run_study

    config = args.config
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

"""Checks of the ``fairrag study`` flags, run before any work (no model, data or index loaded).

Each function is an ``argparse`` type: a bad value becomes ``argparse.ArgumentTypeError``, which
argparse reports as ``fairrag study: error: argument --flag: ...`` with exit status 2. Path flags
are checked after parsing by :func:`check_paths` (they depend on each other and on the disk).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from fairrag_core import available_rankers, make_target
from fairrag_core.validation import check_alpha

from .dataset import PAPER_RANKERS, TREC_GENDER, StudyDataset, custom_dataset

__all__ = [
    "CONCURRENCY_LIMIT",
    "DATASET_FLAGS",
    "LLM_RETRIES_LIMIT",
    "MAX_TOKENS_LIMIT",
    "SECONDS",
    "SEED_LIMIT",
    "THREADS_LIMIT",
    "add_dataset_arguments",
    "alpha",
    "check_paths",
    "check_pool",
    "column_name",
    "comma_list",
    "concurrency",
    "dataset_from_args",
    "int_at_least",
    "int_in",
    "llm_choice",
    "llm_retries",
    "max_tokens",
    "port",
    "position_curve",
    "positive_seconds",
    "rankers",
    "seconds_problem",
    "seed",
    "target",
    "threads",
    "url",
]

DATASET_FLAGS: dict[str, str] = {
    "--group-key": "group_key",
    "--protected": "protected",
    "--doc-id-column": "doc_id_column",
    "--title-column": "title_column",
    "--text-column": "text_column",
    "--topic-column": "topic_column",
}
"""The flags describing a user's own data set (each needs ``--target``), and their attributes."""


def int_at_least(low: int) -> Callable[[str], int]:
    """An integer >= ``low`` (``--trials``, ``--k``, ``--pool-size``: 1; ``--seed``: 0)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not an integer; expected an integer >= {low}"
            ) from None
        if value < low:
            raise argparse.ArgumentTypeError(
                f"{value} is out of range; expected an integer >= {low}"
            )
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def int_in(low: int, high: int, why: str) -> Callable[[str], int]:
    """An integer from ``low`` to ``high`` (``why``: what the upper bound is, for the message):
    ``--seed``, ``--max-tokens``, ``--llm-retries``, ``--concurrency``, ``--threads``."""
    at_least = int_at_least(low)

    def parse(text: str) -> int:
        value = at_least(text)
        if value > high:
            raise argparse.ArgumentTypeError(
                f"{value:,} is out of range; expected an integer from {low} to {high:,} ({why})"
            )
        return value

    parse.__name__ = f"integer from {low} to {high}"
    return parse


SEED_LIMIT = 2**64
"""Seeds are ints in ``[0, 2**64)``: what numpy's generators and the components take
(``fairrag_core.kit.config.SEED_LIMIT``); ``2**70`` was refused only after the index loaded."""
MAX_TOKENS_LIMIT = 131_072
"""The most new tokens ``--max-tokens`` may ask for: the largest output of today's chat models
(128k); beyond, no server honours it and a local model would allocate for it."""
SAMPLES_LIMIT = 100_000
"""The most rankings ``--samples`` draws per question and ranker: beyond, the draws outgrow the
machine (10**12 asked 36 TiB, failing with a traceback after every trial had run); the
sampling error of expected exposure is already about 0.3% of its range at this many."""
LLM_RETRIES_LIMIT = 20
"""The most retries ``--llm-retries`` may ask for: with the client's back-off 20 already wait
minutes on one request; 10**9 would retry a dead server for ever."""

seed = int_in(0, SEED_LIMIT - 1, "2**64 - 1, the largest seed numpy's generators take")
max_tokens = int_in(1, MAX_TOKENS_LIMIT, "the largest output a chat model gives")
llm_retries = int_in(0, LLM_RETRIES_LIMIT, "more retries wait out a server that is down")
CONCURRENCY_LIMIT = 64
"""The most answers ``--concurrency`` may ask for at once: one worker thread and one open
connection each; beyond, a server's rate limit answers 429 to most of them."""
THREADS_LIMIT = 256
"""The most torch CPU threads ``--threads`` may ask for (more than any machine's cores)."""
concurrency = int_in(1, CONCURRENCY_LIMIT, "answers in flight at once")
threads = int_in(1, THREADS_LIMIT, "torch CPU threads of the local model")


def position_curve(text: str) -> int:
    """``--position-curve N``: 0 (no phase) or N >= 2 questions (a fit half and a held-out
    half)."""
    value = int_at_least(0)(text)
    if value == 1:
        raise argparse.ArgumentTypeError(
            "1 is out of range; expected 0 (no phase) or an integer >= 2 (two halves)"
        )
    return value


def check_pool(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--k`` at most ``--pool-size``: the k shown are taken from the pool (a larger k ran
    every trial, then read as an index that "changed during the run")."""
    if args.k > args.pool_size:
        parser.error(
            f"argument --k: {args.k} is larger than --pool-size {args.pool_size}; the k "
            "documents shown are taken from the pool retrieved: choose --k <= --pool-size, or "
            "a larger --pool-size"
        )


SECONDS = (0.1, 86_400.0)
"""The timeouts accepted (``--chroma-timeout``, ``--llm-timeout``), in seconds: 0.1 to a day.
Below, a connection may not even open, and the failure reads as "no server"; above, the
socket layer overflows (1e10 s raised ``OverflowError`` from deep in httpcore)."""


def seconds_problem(value: float) -> str | None:
    """Why ``value`` is not an accepted timeout (:data:`SECONDS`), or ``None``."""
    low, high = SECONDS
    if not math.isfinite(value):
        return f"{value} is not a finite number"
    if not low <= value <= high:
        return f"{value:g} is out of range"
    return None


def positive_seconds(text: str) -> float:
    """A finite number of seconds from 0.1 to 86,400 (:data:`SECONDS`; ``--chroma-timeout``,
    ``--llm-timeout``): ``nan``, ``inf``, ``0``, negatives, ``1e-300`` and ``1e300`` are
    refused here, naming the flag and the range, instead of failing in the HTTP client."""
    expected = f"expected a finite number of seconds from {SECONDS[0]:g} to {SECONDS[1]:g}"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; {expected}") from None
    problem = seconds_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r} is not accepted ({problem}); {expected}")
    return value


def alpha(text: str) -> float:
    """The stochastic rankers' sharpness, checked by the core's own rule (one bound, one place)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    try:
        return check_alpha(value)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not accepted: {exc}") from None


def rankers(text: str) -> tuple[str, ...]:
    """``paper`` (the paper's four rankers) or comma-separated ranker names, each registered in
    ``fairrag_core`` (asked now, not a list written here), none twice, at least one."""
    if text.strip() == "paper":
        return PAPER_RANKERS
    names = tuple(name.strip() for name in text.split(","))
    known = available_rankers()
    if not text.strip() or any(not name for name in names):
        raise argparse.ArgumentTypeError(
            f"{text!r} holds an empty name; expected 'paper' (the paper's four) or "
            f"comma-separated names from {known}"
        )
    unknown = [name for name in names if name not in known]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown rankers {unknown}; known rankers: {known} (or 'paper' for the paper's four)"
        )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(
            f"{text!r} names {repeated} more than once; rankers must name each ranker once"
        )
    return names


def comma_list(text: str) -> tuple[str, ...]:
    """Comma-separated non-empty names (``--topics``)."""
    names = tuple(name.strip() for name in text.split(","))
    if any(not name for name in names):
        raise argparse.ArgumentTypeError(
            f"{text!r} holds an empty name; expected comma-separated names"
        )
    return names


def column_name(text: str) -> str:
    """A non-empty CSV column or metadata field name (``--group-key``, ``--text-column``...)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is empty; expected a column name")
    return text


def target(text: str) -> dict[str, float]:
    """A JSON object ``{"group": share, ...}``: two or more groups, shares >= 0 summing to 1,
    checked by the core's own rule (``fairrag_core.make_target``)."""
    example = 'expected a JSON object of group shares summing to 1, e.g. \'{"a": 0.4, "b": 0.6}\''
    shown = _shown(text)
    try:
        value = json.loads(text, object_pairs_hook=_no_repeated_keys)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{shown} is not JSON ({exc.msg}); {example}") from None
    except RecursionError:  # 5,000 nested objects exhaust the JSON parser's stack
        raise argparse.ArgumentTypeError(
            f"{shown} nests objects or lists too deep to read; {example}, one level deep"
        ) from None
    except _RepeatedKeys as exc:
        raise argparse.ArgumentTypeError(
            f"{shown} names group {exc} more than once (JSON keeps only the last share); "
            f"{example}, each group once"
        ) from None
    if not isinstance(value, dict) or len(value) < 2:
        raise argparse.ArgumentTypeError(f"{shown} is not accepted; {example} (two or more)")
    bad = [k for k, v in value.items() if isinstance(v, bool) or not isinstance(v, (int, float))]
    if bad or any(not k.strip() for k in value):
        raise argparse.ArgumentTypeError(
            f"{shown} has non-numeric shares or empty group names {bad}; {example}"
        )
    shares = {k: float(v) for k, v in value.items()}
    try:
        make_target(target=shares)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"{shown} is not accepted: {exc}") from None
    return shares


def _shown(text: str, limit: int = 80) -> str:
    """``text`` quoted for a message, cut to ``limit`` characters (a flag may be megabytes)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text):,} characters)"


class _RepeatedKeys(ValueError):
    """A JSON object naming a key twice (``json.loads`` would keep the last silently)."""


def _no_repeated_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise _RepeatedKeys(", ".join(repr(key) for key in repeated))
    return dict(pairs)


def add_dataset_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags describing a user's own data set (``--target``, the columns; its ``--data``
    is :class:`~fairrag_study.config.StudyConfig`'s):
    the study's and the sweep's (read back by :func:`dataset_from_args`)."""
    parser.add_argument(
        "--target",
        type=target,
        help='your own data: every group\'s target share as JSON, e.g. \'{"a": 0.4, "b": 0.3, '
        '"c": 0.3}\' (its keys are the groups; default: the TREC data, female 0.5)',
    )
    parser.add_argument(
        "--group-key",
        type=column_name,
        help="with --target: the CSV column holding each document's group (default gender)",
    )
    parser.add_argument(
        "--protected",
        help="with --target: the group the one-group metrics (exposure share, generation "
        "parity) are about (default: none)",
    )
    for flag, default in (
        ("--doc-id-column", "doc_id"),
        ("--title-column", "doc_title"),
        ("--text-column", "first sentence"),
        ("--topic-column", "q_text"),
    ):
        parser.add_argument(flag, type=column_name, help=f"with --target: default {default!r}")


def dataset_from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> StudyDataset:
    """The study's data set: the TREC gender data, or with ``--target`` the user's CSV.

    Reported through ``parser.error`` (exit 2), before any work: a data-set flag without
    ``--target``, a ``--protected`` group not in the target, a data set the core refuses, or a
    ``--data`` file whose header lacks a named column.
    """
    given = {flag: getattr(args, attr) for flag, attr in DATASET_FLAGS.items()}
    given = {flag: value for flag, value in given.items() if value is not None}
    if args.target is None:
        if given:
            parser.error(
                f"argument {next(iter(given))}: describes your own data set and needs --target "
                '(e.g. --target \'{"a": 0.5, "b": 0.5}\'); without it the study runs on the '
                "TREC gender data"
            )
        _check_header(parser, args, TREC_GENDER, own=False)
        return TREC_GENDER
    if args.protected is not None and args.protected not in args.target:
        parser.error(
            f"argument --protected: {args.protected!r} is not a group of --target; expected "
            f"one of {list(args.target)}"
        )
    columns = {DATASET_FLAGS[flag]: value for flag, value in given.items()}
    try:
        dataset = custom_dataset(args.target, name="custom", **columns)
    except (TypeError, ValueError) as exc:
        parser.error(f"argument --target: {exc}")
    _check_header(parser, args, dataset, own=True)
    return dataset


def _check_header(
    parser: argparse.ArgumentParser, args: argparse.Namespace, dataset: StudyDataset, own: bool
) -> None:
    """A ``--data`` file whose header lacks a column ``dataset`` reads: ``parser.error``
    before any work, naming the flag that names the column (``own``: the user's data set),
    else ``--data`` (the TREC gender data's columns; a user trial found a wrong file refused
    only after ``--out`` was claimed, naming no flag)."""
    if args.data is None or not Path(os.path.expanduser(args.data)).is_file():
        return
    from .data import csv_header

    try:
        header = csv_header(os.path.expanduser(args.data))
    except ValueError as exc:
        parser.error(f"argument --data: {exc}")
    flags = {attr: flag for flag, attr in DATASET_FLAGS.items()}
    read = ("group_column", "doc_id_column", "title_column", "text_column", "topic_column")
    missing = [(attr, getattr(dataset, attr)) for attr in read]
    missing = [(attr, column) for attr, column in missing if column not in header]
    if missing and own:
        attr, column = missing[0]
        parser.error(
            f"argument {flags.get(attr, '--group-key')}: column {column!r} is not in "
            f"{str(args.data)!r}; its columns are {header}"
        )
    if missing:
        parser.error(
            f"argument --data: {str(args.data)!r} is not the TREC gender data: it has no "
            f"column {', '.join(repr(c) for _, c in missing)} (its columns are {header}); for "
            "a data set of your own give --target and the columns' flags"
        )


def llm_choice(text: str) -> str:
    """``auto``, ``none``, ``fake``, ``local``, ``local:<name>`` (a packaged model run
    in-process: ``fairrag_study.local_llm.LOCAL_MODELS``) or ``openai:<model>``."""
    if text in ("auto", "none", "fake", "local"):
        return text
    if text.startswith("openai:") and text.split(":", 1)[1].strip():
        return text
    if text.startswith("local:"):
        from .local_llm import LOCAL_MODELS  # imports langchain-core: only for local:<name>

        if text.split(":", 1)[1] in LOCAL_MODELS:
            return text
        raise argparse.ArgumentTypeError(
            f"{text!r} names an unknown local model; expected one of "
            f"{', '.join('local:' + name for name in LOCAL_MODELS)}"
        )
    raise argparse.ArgumentTypeError(
        f"{text!r} is unknown; expected auto, none, fake, local[:<name>] or openai:<model> "
        "(e.g. openai:gpt-4o-mini, local:smollm2)"
    )


def port(text: str) -> int:
    """A TCP port, 1 to 65535."""
    value = int_at_least(1)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is out of range; expected a port 1 to 65535")
    return value


def url(text: str) -> str:
    """An ``http://`` or ``https://`` address with a host (``--base-url``)."""
    parts = urlparse(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not accepted; expected an http:// or https:// address such as "
            "http://127.0.0.1:8000/v1"
        )
    return text


def _writable_folder_error(path: Path) -> str | None:
    """Why ``path`` cannot be (or become) a folder this process writes in, or ``None``.

    Writability is tried, not read from the mode bits: root passes every ``os.access`` check,
    and a read-only mount or ``/proc`` refuses writes whatever the bits say.
    """
    if path.exists() and not path.is_dir():
        return "is a file, not a folder"
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"cannot be created: {str(existing)!r} is a file, not a folder"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        where = "" if existing == path else f" (in {str(existing)!r})"
        return f"is not writable{where}: {exc.strerror or exc}"
    return None


def check_paths(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--out`` and ``--cache-dir`` must be (or become) writable folders, ``--data`` a file.

    Reported through ``parser.error`` (exit 2), before anything is created or loaded.
    """
    checks = [("--out", args.out)]
    if args.cache_dir is not None:
        checks.append(("--cache-dir", args.cache_dir))
    for flag, path in checks:
        problem = _writable_folder_error(Path(os.path.expanduser(path)))
        if problem:
            parser.error(f"argument {flag}: {str(path)!r} {problem}; expected a writable folder")
    if args.data is not None and not Path(os.path.expanduser(args.data)).is_file():
        parser.error(f"argument --data: {str(args.data)!r} is not a file; expected the CSV's path")
    if getattr(args, "answers", None) is not None:
        problem = _answer_store_error(Path(os.path.expanduser(args.answers)))
        if problem:
            parser.error(
                f"argument --answers: {str(args.answers)!r} {problem}; expected the path of an "
                "answer store (a SQLite file, created when missing)"
            )
    # what outlives a run is never inside --out, which holds only the run's files: the next
    # run refused the folder for them (the same command accepted once, then refused)
    out = Path(os.path.expanduser(args.out)).resolve()
    for flag, kept, what in (
        ("--answers", getattr(args, "answers", None), "the answer store"),
        ("--cache-dir", args.cache_dir, "the cache"),
    ):
        if kept is not None:
            place = Path(os.path.expanduser(kept)).resolve()
            if place == out or out in place.parents:
                parser.error(
                    f"argument {flag}: {str(kept)!r} is inside --out {str(args.out)!r}, which "
                    f"holds only the run's files (a re-run replaces them and refuses any other): "
                    f"keep {what} outside it (by default it is in the cache folder)"
                )


def _answer_store_error(path: Path) -> str | None:
    """Why ``path`` cannot be the answer store, or ``None``: a folder, a file that is not
    SQLite (its first 16 bytes), or a place where no file can be created."""
    if path.is_dir():
        return "is a folder"
    if path.is_file():
        with open(path, "rb") as handle:
            head = handle.read(16)
        if head and head != b"SQLite format 3\x00":
            return "is not a SQLite file (left untouched)"
        return None
    problem = _writable_folder_error(path.parent)
    return f"cannot be created: its folder {problem}" if problem else None

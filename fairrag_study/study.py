"""The study: reproduce the paper's experiment end to end (docs/SPEC.md, "The study")."""

from __future__ import annotations

import json
import os
import resource
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import StudyConfig
from .dataset import PAPER_RANKERS
from .errors import (
    OutputFolderError,
)
from .index import (
    connect_chroma_server,
)
from .outputs import DISK_FULL, OutputFolder, study_files
from .phases.data import load_corpus
from .phases.generation import Generation, check_named_server, open_generation
from .phases.index import embed_corpus
from .phases.many import measure_many, trial_pools
from .phases.report import write_report
from .phases.trials import run_trials
from .position_curve import POSITION_CURVE_FILES, curve_questions, run_position_curve
from .report import output_files
from .settings import StudySettings

__all__ = ["PAPER_RANKERS", "StudyConfig", "StudyResult", "run_study"]

COLLECTION = "fairrag-corpus"
"""The collection's name in the study's own embedded index folder (one folder per corpus)."""


@dataclass
class StudyResult:
    out: Path
    records: list[dict[str, Any]]
    timings: dict[str, float] = field(default_factory=dict)
    peak_memory_mib: float = 0.0
    generation_note: str | None = None
    index_added: int = 0


def _peak_rss_mib() -> float:
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def run_study(config: StudyConfig, log: Callable[[str], None] = print) -> StudyResult:
    """Run the whole study and write its outputs to ``config.out`` (see the README)."""
    for name, reason in config.left_out.items():
        log(f"ranker {name} left out: {reason}")
    config = config.model_copy(update={"rankers": config.ranker_names})
    settings = config.phase_settings()  # each phase reads its own (fairrag_study.settings)
    server = None
    index = settings.index
    if index.chroma_host:  # an unreachable server fails now, before any slow work
        server = connect_chroma_server(
            index.chroma_host, index.chroma_port, timeout=settings.chroma_timeout
        )
    check_named_server(settings.generation)  # before --out is claimed: nothing deleted first
    out = Path(settings.out)
    files = (*output_files(config.dataset), *POSITION_CURVE_FILES)
    folder = OutputFolder(out, log, study_files(files))
    folder.claim()  # refuses a folder of other files, or one another study is writing
    try:
        previous = _previous_run(out, folder.previous_run)
        run_info = _run_started(config.as_record(), out, log, previous)
        return _run_claimed(settings, server, out, log, run_info)
    except OSError as exc:
        if exc.errno not in DISK_FULL:
            raise
        raise OutputFolderError(
            f"--out {str(out)!r} took no more bytes: {exc} (a full disk, a quota or a file "
            "size limit). Free space there, or choose another --out with room; the study's "
            "outputs (records, tables, figures) take a few MB"
        ) from exc
    finally:
        folder.release()  # never raises over the error above: a full disk is noted, not raised


def _run_claimed(
    settings: StudySettings,
    server: Any,
    out: Path,
    log: Callable[[str], None],
    run_info: dict[str, Any],
) -> StudyResult:
    """The pipeline, in ``out`` (claimed): data → index → trials → many rankings (and the
    amortized frontier) → report, each phase timed and given its own settings, ``run.json``
    (``run_info``, written as the run started) saying how it ended."""
    timings: dict[str, float] = {}
    phase = phase_timer(timings, log)
    index = None
    generation = None
    try:
        with phase("load"):
            # The generator is built first, and the trials planned before the model and index
            # load: a missing API key fails in seconds (not after a Wikipedia fetch), a bad
            # --trials before the embedding.
            generation = open_generation(settings.generation)
            run_info["answers"] = generation.counts()
            data = load_corpus(settings.corpus, out, log)
            if settings.position_curve and generation.llm is not None:  # before any answer
                curve_questions(data.trials, settings.position_curve, settings.many.seed)
        with phase("embed"):
            index = embed_corpus(settings.index, data.corpus, server, log)
        with phase("trials"):
            records = run_trials(
                settings.trials, index, data.corpus, data.trials, generation.llm, out, log
            )
        run_info["answers"] = generation.counts()
        with phase("many rankings"):
            pools = trial_pools(settings.many, index, data.corpus, data.trials)
            many = measure_many(settings.many, index, pools, records)
        if settings.position_curve and generation.llm is not None:
            with phase("position curve"):
                run_position_curve(
                    settings.position_curve,
                    pools,
                    data.corpus,
                    generation.llm,
                    dataset=settings.many.dataset,
                    k=settings.many.k,
                    seed=settings.many.seed,
                    model_name=generation.name,
                    out=out,
                    log=log,
                    concurrency=settings.trials.concurrency,
                )
            run_info["answers"] = generation.counts()  # the curve's answers too
        _log_generation(generation, log)
        with phase("report"):
            write_report(
                out,
                records,
                many,
                settings=settings.report,
                data=data,
                model=index.model,
                generation=generation,
            )
    except BaseException as exc:
        # no generator built: nothing was paid, and the store (if any) was never opened
        kept = generation.kept() if generation else ""
        _run_stopped(exc, run_info, timings, generation, kept, out, log)
        raise
    finally:
        if index is not None and server is None:
            index.client.close()  # the embedded index's files released (a later run may rebuild)
        if generation is not None:
            generation.close()
    peak = _peak_rss_mib()
    run_info.update(status="complete", timings=timings, peak_memory_mib=round(peak, 1))
    _write_json(out / "run.json", run_info)
    total = sum(timings.values())
    phases = ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
    asked = "in trials" if generation.llm is not None else "skipped"
    log(f"wall time per phase: {phases} (generation: {asked})")
    log(f"total {total:.1f} s; peak memory {peak:.0f} MiB; outputs in {out}")
    return StudyResult(out, records, timings, peak, generation.note, index.added)


def _run_started(
    record: dict[str, Any], out: Path, log: Callable[[str], None], previous: str | None
) -> dict[str, Any]:
    """``run.json`` as the run starts ("running", who, the configuration: ``record``), written."""
    run_info: dict[str, Any] = {
        "status": "running",
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": _jsonable(record),
    }
    if previous is not None:
        log(previous)
        run_info["previous_run"] = previous
    _write_json(out / "run.json", run_info)
    return run_info


def _run_stopped(
    exc: BaseException,
    run_info: dict[str, Any],
    timings: dict[str, float],
    generation: Generation | None,
    kept: str,
    out: Path,
    log: Callable[[str], None],
) -> None:
    """``run.json`` and the log on the way out of an interrupted or failed run (e.g. the
    Chroma server went away), saying what is kept (``kept``: of the answers)."""
    answers = generation.counts() if generation is not None else None
    if isinstance(exc, KeyboardInterrupt):
        run_info.update(status="interrupted", timings=timings, answers=answers)
        _record_end(out, run_info, log)
        log(f"interrupted: {_records_kept(out)}{kept}")
    elif isinstance(exc, Exception):
        run_info.update(status="failed", error=f"{type(exc).__name__}: {exc}", timings=timings)
        run_info["answers"] = answers
        _record_end(out, run_info, log)
        log(f"failed: {_records_kept(out)}{kept}")


def _log_generation(generation: Generation, log: Callable[[str], None]) -> None:
    if generation.llm is not None:
        log("[generation] inside the trials phase (one retrieve-then-generate run per trial)")
        if generation.paying:
            log(f"answers: {generation.line()}")
    else:
        log(f"generation skipped: {generation.note}")


def _previous_run(out: Path, previous: dict[str, Any] | None) -> str | None:
    """What to say about the previous run in ``out`` (its ``run.json``) if it never recorded
    its end.

    Read with the folder's lock held, so a ``run.json`` still saying "running" belongs to a
    process that is gone: it crashed (a native library's segfault, the out-of-memory killer) or
    was killed before it could record anything.
    """
    if previous is None or previous.get("status") != "running":
        return None
    who = f"pid {previous.get('pid', '?')}, started {previous.get('started', '?')}"
    return (
        f"the previous study in {out} ({who}) stopped while running without recording why: it "
        "crashed (e.g. a segfault in a native library) or was killed. Its partial outputs are "
        "replaced by this run"
    )


def _records_kept(out: Path) -> str:
    """What the failure message says of ``records.jsonl``: kept if it was written at all."""
    path = out / "records.jsonl"
    if path.is_file() and path.stat().st_size > 0:
        return f"the records written so far stay in {path}"
    return "no record was written"


def _record_end(out: Path, run_info: dict[str, Any], log: Callable[[str], None]) -> None:
    """Write ``run.json`` on the way out of a failed or interrupted run, without masking the
    error that ended it: a ``run.json`` that cannot be written (a full disk) is logged."""
    try:
        _write_json(out / "run.json", run_info)
    except OSError as exc:
        log(f"{out / 'run.json'} could not record the run's end ({exc})")


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    """Replace ``path`` atomically (written beside, renamed); no temporary file is left.

    On a full disk, an existing file is overwritten in place instead: the blocks it holds are
    reused, so a run's ``run.json`` can still say "failed" when the disk filled during the run.
    """
    text = json.dumps(payload, indent=2, default=str)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno not in DISK_FULL or not path.is_file():
            raise
        with open(path, "r+", encoding="utf-8") as handle:
            handle.write(text)
            handle.truncate()


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def phase_timer(
    timings: dict[str, float], log: Callable[[str], None]
) -> Callable[[str], AbstractContextManager[None]]:
    """``with phase("trials"):`` times a phase into ``timings[name]`` and logs it."""

    @contextmanager
    def phase(name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            timings[name] = time.perf_counter() - start
            log(f"[{name}] {timings[name]:.1f} s")

    return phase

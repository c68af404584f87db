"""Processes serving amortized rankings against a shared ledger, for the multi-process tests.

A worker (:func:`serve`) ranks one fixed pool ``count`` times with
``make_ranker("amortized", ledger=..., ledger_key=..., seed=...)`` and, after each ranking is
returned (so after its ledger update committed), appends the exposure it served,
``{encoded label: exposure}``, as one JSON line to its report, written unbuffered: a process
killed at any instant has reported every ranking it served but at most the last one.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import signal
import time
from multiprocessing.process import BaseProcess
from pathlib import Path

import numpy as np

from fairrag_core import make_ranker, position_weights
from fairrag_core.ledger import encode_label

K = 5
GROUPS = ["female", "male", None, 3, "male", "female", "male", "male", None, "female", "male", 3]
"""The pool's labels: a string protected group, another string, the unknown group, an int."""


def pool() -> tuple[np.ndarray, list]:
    """The fixed pool every worker ranks (scores decreasing, protected ones lower on average)."""
    scores = np.linspace(0.9, 0.3, len(GROUPS))
    return scores, list(GROUPS)


def served_exposure(ranking: list[int], groups: list) -> dict[str, float]:
    """``{encoded label: exposure}`` of one served ranking."""
    weights = position_weights(len(ranking))
    out: dict[str, float] = {}
    for position, index in enumerate(ranking):
        label = encode_label(groups[index])
        out[label] = out.get(label, 0.0) + float(weights[position])
    return out


WORKER_DEADLINE = 120.0
"""Seconds the workers may run before the test gives up on them (they are then killed)."""
# Workers are forked from a fork server that imported this module (and so fairrag_core) once:
# a process each, without paying the import (about 1.5 s of CPU) eight times. The server is a
# fresh single-threaded process, so forking it is safe, unlike forking pytest.
CONTEXT = multiprocessing.get_context("forkserver")
CONTEXT.set_forkserver_preload([__name__])


def start_worker(ledger: str, key: str, count: int, seed: int, report: Path) -> BaseProcess:
    """A worker process running :func:`serve`."""
    worker = CONTEXT.Process(target=serve, args=(ledger, key, count, seed, str(report)))
    worker.start()
    return worker


def wait_all(workers: list[BaseProcess], deadline: float = WORKER_DEADLINE) -> None:
    """Wait for every worker; each must exit 0 (its traceback is on the captured stderr)."""
    end = time.monotonic() + deadline
    try:
        for worker in workers:
            worker.join(max(0.1, end - time.monotonic()))
            assert worker.exitcode == 0, f"worker {worker.pid} exited with {worker.exitcode}"
    finally:
        for worker in workers:
            if worker.exitcode is None:
                worker.kill()
                worker.join()


def kill_after(worker: BaseProcess, report: Path, rankings: int, deadline: float) -> None:
    """SIGKILL ``worker`` once ``report`` holds ``rankings`` lines (or fail after deadline)."""
    end = time.monotonic() + deadline
    try:
        while time.monotonic() < end and worker.is_alive():
            if report.exists() and report.read_bytes().count(b"\n") >= rankings:
                break
            time.sleep(0.01)
        assert worker.is_alive(), "the worker ended before it could be killed"
        assert report.read_bytes().count(b"\n") >= rankings, "the worker served too few"
    finally:
        if worker.is_alive():
            worker.kill()  # SIGKILL
        worker.join()
    assert worker.exitcode == -signal.SIGKILL


def read_reports(*reports: Path) -> list[dict[str, float]]:
    """Every complete line of the reports: one ``{encoded label: exposure}`` per ranking."""
    served: list[dict[str, float]] = []
    for report in reports:
        text = report.read_text() if report.exists() else ""
        lines = text.split("\n")[:-1]  # a last line without its newline is not complete
        served.extend(json.loads(line) for line in lines)
    return served


def summed(served: list[dict[str, float]]) -> dict:
    """``{label: total exposure}`` (labels decoded) over served rankings."""
    from fairrag_core.ledger import decode_label

    parts: dict[str, list[float]] = {}
    for ranking in served:
        for label, value in ranking.items():
            parts.setdefault(label, []).append(value)
    return {decode_label(label): math.fsum(values) for label, values in parts.items()}


def serve(ledger: str, key: str, count: int, seed: int, report_path: str) -> None:
    """Rank the pool ``count`` times, reporting each served ranking once it is returned."""
    ranker = make_ranker("amortized", protected="female", ledger=ledger, ledger_key=key, seed=seed)
    scores, groups = pool()
    report = os.open(report_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for _ in range(count):
            ranking = ranker.rank(scores, groups, K).tolist()
            line = json.dumps(served_exposure(ranking, groups)) + "\n"
            os.write(report, line.encode())  # one write(2) per ranking, no user-space buffer
    finally:
        os.close(report)

"""``fairrag study --concurrency N`` against a server that takes 400 ms per answer.

Run: ``.venv/bin/python benchmarks/bench_concurrency.py [--answers 480] [--concurrency 16]
[--delay 0.4] [--no-sequential]``. A loopback OpenAI-protocol stub (tests/study/openai_stub.py)
answers every request after ``--delay`` seconds; the study runs the six rankers over
``answers / 6`` trials (so ``--answers`` answers, each paid: the answer store off),
once with ``--concurrency`` and once sequentially. Printed: each run's wall time of the trials
phase (and of its answering part, after the question embeddings), the floor ``answers x delay
/ concurrency``, the ratio to it (goal <= 1.3x, docs/SPEC.md
"The study" -> Concurrency), and whether the records equal the sequential run's field by field
(leaving out timestamps and LangChain's run ids). The sequential run takes ``answers x delay``
(192 s for 480): reduce it with ``--answers``.

Needs the TREC data (``FAIRRAG_DATA``) and the packaged embedding model; the small index is
built once in ``--cache-dir`` (default: a folder in the temp dir).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the test helpers (tests/study/openai_stub.py)

from fairrag_core import available_rankers  # noqa: E402

VOLATILE = ("timestamp", "run_id", "framework")
RANKERS = tuple(available_rankers())  # six today: 80 trials x 6 = 480 answers


def _run(
    folder: Path, url: str, trials: int, concurrency: int, cache: Path
) -> tuple[Any, float, float]:
    """The records, the trials phase's seconds, and the answers' seconds (the study's log
    line ``N answers in S s``: the trials after the question embeddings and setup)."""
    from fairrag_study.study import StudyConfig, run_study

    config = StudyConfig(
        per_group=4,
        trials=trials,
        rankers=RANKERS,
        llm="openai:gpt-4o-mini",
        base_url=url,
        llm_retries=0,
        concurrency=concurrency,
        out=folder / "out",
        cache_dir=cache,
        answer_cache=False,  # every answer paid: two rankers' equal prompts are asked twice
        progress=False,
        samples=2,
    )
    said: list[str] = []
    result = run_study(config, log=said.append)
    line = next(line for line in said if " answers in " in line)
    answering = float(line.split(" answers in ")[1].split(" s ")[0])
    return result.records, result.timings["trials"], answering


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=480)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--delay", type=float, default=0.4, help="seconds per answer")
    parser.add_argument("--no-sequential", action="store_true")
    parser.add_argument(
        "--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "fairrag-bench-concurrency"
    )
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "sk-stub-key")
    from tests.study.openai_stub import OpenAIStub

    trials = math.ceil(args.answers / len(RANKERS))
    answers = trials * len(RANKERS)
    floor = answers * args.delay / args.concurrency
    with (
        tempfile.TemporaryDirectory() as tmp,
        OpenAIStub(on_request=lambda _: time.sleep(args.delay)) as stub,
    ):
        _run(Path(tmp) / "warm", stub.url, 1, 1, args.cache_dir)  # the index, built once
        asked = len(stub.requests)
        records, seconds, answering = _run(
            Path(tmp) / "par", stub.url, trials, args.concurrency, args.cache_dir
        )
        asked = len(stub.requests) - asked
        print(
            f"{answers} answers ({trials} trials x {len(RANKERS)} rankers; {asked} requests), "
            f"{args.delay:g} s "
            f"each, --concurrency {args.concurrency}: trials phase {seconds:.1f} s; floor "
            f"{floor:.1f} s; ratio {seconds / floor:.2f}x (goal <= 1.3x); answering alone "
            f"(the log's line) {answering:.1f} s, ratio {answering / floor:.2f}x, "
            f"{answers / answering:.1f} answers/s"
        )
        if args.no_sequential:
            return
        sequential, slow, _ = _run(Path(tmp) / "seq", stub.url, trials, 1, args.cache_dir)
    same = [{k: v for k, v in r.items() if k not in VOLATILE} for r in records] == [
        {k: v for k, v in r.items() if k not in VOLATILE} for r in sequential
    ]
    print(
        f"sequential: trials phase {slow:.1f} s ({answers / slow:.2f} answers/s); speed-up "
        f"{slow / seconds:.1f}x; records equal to the sequential run's: {same}"
    )


if __name__ == "__main__":
    main()

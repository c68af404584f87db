"""Scale: `fairrag audit` on a 1,000,000-record fairness log. A benchmark (it prints figures), not
a test.

Run: ``.venv/bin/python benchmarks/bench_audit.py [--records 1000000] [--gzip] [--keep DIR]``.

It writes a JSON-lines log shaped like the handlers' (docs/SPEC.md "Records": timestamp,
source, ranker, target, protected, exposure model, groups, titles, citations, answer,
generation metrics, the attribution's fields and metrics, a tenant in ``metadata``; one answer
in three cites context entry numbers, so that its paper's generation parity is null and its
attributed one measured), spread over 7 days with three rankers and four tenants, one damaged
line per 10,000 (truncated JSON), and a drift: from day 6 on, one tenant's
representative_stochastic shows fewer women. Then it runs
``fairrag audit LOG --out DIR --by tenant --window 1d --max-disparity 0.05`` in a child
process, so that the peak resident memory measured (``ru_maxrss`` of the child) is the audit's
alone, and prints: the log's size, the audit's wall time, CPU time and peak RSS (with the load
average: on a shared machine the wall time depends on it), and the damaged lines the audit
counted (the exit status is 1 when that count is not the number written).

Beside it, in the same run and the same way (a child process, its own wall, CPU and peak RSS),
the floor: DuckDB alone reading the same log once (``read_json``, newline-delimited, 1 GB memory
limit, damaged lines ignored) into the audit's per-ranker aggregates (count, mean and standard
deviation of the exposure share and every generation field of ``fairrag_core.audit``, per
ranker, tenant and day), with no checks, no line numbers and no report; then the audit's ratios
to it (wall and CPU time). ``--repeats N`` alternates floor and audit N times and prints each
run and the ratios' range (the spread).

A third child, also alternated, reads the log as the audit's scan does and does nothing else:
``read_json`` of one struct holding every field the audit reads (``fairrag_audit.scan``'s
``KNOWN_FIELDS``, ``metadata`` for ``--by tenant``, and the sieve's refusal field), each as
JSON, each field counted; no checks, no aggregates, no sieve. It is the least any audit that
checks what the SPEC asks of those fields pays to parse them with DuckDB; its ratio to the
floor is printed beside the audit's (issue 37 asks the audit for 2x the floor).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RANKERS = ("standard", "forced_exposure", "representative_stochastic")
TENANTS = ("acme", "globex", "initech", "umbrella")
PROTECTED_PROBABILITY = {"standard": 0.25, "forced_exposure": 0.4, "representative_stochastic": 0.5}
DRIFTED_PROBABILITY = {**PROTECTED_PROBABILITY, "representative_stochastic": 0.4}
"""From day 6 on, tenant umbrella's representative_stochastic shows fewer women: a drift."""
DRIFT_TENANT = "umbrella"
DAMAGED_EVERY = 10_000
K = 5
WEIGHTS = 1.0 / np.log2(np.arange(2, K + 2))


def record_templates(
    count: int, seed: int, probability: dict[str, float] = PROTECTED_PROBABILITY
) -> list[tuple[str, str]]:
    """``count`` distinct records as (ranker, JSON text without timestamp, run id and tenant)."""
    rng = np.random.default_rng(seed)
    templates = []
    for index in range(count):
        ranker = RANKERS[index % len(RANKERS)]
        female = rng.random(K) < probability[ranker]
        groups = ["female" if f else "male" for f in female]
        titles = [f"Person {index}-{i} (scientist)" for i in range(K)]
        share = float(WEIGHTS[female].sum() / WEIGHTS.sum())
        cited = [i for i in range(K) if rng.random() < 0.8]
        valid_female = sum(female[i] for i in cited)
        parity = valid_female / len(cited) if cited else math.nan
        # one answer in three cites context entry numbers, not the paper's format
        numbered = (index // len(RANKERS)) % 3 == 2
        if numbered:
            answer = "\n".join(f"- Person {index}-{i} [{i + 1}]" for i in cited)
        else:
            answer = "\n".join(f"- Person {index}-{i} (DocTitle: {titles[i]})" for i in cited)
        style = "numbered" if numbered else "doctitle"
        record = {
            "schema": 2,
            "source": "langchain" if index % 2 else "llamaindex",
            "query": f"Who are some notable role models in the field of topic {index % 48}?",
            "ranker": ranker,
            "query_seed": int(rng.integers(2**31)),
            "target": {"female": 0.5, "OTHERS": 0.5},
            "protected": "female",
            "exposure_model": "dcg",
            "k": K,
            "pool_size": 50,
            "doc_ids": [f"doc-{index}-{i}" for i in range(K)],
            "titles": titles,
            "groups": groups,
            "exposure_share": share,
            "exposure_disparity": abs(share - 0.5),
            "exposure_by_group": {"female": share, "male": 1.0 - share},
            "model": "gpt-4o-mini",
            "tags": ["prod"],
            "answer": answer,
            "follows_citation_format": not numbered and bool(cited),
            "n_bullets": len(cited),
            "citations": [
                {
                    "person": f"Person {index}-{i}",
                    "title": titles[i],
                    "valid": True,
                    "names_person": True,
                    "group": groups[i],
                }
                for i in cited
            ]
            if not numbered
            else [],
            "generation_parity": parity,
            "grounded_generation_parity": parity,
            "fairness_gap": parity - share,
            "fairness_gap_magnitude": abs(parity - 0.5) - abs(share - 0.5),
            "groundedness": 1.0 if cited and not numbered else 0.0,
            # docs/SPEC.md "Attribution": the styles found and every attribution
            "citation_styles": [style] if cited else [],
            "attributed_sources": [
                {
                    "line_number": line,
                    "person": f"Person {index}-{i}",
                    "title": titles[i],
                    "style": style,
                    "names_person": True,
                    "group": groups[i],
                }
                for line, i in enumerate(cited, start=1)
            ],
            "n_attribution_bullets": len(cited),
            "n_attributed_bullets": len(cited),
            "attributed_generation_parity": parity,
            "attributed_fairness_gap": parity - share,
            "attributed_groundedness": 1.0 if cited else 0.0,
        }
        paper = ("generation_parity", "grounded_generation_parity", "fairness_gap")
        if numbered or not cited:  # NaN parity is written as null, as the handlers do
            for name in (*paper, "fairness_gap_magnitude"):
                record[name] = None
        if not cited:
            record["attributed_generation_parity"] = record["attributed_fairness_gap"] = None
        text = json.dumps(record, allow_nan=False)
        templates.append((ranker, text[1:]))  # without the opening brace
    return templates


def write_log(path: Path, records: int, seed: int = 0) -> int:
    """Write ``records`` lines (one damaged per DAMAGED_EVERY); returns the damaged count."""
    templates = record_templates(997, seed)
    drifted = record_templates(997, seed + 1, DRIFTED_PROBABILITY)
    drift_from = records * 5 // 7
    start = datetime(2026, 11, 24, tzinfo=timezone.utc)
    step = timedelta(days=7) / records
    damaged = 0
    if path.suffix == ".gz":  # level 6, the gzip command's default (Python's 9 is slow)
        handle = gzip.open(path, "wt", encoding="utf-8", compresslevel=6)
    else:
        handle = open(path, "w", encoding="utf-8")
    with handle:
        chunk = []
        for index in range(records):
            tenant = TENANTS[(index // 7) % len(TENANTS)]
            drifting = index >= drift_from and tenant == DRIFT_TENANT
            _ranker, body = (drifted if drifting else templates)[index % len(templates)]
            stamp = (start + step * index).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            line = (
                f'{{"timestamp": "{stamp}", "run_id": "run-{index}", '
                f'"metadata": {{"tenant": "{tenant}"}}, {body}'
            )
            if index % DAMAGED_EVERY == DAMAGED_EVERY - 1:
                line = line[: len(line) // 2]  # a torn write
                damaged += 1
            chunk.append(line)
            if len(chunk) == 10_000:
                handle.write("\n".join(chunk) + "\n")
                chunk = []
        if chunk:
            handle.write("\n".join(chunk) + "\n")
    return damaged


def floor(log: Path) -> None:
    """The plain-DuckDB floor (run in a child process by :func:`main`): one read of the log
    into the audit's per-ranker aggregates, nothing else."""
    import duckdb

    from fairrag_core.audit import GENERATION_FIELDS

    con = duckdb.connect(":memory:")
    con.execute("SET memory_limit = '1GB'")
    metrics = ("exposure_share", *GENERATION_FIELDS)
    columns = {
        "timestamp": "VARCHAR",
        "ranker": "VARCHAR",
        "metadata": "JSON",
        **{name: "DOUBLE" for name in metrics},
    }
    aggregates = ", ".join(f"count({m}), avg({m}), stddev_samp({m})" for m in metrics)
    rows = con.execute(f"""
        SELECT ranker, json_extract_string(metadata, '$.tenant') AS tenant,
            date_trunc('day', TRY_CAST("timestamp" AS TIMESTAMPTZ)) AS day, count(*), {aggregates}
        FROM read_json('{log}', format = 'newline_delimited', ignore_errors = true,
            columns = {columns!r})
        GROUP BY ALL
    """).fetchall()
    print(f"{len(rows)} cells")


def read_fields(log: Path) -> None:
    """The audit's own fields read and nothing else (run in a child process by :func:`main`):
    one struct of every field the audit's scan reads, each as JSON, each counted."""
    import duckdb

    from fairrag_audit.scan import KNOWN_FIELDS, REFUSED_FIELD

    def quoted(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    fields = (*KNOWN_FIELDS, "metadata", REFUSED_FIELD)
    struct = "STRUCT(" + ", ".join(f"{quoted(f)} JSON" for f in fields) + ")"
    con = duckdb.connect(":memory:")
    con.execute("SET memory_limit = '1GB'")
    counts = ", ".join(f"count(r.{quoted(f)})" for f in fields)
    row = con.execute(f"""
        SELECT count(*), {counts}
        FROM read_json('{log}', format = 'newline_delimited', ignore_errors = true,
            records = false, columns = {{'r': '{struct}'}})
    """).fetchone()
    print(f"{len(fields)} fields, {row[0] if row else 0} lines")


def _measured(command: list[str], env: dict[str, str]) -> tuple[float, float, float, str]:
    """Run ``command``; its wall seconds, CPU seconds (all threads), peak RSS (GiB), stdout."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own usage, not all children's
        elapsed = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text = out.read()
        if child.returncode != 0:
            raise RuntimeError(f"{command[2:5]} failed ({child.returncode}):\n{text}{err.read()}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 2**20, text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="lines in the log")
    parser.add_argument("--gzip", action="store_true", help="write and audit LOG.jsonl.gz")
    parser.add_argument("--keep", type=Path, help="write log and report here (else a temp dir)")
    parser.add_argument("--repeats", type=int, default=1, help="floor and audit runs, alternated")
    parser.add_argument(
        "--reuse", action="store_true", help="audit the log --keep holds (same --records)"
    )
    parser.add_argument("--floor", type=Path, help=argparse.SUPPRESS)  # the floor's child
    parser.add_argument("--read-fields", type=Path, help=argparse.SUPPRESS)  # the third child
    args = parser.parse_args(argv)
    if args.floor is not None:
        floor(args.floor)
        return 0
    if args.read_fields is not None:
        read_fields(args.read_fields)
        return 0
    if args.records < 1:
        parser.error(f"--records must be >= 1, got {args.records}")
    # absolute: the children run from the repository's root (an operator's trial: a relative
    # --keep failed in the floor's child after the whole log was written)
    folder = (args.keep or Path(tempfile.mkdtemp(prefix="bench-audit-"))).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / ("log.jsonl.gz" if args.gzip else "log.jsonl")
    if args.reuse and log.is_file():  # written by an earlier run with the same --records
        damaged = args.records // DAMAGED_EVERY
    else:
        start = time.perf_counter()
        damaged = write_log(log, args.records)
        print(f"written in {time.perf_counter() - start:.1f} s")
    size = log.stat().st_size
    print(f"log: {log} ({args.records:,} lines, {damaged} damaged, {size / 2**20:,.0f} MiB)")
    command = [
        sys.executable,
        "-m",
        "fairrag_study.cli",
        "audit",
        str(log),
        "--out",
        str(folder / "report"),
        "--by",
        "tenant",
        "--window",
        "1d",
        "--max-disparity",
        "0.05",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    floor_command = [sys.executable, str(Path(__file__).resolve()), "--floor", str(log)]
    fields_command = [sys.executable, str(Path(__file__).resolve()), "--read-fields", str(log)]
    counted = None
    rows = []
    for _ in range(args.repeats):
        floor_run = _measured(floor_command, env)
        fields_run = _measured(fields_command, env)
        audit_run = _measured(command, env)
        rows.append((floor_run, fields_run, audit_run))
        summary = json.loads((folder / "report" / "summary.json").read_text(encoding="utf-8"))
        counted = summary["reading"]["damaged_lines"]
    print(audit_run[3].strip())
    load = os.getloadavg()[0]
    print(
        f"{args.records:,} records, {size / 2**20:,.0f} MiB; {os.cpu_count()} cores, load "
        f"average {load:.1f} at the end; wall s / CPU s (all threads) / peak RSS GiB"
    )
    print(
        f"{'run':>4}  {'DuckDB floor':>22}  {'its fields, read only':>22}  "
        f"{'fairrag audit':>22}  {'wall ratio':>10}  {'CPU ratio':>9}  {'fields CPU ratio':>16}"
    )
    walls, cpus, reads = [], [], []
    for index, (floor_run, fields_run, audit_run) in enumerate(rows, start=1):
        cells = [
            f"{r[0]:6.1f} / {r[1]:6.1f} / {r[2]:4.2f}" for r in (floor_run, fields_run, audit_run)
        ]
        walls.append(audit_run[0] / floor_run[0])
        cpus.append(audit_run[1] / floor_run[1])
        reads.append(fields_run[1] / floor_run[1])
        print(
            f"{index:>4}  {cells[0]:>22}  {cells[1]:>22}  {cells[2]:>22}  {walls[-1]:>9.2f}x  "
            f"{cpus[-1]:>8.2f}x  {reads[-1]:>15.2f}x"
        )
    if len(rows) > 1:  # the spread of the ratios over the runs
        print(
            f"ratio to the floor over {len(rows)} runs: wall {min(walls):.2f}-{max(walls):.2f}x, "
            f"CPU {min(cpus):.2f}-{max(cpus):.2f}x; the audit's fields read alone: CPU "
            f"{min(reads):.2f}-{max(reads):.2f}x"
        )
    print(f"damaged lines counted: {counted} (written: {damaged})")
    return 0 if counted == damaged else 1


if __name__ == "__main__":
    sys.exit(main())

"""``fairrag audit``: the fairness logs of a running application as a report people read."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["add_audit_command", "run_audit_command"]

DESCRIPTION = (
    "Audit JSON-lines fairness logs (FairnessCallbackHandler, FairnessEventHandler, the study's "
    "records.jsonl; .gz too): exposure share, amortized disparity, generation parity, "
    "groundedness and fairness gap (the paper's, of (DocTitle: X) citations, and the "
    "attributed ones, of any citation style) per ranker, field and time window, with "
    "confidence intervals; what the answers cited and why a metric is n/a; rankers compared; "
    "drift out of a band. Writes report.md, report.html, figures and CSV tables to --out."
)


def add_audit_command(commands: Any) -> argparse.ArgumentParser:
    """Register ``audit`` on the ``fairrag`` subparsers; its handler is ``args.handler``."""
    audit = commands.add_parser("audit", help="report on fairness logs", description=DESCRIPTION)
    audit.add_argument(
        "logs",
        nargs="+",
        type=Path,
        metavar="LOG",
        help="JSON-lines log(s), Parquet files or folders",
    )
    audit.add_argument("--out", type=Path, required=True, help="folder for the report")
    audit.add_argument(
        "--by",
        action="append",
        default=[],
        metavar="FIELD",
        help="also split by this record field (top level, else in metadata); repeat it or "
        "give several separated by commas",
    )
    audit.add_argument("--since", help="ISO 8601 time (UTC unless it says) or a duration: 7d")
    audit.add_argument("--window", help="time windows of this length: 30m, 1h, 1d, 1w")
    audit.add_argument(
        "--max-disparity", type=float, help="band for the amortized disparity, e.g. 0.05"
    )
    audit.add_argument("--protected", help="protected group of records that name none")
    audit.add_argument(
        "--target-share", type=float, help="its target share (default 0.5, with --protected)"
    )
    audit.add_argument(
        "--exposure", default="dcg", help="exposure model of records that name none (dcg)"
    )
    audit.add_argument("--confidence", type=float, default=0.95, help="interval level (0.95)")
    audit.add_argument("--alpha", type=float, default=0.01, help="t-test level (0.01)")
    audit.add_argument(
        "--fit-exposure",
        type=Path,
        metavar="FILE",
        help="also fit the generator's position curve from the answered records and write it "
        "to FILE (use as exposure='fitted:FILE')",
    )
    audit.add_argument(
        "--to-parquet",
        action="store_true",
        help="instead of a report, convert each JSON-lines LOG once to OUT/<name>.parquet "
        "(the record schema; audit those files or their folder later)",
    )
    audit.set_defaults(handler=run_audit_command)
    return audit


def run_audit_command(args: argparse.Namespace) -> int:
    """Run the audit the parsed ``args`` ask for; 0 on success, 2 on bad input."""
    import duckdb

    from .analysis import audit
    from .report import check_out, write_report

    start = time.perf_counter()
    if args.to_parquet:
        return _convert(args, start)
    try:
        check_out(args.out, args.logs)  # before any work: a file, or a folder holding a log
        result = audit(
            [str(p) for p in args.logs],
            by=[field.strip() for value in args.by for field in value.split(",")],
            since=args.since,
            window=args.window,
            max_disparity=args.max_disparity,
            protected=args.protected,
            target_share=args.target_share,
            exposure=args.exposure,
            confidence=args.confidence,
            alpha=args.alpha,
        )
        written = write_report(result, args.out)
    except ValueError as exc:
        print(f"fairrag audit: error: {exc}", file=sys.stderr)
        return 2
    except (OSError, duckdb.Error) as exc:  # a log that cannot be read, a full disk
        print(f"fairrag audit: error reading or writing: {exc}", file=sys.stderr)
        return 1
    reading = result.reading
    print(
        f"{int(reading['lines'].sum()):,} lines, {int(reading['damaged'].sum()):,} damaged, "
        f"{int(reading['used'].sum()):,} records audited; {len(result.drift)} windows out of band"
    )
    for note in result.notes:
        print(f"note: {note}")
    for line in result.generation_why:
        print(f"generation: {line}")
    print(f"report: {written['report.md']} and {written['report.html']}")
    if args.fit_exposure is not None:
        from .exposure_fit import fit_exposure_from_logs

        try:
            curve = fit_exposure_from_logs(args.logs, args.fit_exposure)
        except ValueError as exc:
            print(f"fairrag audit: error: {exc}", file=sys.stderr)
            return 2
        weights = ", ".join(f"{w:.3f}" for w in curve.weights)
        print(f"fitted exposure [{weights}] -> {args.fit_exposure}")
    print(f"done in {time.perf_counter() - start:.1f} s")
    if not int(reading["records"].sum()):
        print(
            f"fairrag audit: error: no record to audit in {len(reading)} log(s): "
            f"{int(reading['lines'].sum()):,} lines, {int(reading['damaged'].sum()):,} not JSON, "
            f"{int(reading['not_records'].sum()):,} not records, "
            f"{int(reading['refused'].sum() + reading['future'].sum()):,} refused "
            f"(each listed by line in {written['report.md']})",
            file=sys.stderr,
        )
        return 2
    return 0


def _convert(args: argparse.Namespace, start: float) -> int:
    """``--to-parquet``: each log to ``OUT/<name>.parquet``; 0, or 2 on bad input."""
    import duckdb

    from .options import AuditOptions
    from .scan import is_parquet, to_parquet

    try:
        options = AuditOptions.create(args.logs, by=[f for v in args.by for f in v.split(",")])
        if args.out.exists() and not args.out.is_dir():
            raise ValueError(f"--out {str(args.out)!r} is a file; give a folder")
        targets: dict[str, Path] = {}
        for path in options.paths:  # every name checked before anything is written
            if is_parquet(path):
                raise ValueError(f"log {str(path)!r} is already Parquet")
            name = path.name.removesuffix(".gz").removesuffix(".jsonl") + ".parquet"
            if name in targets:
                raise ValueError(
                    f"logs {str(targets[name])!r} and {str(path)!r} would both be written to "
                    f"{str(args.out / name)!r}; convert them into different --out folders"
                )
            targets[name] = path
        args.out.mkdir(parents=True, exist_ok=True)
        for name, path in targets.items():
            rows = to_parquet(path, args.out / name, ("metadata", *options.by))
            print(f"{path} -> {args.out / name}: {rows:,} rows")
    except ValueError as exc:
        print(f"fairrag audit: error: {exc}", file=sys.stderr)
        return 2
    except (OSError, duckdb.Error) as exc:
        print(f"fairrag audit: error reading or writing: {exc}", file=sys.stderr)
        return 1
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m fairrag_audit.cli`` (the same as ``fairrag audit``)."""
    parser = argparse.ArgumentParser(prog="fairrag")
    add_audit_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())

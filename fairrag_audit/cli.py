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


COMMAND_FLAGS: dict[str, dict[str, Any]] = {
    "--out": {"type": Path, "help": "folder for the report"},
    "--partials-out": {
        "type": Path,
        "metavar": "DIR",
        "help": "save this window's partial aggregates (counts and sums) to DIR, to merge "
        "later with --from-partials; with --out, also write the report",
    },
    "--from-partials": {
        "nargs": "+",
        "type": Path,
        "default": [],
        "metavar": "DIR",
        "help": "report on the merged partials saved by earlier runs (--partials-out) instead "
        "of reading logs: the report of one run over all their logs",
    },
    "--fit-exposure": {
        "type": Path,
        "metavar": "FILE",
        "help": "also fit the generator's position curve from the answered records and write it "
        "to FILE (use as exposure='fitted:FILE')",
    },
    "--fail-on-drift": {
        "action": "store_true",
        "help": "exit 3 when a window's amortized disparity leaves [0, --max-disparity] (the "
        "report is written first): for a cron job or a CI gate",
    },
    "--to-parquet": {
        "action": "store_true",
        "help": "instead of a report, convert each JSON-lines LOG once to OUT/<name>.parquet "
        "(the record schema; audit those files or their folder later)",
    },
}
"""What the command does with the audit (where the report and partials go), beside the
settings of :class:`fairrag_audit.options.AuditOptions`."""

REPORT_SETTINGS = ("max_disparity", "confidence", "alpha")
"""Settings of the report, not of the sums: the only ones --from-partials takes."""


def add_audit_command(commands: Any) -> argparse.ArgumentParser:
    """Register ``audit`` on the ``fairrag`` subparsers; its handler is ``args.handler``.

    Its flags are the fields of :class:`~fairrag_audit.options.AuditOptions` (help from each
    field's description), given only when the user gives them: the model checks and converts
    every value once (:func:`run_audit_command`)."""
    from .options import AuditOptions, flag_of

    audit = commands.add_parser("audit", help="report on fairness logs", description=DESCRIPTION)
    for name, field in AuditOptions.model_fields.items():
        extra = dict(field.json_schema_extra or {})  # type: ignore[arg-type]
        if extra.pop("cli", True) is False:
            continue
        if name == "paths":
            audit.add_argument("logs", nargs="*", type=Path, metavar="LOG", help=field.description)
            continue
        audit.add_argument(
            flag_of(name), dest=name, default=argparse.SUPPRESS, help=field.description, **extra
        )
    for flag, settings in COMMAND_FLAGS.items():
        audit.add_argument(flag, **settings)
    audit.set_defaults(handler=run_audit_command)
    return audit


def run_audit_command(args: argparse.Namespace) -> int:
    """Run the audit the parsed ``args`` ask for; 0 on success, 2 on bad input, 3 when
    ``--fail-on-drift`` found windows out of band."""
    import duckdb

    start = time.perf_counter()
    try:
        if args.to_parquet:
            _convert(args)
            code = 0
        else:
            code = _report(args)
    except ValueError as exc:
        print(f"fairrag audit: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # stdout's reader stopped: not the logs' nor the disk's fault
        raise
    except (OSError, duckdb.Error) as exc:  # a log that cannot be read, a full disk
        print(f"fairrag audit: error reading or writing: {exc}", file=sys.stderr)
        return 1
    print(f"done in {time.perf_counter() - start:.1f} s")
    return code


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the user gave (flags of :class:`AuditOptions` fields), as typed."""
    from .options import AuditOptions

    return {name: getattr(args, name) for name in AuditOptions.model_fields if hasattr(args, name)}


def _report(args: argparse.Namespace) -> int:
    """Audit the logs (or merge saved partials) and write the report and/or the partials."""
    from .analysis import AuditResult, audit_partials, report_of
    from .options import AuditOptions
    from .partials import compute_partials, write_partials
    from .report import check_out, write_report

    settings = _settings(args)
    _check_sources(args, settings)
    if args.out is not None:  # before any work: a file, or a folder holding a log
        check_out(args.out, args.logs)
    result: AuditResult
    if args.from_partials:
        result = audit_partials(args.from_partials, **settings)
    else:
        options = AuditOptions.create(args.logs, **settings)
        answered: dict[int, set[int]] | None = {} if args.fit_exposure is not None else None
        partials = compute_partials(options, answered_lines=answered)
        if args.partials_out is not None:
            saved = write_partials(partials, args.partials_out)
            print(f"partials: {saved} ({len(partials.cells):,} cells, {len(partials.files)} logs)")
        if args.out is None:  # partials only
            code = _no_record(partials.files, "in the partials' left_out table")
            return _fit(args, options, answered) or code
        result = report_of(partials, options)
    written = write_report(result, args.out)
    code = _summary(result, written)
    if code == 0 and args.fail_on_drift and len(result.drift):
        print(f"--fail-on-drift: {len(result.drift)} windows out of band: exit 3", file=sys.stderr)
        code = 3
    if args.fit_exposure is not None:
        return _fit(args, options, answered) or code
    return code


def _fit(args: argparse.Namespace, options: Any, answered: dict[int, set[int]] | None) -> int:
    """Write ``--fit-exposure``'s curve from the answered records the audit counted, only; 2
    when it counted none, else 0 (also 0 without ``--fit-exposure``)."""
    if args.fit_exposure is not None:
        from .exposure_fit import fit_exposure_from_logs

        if not answered:
            print(
                f"--fit-exposure: no record was audited (the audit left out or filtered "
                f"every line): {args.fit_exposure} not written",
                file=sys.stderr,
            )
            return 2
        curve = fit_exposure_from_logs(options.paths, args.fit_exposure, lines=answered)
        weights = ", ".join(f"{w:.3f}" for w in curve.weights)
        print(f"fitted exposure [{weights}] -> {args.fit_exposure}")
    return 0


def _summary(result: Any, written: dict[str, Path]) -> int:
    """Say what the audit read and found; 2 when no log held a record."""
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
    return _no_record(reading, f"in {written['report.md']}")


def _no_record(reading: Any, listed: str) -> int:
    """2, saying why, when no log of the reading table (or the partials' per-file table, which
    holds its columns) held a record; else 0."""
    if int(reading["records"].sum()):
        return 0
    print(
        f"fairrag audit: error: no record to audit in {len(reading)} log(s): "
        f"{int(reading['lines'].sum()):,} lines, {int(reading['damaged'].sum()):,} not JSON, "
        f"{int(reading['not_records'].sum()):,} not records, "
        f"{int(reading['refused'].sum() + reading['future'].sum()):,} refused "
        f"(each listed by line {listed})",
        file=sys.stderr,
    )
    return 2


def _check_sources(args: argparse.Namespace, settings: dict[str, Any]) -> None:
    """Logs or saved partials, not both; where the report or the partials go."""
    from .options import flag_of, is_duration

    if args.logs and args.from_partials:
        raise ValueError("give LOG files or --from-partials, not both")
    if not args.logs and not args.from_partials:
        raise ValueError(
            "give LOG files to audit, or --from-partials DIR... to report on saved partials"
        )
    if args.from_partials:
        fixed = [name for name in settings if name not in REPORT_SETTINGS]
        if fixed:
            raise ValueError(
                f"{flag_of(fixed[0])}: the partials were computed with their own settings "
                "(given when they were written with --partials-out); --from-partials takes "
                "only --out, --max-disparity, --confidence and --alpha"
            )
        if args.partials_out is not None:
            raise ValueError("--partials-out saves the partials of LOG files; give LOG files")
        if args.fit_exposure is not None:
            raise ValueError(
                "--fit-exposure fits the answered records of LOG files; give LOG files"
            )
    if args.out is None and args.partials_out is None:
        raise ValueError("--out: give a folder for the report (or --partials-out DIR)")
    if args.fail_on_drift and (args.out is None or settings.get("max_disparity") is None):
        raise ValueError(
            "--fail-on-drift: drift is the windows whose amortized disparity leaves "
            "[0, --max-disparity], read in the report: give --max-disparity and --out"
        )
    if args.out is None:  # partials only: no report to take the report's settings
        unused = [name for name in settings if name in REPORT_SETTINGS]
        if unused:
            raise ValueError(
                f"{flag_of(unused[0])}: a run with --partials-out and no --out writes no "
                "report; give it to the run that reports (--from-partials DIR... --out DIR), "
                "or add --out"
            )
    if args.partials_out is not None:
        from .partials import check_partials_out

        check_partials_out(Path(args.partials_out))  # before the audit's work
        out = Path(args.partials_out).resolve()
        for log in args.logs or []:
            given = Path(log).resolve()
            # a folder of Parquet logs, or the folder a Parquet log is in (its files given),
            # above the hive partitions (key=value) it sits in
            folder = given if given.is_dir() else given.parent
            while "=" in folder.name and folder.parent != folder:
                folder = folder.parent
            if (given.is_dir() or given.suffix == ".parquet") and (
                out == folder or folder in out.parents
            ):
                raise ValueError(
                    f"--partials-out {str(args.partials_out)!r} is inside {str(folder)!r}, "
                    "which holds Parquet logs: its Parquet tables would be read as logs by the "
                    "next audit of that folder; give a folder outside it"
                )
    since = settings.get("since")
    if args.partials_out is not None and isinstance(since, str) and is_duration(since):
        raise ValueError(
            f"--since {since!r} with --partials-out: a duration counts back from each run's "
            "start, so partials of two runs would never merge; give --since as an ISO 8601 "
            "date or time (2026-12-01)"
        )
    fit = args.fit_exposure
    if fit is not None and (Path(fit).is_dir() or not Path(fit).parent.is_dir()):
        # before the audit's work, not after it
        why = "is a folder" if Path(fit).is_dir() else "is in a folder that does not exist"
        raise ValueError(f"--fit-exposure {str(fit)!r} {why}; give a file path to write")
    if fit is not None:  # the fit reads JSON lines: said before the audit, not after it
        from .exposure_fit import PARQUET
        from .scan import is_parquet

        parquet = next(
            (log for log in args.logs or [] if Path(log).exists() and is_parquet(Path(log))), None
        )
        if parquet is not None:
            raise ValueError(PARQUET.format(path=str(parquet)))


def _convert(args: argparse.Namespace) -> None:
    """``--to-parquet``: each log to ``OUT/<name>.parquet``."""
    from .options import AuditOptions, flag_of
    from .scan import is_parquet, to_parquet

    if args.out is None:
        raise ValueError("--out: give a folder for the Parquet files")
    # a conversion writes every line's fields (--by's kept as columns): nothing else applies
    ignored = [flag_of(name) for name in _settings(args) if name != "by"]
    ignored += [
        flag
        for flag, given in (
            ("--from-partials", args.from_partials),
            ("--partials-out", args.partials_out is not None),
            ("--fit-exposure", args.fit_exposure is not None),
        )
        if given
    ]
    if ignored:
        raise ValueError(
            f"{', '.join(ignored)}: --to-parquet converts LOG files line for line and takes "
            "only --out and --by (the audit of the Parquet files takes the rest)"
        )
    options = AuditOptions.create(args.logs, by=getattr(args, "by", ()))
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
        if (args.out / name).exists():
            raise ValueError(
                f"{str(args.out / name)!r} exists (an earlier conversion: a log rotated under "
                f"one name converts to one name); --out: convert {str(path)!r} into another "
                "folder (one per day), or remove the file first"
            )
        targets[name] = path
    args.out.mkdir(parents=True, exist_ok=True)
    for name, path in targets.items():
        rows = to_parquet(path, args.out / name, ("metadata", "run_id", *options.by))
        print(f"{path} -> {args.out / name}: {rows:,} rows")


def main(argv: list[str] | None = None) -> int:
    """``python -m fairrag_audit.cli`` (the same as ``fairrag audit``)."""
    parser = argparse.ArgumentParser(prog="fairrag")
    add_audit_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())

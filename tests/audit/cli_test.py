"""`fairrag audit` end to end: the files it writes, and bad input refused with a clear error."""

from __future__ import annotations

import json
import shlex
from datetime import datetime, timezone
from pathlib import Path

import pytest

from fairrag_audit.figures import FIGURES
from fairrag_study.cli import main
from tests.audit.conftest import deployment_records
from tests.audit.logs import record, write_log

PNG = b"\x89PNG\r\n\x1a\n"


def test_report_files_tables_and_figures(report_dir: Path) -> None:
    for name in ("report.md", "report.html", "summary.json", "metrics.csv", "drift.csv"):
        assert (report_dir / name).is_file(), name
    for name in FIGURES:
        assert (report_dir / "figures" / name).read_bytes().startswith(PNG)
    summary = json.loads((report_dir / "summary.json").read_text())
    assert summary["reading"]["damaged_lines"] == 1
    assert summary["reading"]["used"] == 48
    assert summary["drift_windows"] > 0  # the standard ranker is far from parity every hour
    report = (report_dir / "report.md").read_text()
    for heading in ("## Reading", "## What could not be computed", "## Rankers compared"):
        assert heading in report
    assert "## Drift" in report and "windows with amortized disparity above 0.05" in report
    assert "| standard | acme | 2026-12-01T00:00:00Z |" in report
    for name in FIGURES:
        assert f"(figures/{name})" in report
    assert "Student t intervals" in report  # says which intervals these are


def test_help_lists_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["audit", "--help"])
    text = capsys.readouterr().out
    for flag in ("--out", "--by", "--since", "--window", "--max-disparity", "--protected"):
        assert flag in text


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--window", "5x"], "--window '5x' is not a duration"),
        # these raised OverflowError or a DuckDB conversion error (a traceback, not a flag)
        (["--window", "1000000000d"], "--window '1000000000d' is longer than the cap of 100"),
        (["--window", "999999999d"], "--window '999999999d' is longer than the cap of 100"),
        (["--since", "1" + "0" * 20 + "d"], "--since '1" + "0" * 20 + "d' is longer than"),
        (["--since", "yesterday"], "--since 'yesterday' is neither an ISO 8601"),
        (["--max-disparity", "2"], "--max-disparity 2.0 must be a number in [0, 1]"),
        (["--by", "ranker"], "--by 'ranker': results are always split by ranker"),
        (["--target-share", "0.3"], "--target-share 0.3 needs --protected"),
        (["--exposure", "bm25"], "--exposure 'bm25' is unknown"),
    ],
)
def test_bad_flags_are_refused_naming_flag_and_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    log = write_log(tmp_path / "log.jsonl", [record(["female", "male"])])
    assert main(["audit", str(log), "--out", str(tmp_path / "out"), *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_fit_exposure_path_that_cannot_be_written_is_refused_before_the_audit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user trial: the whole report was written, then exit 1 with an OSError naming no
    flag."""
    log = write_log(tmp_path / "log.jsonl", deployment_records())
    for fit, why in ((tmp_path / "no" / "fit.json", "does not exist"), (tmp_path, "a folder")):
        out = tmp_path / f"out-{fit.name}"
        assert main(["audit", str(log), "--out", str(out), "--fit-exposure", str(fit)]) == 2
        assert f"--fit-exposure {str(fit)!r} is" in (err := capsys.readouterr().err) and why in err
        assert not out.exists()


def test_missing_log_and_out_that_is_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere.jsonl"
    assert main(["audit", str(missing), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"log {str(missing)!r} does not exist" in err
    assert f"(got {str(missing)!r})" in err and "PosixPath" not in err  # as the command wrote it
    log = write_log(tmp_path / "log.jsonl", [record(["female", "male"])])
    (tmp_path / "file").write_text("")
    assert main(["audit", str(log), "--out", str(tmp_path / "file")]) == 2
    assert "is a file; give a folder" in capsys.readouterr().err


def test_the_readme_command_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    (line,) = [x for x in readme.splitlines() if x.startswith("fairrag audit ")]
    args = shlex.split(line)[1:]
    log = args[1]
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")  # within the command's --since 7d
    write_log(tmp_path / log, deployment_records(day=today))
    monkeypatch.chdir(tmp_path)  # the command's relative paths: the log and --out
    assert main(args) == 0
    assert (tmp_path / args[args.index("--out") + 1] / "report.html").is_file()


def test_nothing_left_after_since_still_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_log(tmp_path / "log.jsonl", deployment_records())
    out = tmp_path / "out"
    assert (
        main(
            [
                "audit",
                str(log),
                "--out",
                str(out),
                "--since",
                "2030-01-01",
                "--window",
                "1h",
                "--max-disparity",
                "0.05",
            ]
        )
        == 0
    )
    said = capsys.readouterr().out
    assert "0 records audited" in said
    assert "## Drift" in (out / "report.md").read_text()
    # why nothing was drawn: --since, not the data (a user trial read "no record has groups or
    # exposure shares" and "no protected group" for records holding both)
    assert "no record at or after --since 2030-01-01T00:00:00Z: all 48 records read" in said
    assert "no record has groups" not in said and "no protected group" not in said
    assert "not drawn: no record audited (--since left out all 48)" in said


def test_a_reader_that_stops_reading_stops_the_audit_quietly(tmp_path: Path) -> None:
    """An operator's trial: ``fairrag audit ... | head -1`` ended in a BrokenPipeError
    traceback. Its stdout closed before it writes: exit 141 (a shell's for a writer SIGPIPE
    stopped), nothing on stderr."""
    import subprocess
    import sys

    log = write_log(tmp_path / "log.jsonl", [record(["female", "male"])] * 3)
    command = [sys.executable, "-m", "fairrag_study.cli", "audit", str(log)]
    child = subprocess.Popen(
        [*command, "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # the reader gone before any line
    err = child.stderr.read().decode()
    assert child.wait(timeout=300) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_fail_on_drift_exits_3_when_a_window_leaves_the_band(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An operator's trial: a cron job had to read summary.json to learn of drift, the audit
    exiting 0 whatever it found. ``--fail-on-drift`` exits 3 then, the report written."""
    log = write_log(tmp_path / "log.jsonl", deployment_records())
    base = ["audit", str(log), "--window", "1h", "--protected", "female"]
    tight = [*base, "--out", str(tmp_path / "tight"), "--max-disparity", "0.01"]
    assert main(tight) == 0  # the default: a report, whatever it found
    assert main([*tight, "--fail-on-drift"]) == 3
    said = capsys.readouterr()
    assert "windows out of band: exit 3" in said.err
    assert (tmp_path / "tight" / "report.html").is_file()
    drift = int(said.out.split(" windows out of band")[0].rsplit("; ", 1)[1])
    assert drift > 0
    loose = [*base, "--out", str(tmp_path / "loose"), "--max-disparity", "1", "--fail-on-drift"]
    assert main(loose) == 0
    assert "0 windows out of band" in capsys.readouterr().out
    assert main([*base, "--out", str(tmp_path / "none"), "--fail-on-drift"]) == 2
    assert "--fail-on-drift: drift is the windows" in capsys.readouterr().err

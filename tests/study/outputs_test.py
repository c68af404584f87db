"""`--out`: the study replaces only the files it wrote (a manifest), refuses a folder of other
files and a folder another study is writing (a lock), and explains a run that crashed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fairrag_study.cli import main
from fairrag_study.data import DataNotFoundError
from fairrag_study.errors import OutputFolderError
from fairrag_study.outputs import LOCK_NAME, MANIFEST_NAME, STUDY_FILES, OutputFolder
from fairrag_study.study import StudyConfig, run_study

ROOT = Path(__file__).resolve().parents[2]


def _study_args(out: Path, tmp_path: Path) -> list[str]:
    # Refused folders fail before the data is read: the data path need not exist for them.
    return ["study", "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--no-progress"]


def _files(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): p.read_text()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_folder_of_other_files_is_refused_and_left_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "papers"
    (out / "figures").mkdir(parents=True)
    (out / "notes.tmp").write_text("draft")
    (out / "table_of_contents.md").write_text("# contents")
    (out / "figures" / "holiday.png").write_text("not a study figure")
    before = _files(out)
    assert main(_study_args(out, tmp_path)) == 2
    error = capsys.readouterr().err
    assert f"--out '{out}' holds files the study did not write" in error
    for name in ("figures/holiday.png", "notes.tmp", "table_of_contents.md"):
        assert name in error
    assert _files(out) == before  # nothing deleted, no lock or manifest left behind
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("flag", ["--answers", "--cache-dir"])
def test_an_answer_store_or_cache_inside_out_is_refused_before_the_first_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, monkeypatch
) -> None:
    """``--answers OUT/answers.sqlite`` (or ``--cache-dir OUT/cache``) ran once, then the same
    command was refused for the files the study did not write: a stopped paid run could not
    be resumed as the guide says (a researcher's trial)."""
    out = tmp_path / "out"
    inside = out / ("answers.sqlite" if flag == "--answers" else "cache")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    llm = ["--llm", "openai:gpt-4o-mini", "--base-url", "http://127.0.0.1:9/v1"]
    args = ["study", "--out", str(out), flag, str(inside), *llm, "--no-progress"]
    with pytest.raises(SystemExit) as stopped:
        main(args)
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert f"argument {flag}: '{inside}' is inside --out '{out}'" in error
    assert not out.exists()


def test_only_the_files_in_the_manifest_are_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    folder = OutputFolder(out, log=lambda _: None)
    folder.claim()
    (out / "records.jsonl").write_text("{}\n")
    (out / "figures").mkdir()
    (out / "figures" / "retrieval.png").write_text("png")
    folder.release()
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["written"] == ["figures/retrieval.png", "records.jsonl"]
    assert (out / LOCK_NAME).read_text() == ""  # released cleanly

    # A study's name not in the manifest is someone else's file: refused like any other.
    (out / "report.md").write_text("my own report")
    with pytest.raises(OutputFolderError, match=r"did not write: report\.md"):
        OutputFolder(out, log=lambda _: None).claim()
    (out / "report.md").unlink()
    again = OutputFolder(out, log=lambda _: None)
    again.claim()
    assert not (out / "records.jsonl").exists() and not (out / "figures/retrieval.png").exists()
    assert set(json.loads((out / MANIFEST_NAME).read_text())["written"]) == set(STUDY_FILES)
    again.release()
    assert json.loads((out / MANIFEST_NAME).read_text())["written"] == []


def test_a_study_folder_from_before_manifests_is_recognised(tmp_path: Path) -> None:
    out = tmp_path / "old"
    (out / "figures").mkdir(parents=True)
    run = {"status": "complete", "config": {"trials": 80}}
    (out / "run.json").write_text(json.dumps(run))
    for name in ("records.jsonl", "report.md", "table1_exposure_disparity.md"):
        (out / name).write_text("old")
    (out / "figures" / "retrieval.png").write_text("old")
    folder = OutputFolder(out, log=lambda _: None)
    folder.claim()
    folder.release()
    assert set(_files(out)) == {LOCK_NAME, MANIFEST_NAME}


def test_a_second_study_into_the_same_folder_is_refused_while_the_first_runs(
    tmp_path: Path,
) -> None:
    out = tmp_path / "shared"
    first = OutputFolder(out, log=lambda _: None)
    first.claim()
    try:
        with pytest.raises(
            OutputFolderError, match=rf"in use by another study \(pid {os.getpid()}"
        ):
            OutputFolder(out, log=lambda _: None).claim()
    finally:
        first.release()
    second = OutputFolder(out, log=lambda _: None)
    second.claim()
    second.release()


def test_the_lock_of_another_process_refuses_then_is_recovered_when_it_dies(tmp_path: Path) -> None:
    out = tmp_path / "locked"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from fairrag_study.outputs import OutputFolder
            folder = OutputFolder({str(out)!r}, log=print)
            folder.claim()  # held while this process lives
            print("claimed", flush=True)
            time.sleep(120)
        """)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "claimed"
        with pytest.raises(OutputFolderError, match=rf"pid {holder.pid} on "):
            OutputFolder(out, log=lambda _: None).claim()
    finally:
        holder.send_signal(signal.SIGKILL)  # dies holding the lock, its pid in the file
        holder.wait(30)
    said: list[str] = []
    recovered = OutputFolder(out, log=said.append)
    recovered.claim()
    recovered.release()
    assert len(said) == 1
    assert (
        f"taking over the lock of a study that ended without releasing it (pid {holder.pid}"
        in (said[0])
    )
    assert said[0].endswith("no longer running)")


def test_a_crashed_run_is_explained_by_the_next_start(tmp_path: Path) -> None:
    """A segfault (here: a real one, reading address 0) leaves run.json "running"; the next
    start says the previous run crashed instead of leaving it unexplained."""
    out = tmp_path / "crash"
    crash = textwrap.dedent(f"""
        import ctypes
        from pathlib import Path
        import fairrag_study.phases.data as data_phase
        import fairrag_study.study as study
        def segfault(*args, **kwargs):
            ctypes.string_at(0)
        data_phase.locate_data = segfault
        study.run_study(study.StudyConfig(out=Path({str(out)!r}), progress=False))
    """)
    child = subprocess.run(
        [sys.executable, "-c", crash],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert child.returncode == -signal.SIGSEGV
    left = json.loads((out / "run.json").read_text())
    assert left["status"] == "running" and isinstance(left["pid"], int)

    said: list[str] = []
    with pytest.raises(DataNotFoundError):  # the next start, failing early on purpose
        run_study(StudyConfig(out=out, data=tmp_path / "nowhere.csv", progress=False), said.append)
    printed = "\n".join(said)
    assert f"the previous study in {out} (pid {left['pid']}, started {left['started']})" in printed
    assert "crashed (e.g. a segfault in a native library) or was killed" in printed
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and run["previous_run"].startswith("the previous study")

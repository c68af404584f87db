"""The study's edges (issue 36): a full disk under ``--out``, data files in other encodings or
with huge fields, nesting deep enough to exhaust Python's stack, flags out of range. Each ends
``fairrag study`` with exit status 2 and a message naming the cause and the fix, never a
traceback; a run that had started says "failed" in its ``run.json`` and leaves no temporary
file."""

from __future__ import annotations

import errno
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairrag_study.cli import main
from fairrag_study.outputs import OutputFolder
from tests.chroma_pool import data_path_or_skip


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("edges-cache")


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

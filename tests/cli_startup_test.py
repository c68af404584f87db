"""``fairrag`` answers at once (issue 24): help and refused flags import no stack, and a
subcommand whose extra is missing exits 2 naming the extra, never with a traceback.

Timings are printed by ``benchmarks/bench_cli.py``; here ``sys.modules`` is checked in a fresh
interpreter, and a missing extra is simulated by putting ``None`` in ``sys.modules`` for one of
its modules (what Python does for a package that is not installed: ``import`` raises).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = (
    "chromadb",
    "duckdb",
    "langchain_core",
    "llama_index",
    "matplotlib",
    "onnxruntime",
    "pandas",
    "scipy",
    "sentence_transformers",
    "torch",
)

RUN = textwrap.dedent(
    """
    import json, sys
    for name in json.loads(sys.argv[1]):
        sys.modules[name] = None  # as if that package were not installed
    from fairrag_study.cli import main
    try:
        code = main(json.loads(sys.argv[2]))
    except SystemExit as exc:
        code = exc.code
    print(json.dumps({"code": code, "modules": sorted({m.split(".")[0] for m in sys.modules})}))
    """
)


def fairrag(*args: str, blocked: tuple[str, ...] = ()) -> tuple[int, set[str], str, str]:
    """Run ``fairrag *args`` in a fresh interpreter: exit code, top-level modules imported,
    stdout (without the last line) and stderr."""
    done = subprocess.run(
        [sys.executable, "-c", RUN, json.dumps(list(blocked)), json.dumps(list(args))],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    *out, last = done.stdout.strip().splitlines() or [""]
    assert last.startswith("{"), done.stdout + done.stderr
    result = json.loads(last)
    code = result["code"] if isinstance(result["code"], int) else 0 if not result["code"] else 1
    return code, set(result["modules"]), "\n".join(out), done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("--version",),
        ("study", "--help"),
        ("study", "--bogus"),
        ("study", "--k", "0"),
        ("audit", "--help"),
    ],
    ids=lambda args: " ".join(args),
)
def test_help_and_refused_flags_import_no_stack(args):
    code, modules, out, err = fairrag(*args)
    assert code == (0 if args[-1] in ("--help", "--version") else 2), err
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))
    assert "Traceback" not in err
    if args[-1] == "--help":
        assert "usage: fairrag" in out
    elif code == 2:
        assert f"fairrag study: error: argument {args[1]}" in err or "unrecognized" in err


def test_top_level_help_lists_every_command_and_imports_not_even_numpy():
    code, modules, out, _ = fairrag("--help")
    assert code == 0
    for command in ("study", "sweep", "audit"):
        assert command in out
    assert "fairrag[study]" in out and "fairrag[audit]" in out
    assert "numpy" not in modules and "fairrag_core" not in modules


def test_version_is_the_installed_distributions():
    from importlib.metadata import version

    code, _, out, _ = fairrag("--version")
    assert code == 0 and out == f"fairrag {version('fairrag')}"


def test_audit_without_its_extra_exits_2_naming_the_extra(tmp_path):
    log = tmp_path / "fairness.jsonl"
    log.write_text("{}\n")
    code, modules, _, err = fairrag(
        "audit", str(log), "--out", str(tmp_path / "report"), blocked=("duckdb",)
    )
    assert code == 2, err
    assert "Traceback" not in err
    assert "'audit' extra" in err and "duckdb" in err and "pip install 'fairrag[audit]'" in err
    assert not (tmp_path / "report").exists()
    assert "pandas" not in modules and "matplotlib" not in modules


@pytest.mark.parametrize("command", ["study", "sweep"])
def test_study_and_sweep_without_their_extra_exit_2_naming_the_extra(command, tmp_path):
    code, modules, _, err = fairrag(
        command, "--out", str(tmp_path / "out"), "--no-progress", blocked=("chromadb",)
    )
    assert code == 2, err
    assert "Traceback" not in err
    assert "'study' extra" in err and "chromadb" in err and "pip install 'fairrag[study]'" in err
    assert not (tmp_path / "out").exists()
    assert not modules & {"torch", "sentence_transformers", "onnxruntime"}


def test_a_module_of_the_extra_that_fails_while_running_is_reported_as_the_extra(monkeypatch):
    from fairrag_study import cli

    def run(args):
        raise ModuleNotFoundError("No module named 'duckdb'", name="duckdb")

    monkeypatch.setattr(cli, "_run", run)
    monkeypatch.setattr(cli, "missing_modules", lambda extra: [])
    assert cli.main(["audit", "x.jsonl", "--out", "report"]) == 2


def test_a_missing_module_outside_the_extra_still_raises(monkeypatch):
    from fairrag_study import cli

    def run(args):
        raise ModuleNotFoundError("No module named 'somewhere_else'", name="somewhere_else")

    monkeypatch.setattr(cli, "_run", run)
    monkeypatch.setattr(cli, "missing_modules", lambda extra: [])
    with pytest.raises(ModuleNotFoundError):
        cli.main(["audit", "x.jsonl", "--out", "report"])

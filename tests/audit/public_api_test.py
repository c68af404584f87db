"""The package's public names, its py.typed marker, and that it imports no LLM framework."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import fairrag_audit

ROOT = Path(__file__).resolve().parents[2]


def test_all_names_are_importable_and_typed() -> None:
    assert sorted(fairrag_audit.__all__) == sorted(
        [
            "METRICS",
            "AuditOptions",
            "AuditResult",
            "Partials",
            "audit",
            "audit_partials",
            "compute_partials",
            "parse_duration",
            "parse_since",
            "read_partials",
            "write_partials",
            "write_report",
        ]
    )
    for name in fairrag_audit.__all__:
        assert getattr(fairrag_audit, name) is not None
    assert (ROOT / "fairrag_audit" / "py.typed").is_file()


def test_framework_free() -> None:
    code = (
        "import sys, fairrag_audit, fairrag_audit.cli, fairrag_audit.figures;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langchain_core', 'langchain', 'llama_index', 'chromadb'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr

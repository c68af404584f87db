"""FairRAG audit: what the fairness logs of a running application say, as tables and a report.

``audit(paths, by=..., window=..., max_disparity=...)`` returns the tables (pandas DataFrames);
``write_report(result, out)`` writes ``report.md``, ``report.html`` and the figures. Incremental:
``write_partials(compute_partials(options), folder)`` saves a window's partial aggregates, and
``audit_partials(folders)`` reports on their merge, the same tables as one audit of all. The
logs are read by DuckDB, streaming; the package imports no LLM framework. Needs
``fairrag[audit]``.

The names below are imported on first use (PEP 562), so ``import fairrag_audit`` and the
``fairrag audit --help`` path load neither DuckDB, pandas, scipy nor matplotlib.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .analysis import METRICS, AuditResult, audit, audit_partials
    from .options import AuditOptions, parse_duration, parse_since
    from .partials import Partials, compute_partials, read_partials, write_partials
    from .report import write_report

__all__ = [
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

_HOME = {
    "METRICS": "analysis",
    "AuditResult": "analysis",
    "audit": "analysis",
    "audit_partials": "analysis",
    "Partials": "partials",
    "compute_partials": "partials",
    "read_partials": "partials",
    "write_partials": "partials",
    "AuditOptions": "options",
    "parse_duration": "options",
    "parse_since": "options",
    "write_report": "report",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

"""FairRAG audit: what the fairness logs of a running application say, as tables and a report.

``audit(paths, by=..., window=..., max_disparity=...)`` returns the tables (pandas DataFrames);
``write_report(result, out)`` writes ``report.md``, ``report.html`` and the figures. The logs are
read by DuckDB, streaming; the package imports no LLM framework. Needs ``fairrag[audit]``.

The names below are imported on first use (PEP 562), so ``import fairrag_audit`` and the
``fairrag audit --help`` path load neither DuckDB, pandas, scipy nor matplotlib.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .analysis import METRICS, AuditResult, audit
    from .options import AuditOptions, parse_duration, parse_since
    from .report import write_report

__all__ = [
    "METRICS",
    "AuditOptions",
    "AuditResult",
    "audit",
    "parse_duration",
    "parse_since",
    "write_report",
]

_HOME = {
    "METRICS": "analysis",
    "AuditResult": "analysis",
    "audit": "analysis",
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

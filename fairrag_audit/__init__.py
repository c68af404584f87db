"""FairRAG audit: what the fairness logs of a running application say, as tables and a report.

``audit(paths, by=..., window=..., max_disparity=...)`` returns the tables (pandas DataFrames);
``write_report(result, out)`` writes ``report.md``, ``report.html`` and the figures. The logs are
read by DuckDB, streaming; the package imports no LLM framework.
"""

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

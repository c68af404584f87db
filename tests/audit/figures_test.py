"""The audit's figures say something without --window (issue 24, item 7): automatic windows
(about 20, by the records' time span, stated in the report), and the
cumulative view of a stream. The figures are inspected as drawn (matplotlib's artists, caught
at ``savefig``): points per ranker, legends, the band."""

from __future__ import annotations

import json

import matplotlib.figure
import pytest
from matplotlib.container import ErrorbarContainer

from fairrag_audit import audit, write_report
from tests.audit.conftest import deployment_records
from tests.audit.logs import write_log


def check_readable(figure: matplotlib.figure.Figure) -> None:
    for ax in figure.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        labels = [text.get_text() for text in legend.get_texts()]
        assert 1 <= len(labels) <= 14, labels  # 12 series, the band and "out of band"
        assert all(0 < len(label) <= 40 for label in labels), labels


def test_without_window_the_time_figures_get_about_twenty_windows(tmp_path, drawn):
    log = write_log(tmp_path / "log.jsonl", deployment_records(hours=4, per_hour=12))
    result = audit([log], protected="female", max_disparity=0.05)
    assert "windows of 15m" in result.figure_windows  # 4 hours, records to minute 44: 12
    windows = result.trend_exposure.groupby("ranker")["window"].nunique()
    assert (windows == 12).all(), windows
    write_report(result, tmp_path / "out")
    for name in ("exposure_over_time.png", "disparity_band.png", "cumulative.png"):
        figure = drawn[name]
        lines = [line for ax in figure.axes for line in ax.get_lines()]
        per_ranker = [len(line.get_xdata()) for line in lines if line.get_label()[0] != "_"]
        per_ranker += [  # errorbar series: the data line of each container
            len(bars.lines[0].get_xdata())
            for ax in figure.axes
            for bars in ax.containers
            if isinstance(bars, ErrorbarContainer)
        ]
        assert per_ranker and min(per_ranker) > 1, (name, per_ranker)
        check_readable(figure)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "figures: the time figures use 12 windows of 15m" in report
    cumulative = result.cumulative
    last = cumulative[cumulative["series"] == "amortized disparity"].groupby("ranker").last()
    whole = result.rankers[result.rankers["metric"] == "amortized_disparity"].set_index("ranker")
    assert last["value"].to_numpy() == pytest.approx(whole["value"].to_numpy())  # all records


def test_records_without_timestamps_form_their_own_window(tmp_path, drawn):
    """Windows by time merge across saved partials (docs/SPEC.md "Partial aggregates");
    windows by record count would not, so undated records form one window of their own."""
    records = deployment_records(hours=4, per_hour=12)
    for item in records[:6]:
        item.pop("timestamp")
    result = audit([write_log(tmp_path / "log.jsonl", records)], protected="female")
    assert result.figure_windows.startswith("the time figures use 18 windows of 10m")
    assert "the 6 records without a timestamp form the window '(no timestamp)'" in (
        result.figure_windows
    )
    write_report(result, tmp_path / "out")
    figure = drawn["exposure_over_time.png"]
    ticks = [t.get_text() for t in figure.axes[-1].get_xticklabels()]
    assert ticks[-1] == "(no timestamp)" and ticks[0] == "2026-12-01T00:20:00Z"
    check_readable(figure)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "cumulative.png" in summary["figures"]
    for item in records:
        item.pop("timestamp", None)
    undated = audit([write_log(tmp_path / "undated.jsonl", records)], protected="female")
    assert undated.figure_windows.startswith("no record has a timestamp")
    assert set(undated.trend_exposure["window"]) == {"(no timestamp)"}


def test_twelve_series_all_look_different(tmp_path, drawn):
    """A user trial: the band figure drew 12 series with matplotlib's 10 colours and one
    marker, so two pairs of rankers/tenants could not be told apart."""
    records = deployment_records(hours=2, per_hour=24)
    for index, item in enumerate(records):
        item["metadata"] = {"tenant": f"tenant{index // 2 % 6}"}
    log = write_log(tmp_path / "log.jsonl", records)
    result = audit([log], by=["tenant"], window="1h", protected="female", max_disparity=0.05)
    write_report(result, tmp_path / "out")
    bars = [b for ax in drawn["disparity_band.png"].axes for b in ax.containers]
    looks = [
        (line.get_color(), line.get_marker(), line.get_linestyle())
        for line in (b.lines[0] for b in bars if isinstance(b, ErrorbarContainer))
    ]
    assert len(looks) == 12 and len(set(looks)) == 12, looks

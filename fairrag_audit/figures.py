"""The audit's figures, as PNG files: exposure share over time per group, amortized disparity
against the band, generation parity (the paper's and the attributed) against exposure share,
and the cumulative view."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: never open a window, whatever the environment says

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .analysis import NO_TIMESTAMP, STYLE_COLUMNS, AuditResult

__all__ = ["FIGURES", "write_figures"]

FIGURES = {
    "exposure_over_time.png": "Exposure share per group over time, per ranker",
    "disparity_band.png": "Amortized disparity per window against the band",
    "parity_vs_exposure.png": (
        "Generation parity, the paper's and attributed, against protected exposure share"
    ),
    "cumulative.png": "Exposure share per group and amortized disparity as records accumulate",
}
"""File name → caption of every figure an audit can draw."""

DPI = 110
MAX_SERIES = 12
"""Rankers (panels, lines) and groups one figure draws: those with the most records or the
largest exposure; the tables hold them all, and the report's notes say what was left out."""
MAX_LEGEND_CHARS = 40
"""A label longer than this is cut (with "…") in a figure."""


def _short(label: object) -> str:
    text = " ".join(str(label).split())
    return text if len(text) <= MAX_LEGEND_CHARS else text[: MAX_LEGEND_CHARS - 1] + "…"


def _top(values: pd.Series, weights: pd.Series, result: AuditResult, what: str) -> list[str]:
    """The MAX_SERIES values of ``values`` with the largest summed ``weights`` (sorted by
    name); a note says how many were left out of the figure."""
    totals = weights.groupby(values).sum().sort_values(ascending=False, kind="stable")
    if len(totals) > MAX_SERIES:
        result.notes.append(
            f"{what}: the figure draws the {MAX_SERIES} of {len(totals)} with the most weight; "
            "the CSV tables hold them all"
        )
    return sorted(str(v) for v in totals.index[:MAX_SERIES])


def _series_style(index: int) -> dict[str, str]:
    """The marker and line style of a figure's ``index``-th series: matplotlib's 10 colours
    repeat from the 11th (:data:`MAX_SERIES` is 12), so each round of colours gets its own
    marker and line style and no two series look alike."""
    rounds = index // 10
    return {"marker": "os^D"[rounds % 4], "linestyle": ("-", "--")[rounds % 2]}


def _x_positions(frame: pd.DataFrame, result: AuditResult) -> tuple[np.ndarray, list[str]]:
    """x of each row: window starts as dates; a single 'all' or 'no timestamp' as categories."""
    labels = sorted(frame["window"].unique(), key=lambda w: (w == NO_TIMESTAMP, w))
    position = {label: i for i, label in enumerate(labels)}
    return np.array([position[w] for w in frame["window"]], dtype=float), labels


def _set_window_axis(ax: plt.Axes, labels: list[str]) -> None:
    ticks = np.arange(len(labels))
    if len(labels) > 12:  # keep the axis readable
        step = int(np.ceil(len(labels) / 12))
        ticks = ticks[::step]
    ax.set_xticks(ticks)
    ax.set_xticklabels(
        [labels[i].replace("T00:00:00Z", "") for i in ticks], rotation=30, ha="right", fontsize=7
    )


def exposure_over_time(result: AuditResult, path: Path) -> bool:
    """One panel per ranker: each group's exposure share per window, with its interval."""
    data = result.trend_exposure
    if data.empty:
        return False
    rankers = _top(data["ranker"], data["n"], result, "exposure over time, rankers")
    data = data[data["ranker"].isin(rankers)]
    fig, axes = plt.subplots(
        len(rankers), 1, figsize=(8, 2.4 * len(rankers) + 0.6), sharex=True, squeeze=False
    )
    _, labels = _x_positions(data, result)
    place = {label: i for i, label in enumerate(labels)}
    for ax, ranker in zip(axes[:, 0], rankers, strict=True):
        mine = data[data["ranker"] == ranker]
        groups = _top(
            mine["group"],
            mine["share"] * mine["n"],
            result,
            f"exposure over time, {ranker}: groups",
        )
        mine = mine[mine["group"].isin(groups)]
        for index, (group, rows) in enumerate(mine.groupby("group", sort=True)):
            x = np.array([place[w] for w in rows["window"]], dtype=float)
            ax.plot(x, rows["share"], ms=3, label=_short(group), **_series_style(index))
            ax.fill_between(x, rows["ci_low"], rows["ci_high"], alpha=0.2)
        target = result.options.target_share
        if result.options.protected is not None:
            ax.axhline(0.5 if target is None else target, color="grey", lw=0.8, ls="--")
        ax.set_ylim(0, 1)
        ax.set_ylabel("exposure share")
        ax.set_title(_short(ranker), fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
    _set_window_axis(axes[-1, 0], labels)
    fig.suptitle(FIGURES["exposure_over_time.png"], fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return True


def disparity_band(result: AuditResult, path: Path) -> bool:
    """Amortized disparity per window for every ranker (and ``by`` value), the band shaded,
    windows out of the band marked."""
    # without --window the trend table's automatic windows, one series per ranker
    table = result.trend_metrics if result.options.window is None else result.metrics
    data = table[table["metric"] == "amortized_disparity"]
    data = data[np.isfinite(data["value"].to_numpy(float))]
    if data.empty:
        return False
    _, labels = _x_positions(data, result)
    place = {label: i for i, label in enumerate(labels)}
    fig, ax = plt.subplots(figsize=(10, 4.2))
    by = result.options.by_columns
    series = ["ranker", *by] if result.options.window is not None else ["ranker"]
    data = data.assign(_series=data[series].astype(str).agg(" / ".join, axis=1))
    keep = _top(data["_series"], data["n"], result, "disparity against the band, series")
    data = data[data["_series"].isin(keep)]
    for index, (name, rows) in enumerate(data.groupby("_series", sort=True)):
        x = np.array([place[w] for w in rows["window"]], dtype=float)
        value = rows["value"].to_numpy(float)
        # an interval never below 0 in length (NaN bounds: no bar)
        err = np.nan_to_num(
            np.maximum(np.vstack([value - rows["ci_low"], rows["ci_high"] - value]), 0.0)
        )
        style = _series_style(index)
        ax.errorbar(
            x,
            value,
            yerr=err,
            ms=3,
            capsize=2,
            lw=1,
            label=_short(name),
            fmt=style["marker"] + style["linestyle"],
        )
    band = result.options.max_disparity
    if band is not None:
        ax.axhspan(0, band, color="tab:green", alpha=0.12, label=f"band [0, {band:g}]")
        out = data[data["value"] > band]
        ax.scatter(
            [place[w] for w in out["window"]],
            out["value"],
            s=60,
            facecolors="none",
            edgecolors="red",
            lw=1.2,
            label="out of band",
            zorder=5,
        )
    ax.set_ylabel("amortized disparity")
    ax.set_ylim(bottom=0)
    _set_window_axis(ax, labels)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside, not over
    ax.set_title(FIGURES["disparity_band.png"], fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return True


PARITY_PANELS = (
    ("generation_parity", "the paper's generation parity ((DocTitle: X) citations)"),
    ("attributed_generation_parity", "attributed generation parity (any style)"),
)
"""The panels of ``parity_vs_exposure.png``: the metric and its axis label."""


def generation_note(result: AuditResult, metric: str) -> str:
    """Why a panel of the parity figure has no point, in a few words (the report's "Why the
    generation metrics are what they are" says it in full)."""
    table = result.generation
    answers = int(table["answers"].sum()) if not table.empty else 0
    if not answers:
        return "no record carries an answer"
    if metric == "generation_parity":
        follows = int(table["follows_format"].sum())
        styles = [
            f"{column.removeprefix('style_')} {int(table[column].sum())}"
            for column in STYLE_COLUMNS
            if int(table[column].sum())
        ]
        used = textwrap.fill(f"Styles: {', '.join(styles) or 'not recorded'}.", width=44)
        return (
            f"n/a: {answers - follows} of {answers} answers cite nothing\nin the (DocTitle: X) "
            f"format.\n{used}\nRead the attributed parity,\nor prompt for the format."
        )
    before = int(table["without_attribution"].sum())
    nothing = int(table["attributed_nothing"].sum())
    return (
        f"n/a: of {answers} answers, {before} recorded\nwithout the attributed fields "
        f"(older logs),\n{nothing} attribute nothing"
    )


def parity_vs_exposure(result: AuditResult, path: Path) -> bool:
    """Two panels, the paper's and the attributed generation parity: one point per ranker,
    ``by`` values and window, its mean parity against the protected exposure share; on the
    diagonal the fairness gap is 0. A panel without any point says why (answers citing
    nothing in the paper's format, in which styles; records without the attributed fields)."""
    keys = ["ranker", *result.options.by_columns, "window"]
    table = result.metrics.pivot_table(
        index=keys, columns="metric", values="value", aggfunc="first", dropna=False
    )
    if "exposure_share" not in table:
        return False
    table = table[np.isfinite(table["exposure_share"])]
    finite = {
        metric: table[np.isfinite(table[metric])] if metric in table else table.iloc[:0]
        for metric, _ in PARITY_PANELS
    }
    if all(rows.empty for rows in finite.values()):
        return False
    fig, axes = plt.subplots(1, 2, figsize=(10, 5), squeeze=False)
    for ax, (metric, label) in zip(axes[0], PARITY_PANELS, strict=True):
        rows_of = finite[metric]
        counts = result.metrics[result.metrics["metric"] == metric].set_index(keys)["n"]
        if rows_of.empty:
            ax.text(
                0.5,
                0.5,
                generation_note(result, metric),
                ha="center",
                va="center",
                fontsize=8,
                transform=ax.transAxes,
                bbox={"facecolor": "white", "edgecolor": "#bbbbbb", "boxstyle": "round"},
            )
        else:
            ranker_of = rows_of.index.get_level_values("ranker").to_series(index=rows_of.index)
            top = _top(
                ranker_of,
                counts.reindex(rows_of.index).fillna(0),
                result,
                f"parity figure ({metric}), rankers",
            )
            rows_of = rows_of[ranker_of.isin(top).to_numpy()]
            largest = max(float(np.nanmax(counts.to_numpy(float))), 1.0)
            for ranker, rows in rows_of.groupby(level="ranker", sort=True):
                n = counts.reindex(rows.index).to_numpy(float)
                ax.scatter(
                    rows["exposure_share"],
                    rows[metric],
                    s=10 + 60 * n / largest,
                    alpha=0.7,
                    label=_short(ranker),
                )
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--", label="fairness gap 0")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("protected exposure share (retrieval)")
        ax.set_ylabel(label, fontsize=8)
        ax.legend(fontsize=7, loc="upper left")
        if not result.generation.empty:
            column = "paper_measured" if metric == "generation_parity" else "attributed_measured"
            measured = int(result.generation[column].sum())
            answers = int(result.generation["answers"].sum())
            ax.set_title(f"measured for {measured} of {answers} answers", fontsize=8)
    fig.suptitle(FIGURES["parity_vs_exposure.png"], fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return True


def cumulative(result: AuditResult, path: Path) -> bool:
    """One row per ranker: each group's exposure share of all records so far (left) and the
    amortized disparity of all records so far against the band (right), against the number
    of records."""
    data = result.cumulative
    if data.empty:
        return False
    data = data[np.isfinite(data["value"].to_numpy(float))]
    if data.empty:
        return False
    rankers = _top(data["ranker"], data["records"], result, "cumulative figure, rankers")
    fig, axes = plt.subplots(len(rankers), 2, figsize=(10, 2.4 * len(rankers) + 0.8), squeeze=False)
    band = result.options.max_disparity
    for (left, right), ranker in zip(axes, rankers, strict=True):
        mine = data[data["ranker"] == ranker]
        shares = mine[mine["series"] != "amortized disparity"]
        last = shares.sort_values("records").groupby("series")["value"].last()
        groups = _top(
            pd.Series(last.index, index=last.index), last, result, f"cumulative, {ranker}: groups"
        )
        for index, group in enumerate(groups):
            rows = shares[shares["series"] == group].sort_values("records")
            left.plot(
                rows["records"], rows["value"], ms=2.5, label=_short(group), **_series_style(index)
            )
        if result.options.protected is not None:
            target = result.options.target_share
            left.axhline(0.5 if target is None else target, color="grey", lw=0.8, ls="--")
        left.set_ylim(0, 1)
        left.set_ylabel("exposure share so far", fontsize=8)
        left.set_title(f"{_short(ranker)}: exposure share per group", fontsize=9)
        if groups:
            left.legend(fontsize=7, loc="best")
        rows = mine[mine["series"] == "amortized disparity"].sort_values("records")
        right.plot(
            rows["records"],
            rows["value"],
            marker="o",
            ms=2.5,
            color="tab:red",
            label="amortized disparity",
        )
        if band is not None:
            right.axhspan(0, band, color="tab:green", alpha=0.12, label=f"band [0, {band:g}]")
        right.set_ylim(
            0,
            max(
                0.05,
                float(np.nanmax(rows["value"])) * 1.15 if len(rows) else 0.05,
                (band or 0) * 1.5,
            ),
        )
        right.set_ylabel("amortized disparity so far", fontsize=8)
        right.set_title(f"{_short(ranker)}: amortized disparity", fontsize=9)
        right.legend(fontsize=7, loc="best")
    for ax in axes[-1]:
        ax.set_xlabel("records so far")
    fig.suptitle(
        textwrap.fill(f"{FIGURES['cumulative.png']}; {result.figure_windows}", width=120),
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return True


def write_figures(result: AuditResult, folder: Path) -> dict[str, Path]:
    """Draw every figure the data allows into ``folder``; returns name → path of those drawn
    (a figure without data is not drawn, and ``result.notes`` says so)."""
    folder.mkdir(parents=True, exist_ok=True)
    drawn: dict[str, Path] = {}
    draw = {
        "exposure_over_time.png": (exposure_over_time, "no record has groups or exposure shares"),
        "disparity_band.png": (disparity_band, "no amortized disparity (no protected group)"),
        "parity_vs_exposure.png": (
            parity_vs_exposure,
            "no window has both a generation parity (the paper's or the attributed) and a "
            "protected exposure share",
        ),
        "cumulative.png": (cumulative, "no record has an exposure figure"),
    }
    reading = result.reading
    if int(reading["records"].sum()) and not int(reading["used"].sum()):
        # every record was read and left out by --since: that, not the data, is why
        before = int(reading["excluded_by_since"].sum())
        draw = {
            name: (function, f"no record audited (--since left out all {before:,})")
            for name, (function, _) in draw.items()
        }
    for name, (function, why) in draw.items():
        path = folder / name
        path.unlink(missing_ok=True)
        if function(result, path):
            drawn[name] = path
        else:
            result.notes.append(f"figure {name} not drawn: {why}")
    return drawn

"""Partial aggregates: a day's partials merged with the earlier days' give the one-shot report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fairrag_audit import audit
from fairrag_audit.options import AuditOptions
from fairrag_audit.partials import (
    compute_partials,
    merge_partials,
    metric_table,
    read_partials,
    write_partials,
)
from tests.audit.conftest import deployment_records
from tests.audit.logs import write_log

OPTIONS = {"by": ("tenant",), "window": "1h", "protected": "female"}


def assert_same_table(merged: pd.DataFrame, one_shot: pd.DataFrame) -> None:
    """Same cells, counts equal, values and intervals equal up to float summation order."""
    assert list(merged.columns) == list(one_shot.columns)
    assert len(merged) == len(one_shot) > 0
    for column in one_shot.columns:
        if column in ("value", "ci_low", "ci_high"):
            np.testing.assert_allclose(
                merged[column].to_numpy(float), one_shot[column].to_numpy(float), atol=1e-9
            )
        else:
            assert merged[column].tolist() == one_shot[column].tolist(), column


def days(folder: Path) -> list[Path]:
    """Three daily logs (the second with a torn line), as a daily run would find them."""
    return [
        write_log(
            folder / f"day{index}.jsonl",
            deployment_records(hours=3, seed=index, day=f"2026-12-0{index + 1}"),
            [b'{"torn\n'] if index == 1 else [],
        )
        for index in range(3)
    ]


def test_partials_saved_per_day_and_merged_equal_the_one_shot_report(tmp_path: Path) -> None:
    logs = days(tmp_path)
    saved = [
        write_partials(
            compute_partials(AuditOptions.create([log], **OPTIONS)), tmp_path / f"{log.stem}.pq"
        )
        for log in logs
    ]
    options = AuditOptions.create(logs, **OPTIONS)
    one_shot = audit(logs, **OPTIONS)
    merged = read_partials(saved)  # each day read once, then only the saved sums
    assert_same_table(metric_table(merged, options), one_shot.metrics)
    assert_same_table(metric_table(merged, options, ["ranker"]), one_shot.rankers)
    # the merge is a sum: order and grouping do not matter
    frames = [read_partials([path]) for path in saved]
    regrouped = merge_partials([merge_partials(frames[1:]), frames[0]])
    assert_same_table(metric_table(regrouped, options), one_shot.metrics)

"""benchmarks/calibrated_figure.py: the held-out trials, the DCG share recomputed for every
arm, the parity's mean and the figure, on records written here (its figures come from the
real runs, docs/results/study.md)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "calibrated_figure", ROOT / "benchmarks" / "calibrated_figure.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["calibrated_figure"] = module
    spec.loader.exec_module(module)
    return module


def _record(ranker: str, trial: int, topic: str, groups: list[str], parity: float | None) -> dict:
    return {
        "ranker": ranker,
        "trial": trial,
        "topic": topic,
        "groups": groups,
        "protected": "female",
        "attributed_generation_parity": parity,
        "ndcg_at_k": 0.6,
        # under the run's own model: the script must not read it for the bars
        "exposure_share": 0.99,
    }


def test_dcg_share_is_the_protected_share_of_dcg_weights() -> None:
    figure = _script()
    weights = [1 / math.log2(i + 1) for i in range(1, 6)]
    groups = ["female", "male", "male", "female", "male"]
    expected = (weights[0] + weights[3]) / sum(weights)
    assert figure.dcg_share(groups, "female") == pytest.approx(expected)
    assert figure.dcg_share(["male"] * 5, "female") == 0.0


def test_held_out_trials_only_and_every_arm_on_the_same_trials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    figure = _script()
    f, m = "female", "male"
    paper, calibrated = [], []
    for ranker in figure.PAPER_ORDER:
        paper += [
            _record(ranker, 0, "Fit topic", [f, m, m, m, m], 0.9),  # the fit saw this topic
            _record(ranker, 1, "Held", [f, m, m, m, m], 0.2),
            _record(ranker, 2, "Held", [m, f, m, m, m], 0.4),
            _record(ranker, 3, "Held", [m, m, m, m, m], None),  # n/a: counted, not averaged
        ]
    calibrated += [
        _record("representative_stochastic", 0, "Fit topic", [f, f, m, m, m], 0.1),
        _record("representative_stochastic", 1, "Held", [m, f, f, m, m], 0.5),
        _record("representative_stochastic", 2, "Held", [f, m, m, m, f], 0.7),
        _record("representative_stochastic", 3, "Held", [f, m, m, m, m], 0.6),
        _record("representative_stochastic", 4, "Held", [f, m, m, m, m], 0.0),  # not in paper
    ]
    (tmp_path / "paper.jsonl").write_text("\n".join(json.dumps(r) for r in paper) + "\n")
    (tmp_path / "cal.jsonl").write_text("\n".join(json.dumps(r) for r in calibrated) + "\n")
    curve = {"weights": [0.2] * 5, "provenance": {"topics": ["Fit topic"]}}
    (tmp_path / "curve.json").write_text(json.dumps(curve))
    out = tmp_path / "fig.png"
    assert (
        figure.main(
            [
                str(tmp_path / "paper.jsonl"),
                str(tmp_path / "cal.jsonl"),
                str(tmp_path / "curve.json"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    held, every = printed.split("all trials")
    assert "held-out trials (3 in every arm)" in held  # trial 0 (fit topic) and 4 left out
    assert "(4 in every arm)" in every
    # the paper's arms: parity over trials 1-2 (3 is n/a), the fit topic's 0.9 never read
    assert "standard" in held and "attributed parity 30.0% [" in held and "(n 2)" in held
    # the calibrated arm: trials 1-3 (its trial 4 has no paper counterpart)
    assert "representative_stochastic (fitted)" in held
    assert "attributed parity 60.0% [" in held and "(n 3)" in held
    # the bars' exposure: DCG recomputed from the groups, not the record's own-model 0.99
    weights = [1 / math.log2(i + 1) for i in range(1, 6)]
    share = (weights[0] / sum(weights) + weights[1] / sum(weights) + 0) / 3
    assert f"DCG exposure share {100 * share:.1f}%" in held
    assert "99.0%" not in printed
    assert out.read_bytes()[:4] == b"\x89PNG"

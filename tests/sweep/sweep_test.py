"""`fairrag sweep` on a small real index built in a temporary cache: its CSV, its figure, the
Pareto marking on hand-made points, and bad flags exiting 2 before any work."""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fairrag_core.metrics import amortized_disparity, exposure_disparity, ndcg_at_k
from fairrag_study.cli import main
from fairrag_study.dataset import custom_dataset
from fairrag_study.study import StudyConfig
from fairrag_study.sweep import (
    COLUMNS,
    Setting,
    default_grid,
    expand,
    load_pools,
    pareto_front,
    sweep_point,
)
from fairrag_study.sweep_options import grid_flag
from tests.chroma_pool import data_path_or_skip
from tests.three_groups import TARGET, write_three_group_csv

ROOT = Path(__file__).resolve().parents[2]
TOPICS = "Computer science,Medicine,Tennis"
THREE = json.dumps(TARGET)
HEAVY = ("torch", "sentence_transformers", "transformers", "chromadb", "langchain_chroma")


def _rows(out: Path) -> list[dict[str, str]]:
    with (out / "sweep.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """The default grid on 3 topics x 12 documents per gender, 12 questions, 20 draws each."""
    data = data_path_or_skip()
    root = tmp_path_factory.mktemp("sweep")
    out, cache = root / "out", root / "cache"
    args = [
        "sweep", "--data", str(data), "--topics", TOPICS, "--per-group", "12", "--trials", "12",
        "--samples", "20", "--out", str(out), "--cache-dir", str(cache), "--no-progress",
    ]  # fmt: skip
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(args) == 0
    assert "wall time per phase: pools" in printed.getvalue()
    # the console table names its columns (a user's trial: numbers without a header)
    assert "ranker" in printed.getvalue() and "nDCG@5" in printed.getvalue()
    return out, cache, args


def test_one_row_per_setting_with_every_column(sweep_run: tuple[Path, Path, list[str]]) -> None:
    out, _, _ = sweep_run
    rows = _rows(out)
    settings = expand(default_grid())
    assert list(rows[0]) == list(COLUMNS)
    assert [(r["ranker"], r["setting"]) for r in rows] == [(s.ranker, s.label) for s in settings]
    for row in rows:
        streamed = row["ranker"] == "amortized"
        assert row["mode"] == ("stream" if streamed else "sampled")
        assert row["rankings_per_question"] == ("1" if streamed else "20")
        assert (row["questions"], row["k"]) == ("12", "5")
        for name in ("disparity", "amortized_disparity", "ndcg_at_k", "precision_at_k"):
            assert 0.0 <= float(row[name]) <= 1.0, (row, name)
        # A stream's amortized disparity is at most the mean of its rankings' disparities.
        assert float(row["amortized_disparity"]) <= float(row["disparity"]) + 1e-12
        assert (row["ee_loss"] == "") == streamed  # EE-L only where rankings were sampled
        assert row["pareto"] in ("True", "False") and row["pareto_amortized"] in ("True", "False")
    assert (out / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob("*.tmp*"))


def test_the_marked_front_is_the_pareto_front_of_the_rows(
    sweep_run: tuple[Path, Path, list[str]],
) -> None:
    rows = _rows(sweep_run[0])
    for x, column in (("disparity", "pareto"), ("amortized_disparity", "pareto_amortized")):
        points = [(float(r[x]), float(r["ndcg_at_k"])) for r in rows]
        marked = [r[column] == "True" for r in rows]
        assert any(marked)
        for (d, u), on in zip(points, marked, strict=True):
            dominated = any(d2 <= d and u2 >= u and (d2 < d or u2 > u) for d2, u2 in points)
            assert on is not dominated


def test_figures_follow_the_knobs(sweep_run: tuple[Path, Path, list[str]]) -> None:
    rows = {(r["ranker"], r["setting"]): r for r in _rows(sweep_run[0])}
    standard = rows[("standard", "")]
    # Plackett-Luce at alpha 1 spreads exposure: lower nDCG than the standard order.
    assert float(rows[("stochastic", "alpha=1")]["ndcg_at_k"]) < float(standard["ndcg_at_k"])
    rep = rows[("representative_stochastic", "alpha=4;gain=2")]
    assert float(rep["disparity"]) < float(standard["disparity"])


def test_a_point_is_the_cores_metrics_over_every_draw(
    sweep_run: tuple[Path, Path, list[str]],
) -> None:
    """Scoring each distinct ranking once, weighted by its count, equals scoring every draw;
    a deterministic ranker's 20 draws give its one ranking's figures; the amortized ranker
    starts every point on a fresh ledger."""
    _, cache, _ = sweep_run
    study = StudyConfig(
        data=data_path_or_skip(), llm="none", cache_dir=cache, topics=tuple(TOPICS.split(",")),
        per_group=12, trials=12, progress=False,
    )  # fmt: skip
    pools = load_pools(study, lambda _: None)
    setting = Setting("stochastic", (("alpha", 2.0),))
    point = sweep_point(setting, pools, 5, 20, seed=7)
    ranker = setting.build(7)
    disparities, ndcgs, streams = [], [], []
    for pool in pools:
        rankings = ranker.sample(pool.scores, pool.groups, 5, 20, rng=pool.trial.seed)
        shown = [[pool.groups[i] for i in row] for row in rankings.tolist()]
        streams.append(shown)
        disparities.append(
            np.mean([exposure_disparity(s, protected="female", target_share=0.5) for s in shown])
        )
        ndcgs.append(
            np.mean([ndcg_at_k(pool.relevant[r], 5, n_relevant=pool.n_relevant) for r in rankings])
        )
    assert point["disparity"] == pytest.approx(np.mean(disparities), abs=1e-12)
    assert point["ndcg_at_k"] == pytest.approx(np.mean(ndcgs), abs=1e-12)
    per_stream = [
        amortized_disparity([s[j] for s in streams], protected="female", target_share=0.5)
        for j in range(20)
    ]
    assert point["amortized_disparity"] == pytest.approx(np.mean(per_stream), abs=1e-12)
    standard = Setting("standard")
    many, one = sweep_point(standard, pools, 5, 20, 7), sweep_point(standard, pools, 5, 1, 7)
    assert many["rankings_per_question"] == 20
    for name in ("disparity", "amortized_disparity", "ndcg_at_k", "precision_at_k", "ee_loss"):
        assert many[name] == pytest.approx(one[name], rel=1e-12), name
    amortized = Setting("amortized", (("gain", 80.0), ("alpha", 8.0)))
    assert sweep_point(amortized, pools, 5, 20, 7) == sweep_point(amortized, pools, 5, 20, 7)


def test_a_users_three_group_data_set_sweeps_against_its_target(tmp_path: Path) -> None:
    """``--data mine.csv --group-key region --target ...``: the sweep reads the data set
    through the study's seam; FA*IR (binary only) is left out by default, forced exposure runs
    at the data set's target, and every disparity is against the three-group target."""
    mine = write_three_group_csv(tmp_path / "mine.csv")
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = [
        "sweep", "--data", str(mine), "--group-key", "region", "--target", THREE,
        "--per-group", "8", "--trials", "8", "--samples", "10", "--out", str(out),
        "--cache-dir", str(cache), "--no-progress",
    ]  # fmt: skip
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(args) == 0
    rows = _rows(out)
    rankers = {row["ranker"] for row in rows}
    assert rankers == set(default_grid()) - {"fair"}
    # said in the run's own output (a user trial: left out with no word)
    said = [line for line in printed.getvalue().splitlines() if "left out of the sweep" in line]
    why = "the data set's target has 3 groups (a 0.4, b 0.3, c 0.3)"
    assert said == [
        "left out of the sweep: forced_exposure:target_share: sets the protected group's share, "
        f"which needs a binary target; {why}; forced_exposure runs at the data set's target",
        f"left out of the sweep: fair: it takes a binary target only; {why}",
    ]
    assert [row["setting"] for row in rows if row["ranker"] == "forced_exposure"] == [""]
    dataset = custom_dataset(TARGET, name="custom", group_key="region")
    study = StudyConfig(
        data=mine, dataset=dataset, llm="none", cache_dir=cache, per_group=8, trials=8,
        progress=False,
    )  # fmt: skip
    pools = load_pools(study, lambda _: None)
    assert {g for pool in pools for g in pool.groups} <= set(TARGET)
    shown = [
        [pool.groups[i] for i in np.argsort(-pool.scores, kind="stable")[:5]] for pool in pools
    ]
    standard = next(row for row in rows if row["ranker"] == "standard")
    expected = np.mean([exposure_disparity(s, target=TARGET) for s in shown])
    assert float(standard["disparity"]) == pytest.approx(expected, abs=1e-12)
    assert float(standard["amortized_disparity"]) == pytest.approx(
        amortized_disparity(shown, target=TARGET), abs=1e-12
    )
    forced = next(row for row in rows if row["ranker"] == "forced_exposure")
    assert float(forced["disparity"]) < float(standard["disparity"])


def test_grid_flag_replaces_one_rankers_grid_and_reuses_the_index(
    sweep_run: tuple[Path, Path, list[str]], tmp_path: Path
) -> None:
    _, _, args = sweep_run
    out = tmp_path / "out"
    argv = list(args)
    argv[argv.index("--out") + 1] = str(out)
    argv += ["--rankers", "stochastic,amortized", "--grid", "stochastic:alpha=1,8"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(argv) == 0
    assert "(0 embedded now)" in printed.getvalue()
    rows = _rows(out)
    assert [(r["ranker"], r["setting"]) for r in rows] == [
        ("stochastic", "alpha=1"),
        ("stochastic", "alpha=8"),
        *((s.ranker, s.label) for s in expand({"amortized": default_grid()["amortized"]})),
    ]
    assert sum(r["pareto"] == "True" for r in rows) >= 1


def test_pareto_front_on_hand_made_points() -> None:
    disparity = [0.10, 0.05, 0.20, 0.05, 0.30, 0.01, 0.01]
    ndcg = [0.60, 0.60, 0.70, 0.50, 0.65, 0.40, 0.40]
    # (0.10, 0.60) is beaten by (0.05, 0.60); (0.05, 0.50) by (0.05, 0.60); (0.30, 0.65) by
    # (0.20, 0.70); the two equal points (0.01, 0.40) are both on the front.
    assert pareto_front(disparity, ndcg) == [False, True, True, False, False, True, True]
    assert pareto_front([], []) == []
    assert pareto_front([0.3], [0.1]) == [True]


CHILD = r"""
import contextlib, io, json, sys
from fairrag_study.cli import main
from fairrag_study.dataset import custom_dataset
from fairrag_study.sweep_options import grid_flag
results = []
for case in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(case)
        except SystemExit as exit:
            code = exit.code
    results.append({"code": code, "stderr": err.getvalue()})
heavy = sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)
print(json.dumps({"results": results, "heavy": heavy}))
"""


def test_every_bad_flag_exits_2_naming_it_before_loading_anything(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file.txt"
    a_file.write_text("not a folder")
    cases = [
        (["--samples", "0"], "--samples", "expected an integer >= 1"),
        (["--trials", "x"], "--trials", "is not an integer"),
        (["--k", "0"], "--k", "expected an integer >= 1"),
        (["--rankers", "standard,best"], "--rankers", "unknown rankers ['best']"),
        (["--grid", "best:alpha=1"], "--grid", "names no known ranker 'best'"),
        (["--grid", "stochastic:gain=1"], "--grid", "not a knob of stochastic (its knobs: alpha)"),
        (["--grid", "stochastic:alpha=1,x"], "--grid", "is not a comma-separated list of numbers"),
        (["--grid", "stochastic:alpha=0"], "--grid", "alpha=0 is not accepted: alpha must be"),
        (["--grid", "fair:p=2"], "--grid", "p must be in [0, 1]"),
        (["--grid", "amortized:gain=-1"], "--grid", "gain must be a finite number >= 0"),
        (["--grid", "stochastic:alpha=1;alpha=2"], "--grid", "sets alpha twice"),
        # a user trial: one row whose setting said nothing, or two identical rows on the front
        (["--grid", "stochastic"], "--grid", "gives none of stochastic's knobs (alpha)"),
        (["--grid", "stochastic:alpha=1,1"], "--grid", "alpha repeats 1"),
        (["--grid", "stochastic:alpha=1", "--grid", "stochastic:alpha=2"], "--grid", "twice"),
        (["--rankers", "standard", "--grid", "stochastic:alpha=1"], "--grid", "not among"),
        (["--out", str(a_file)], "--out", "is a file, not a folder"),
        (["--cache-dir", "/proc/fairrag-cache"], "--cache-dir", "is not writable"),
        (["--data", str(tmp_path / "missing.csv")], "--data", "is not a file"),
        (["--group-key", "region"], "--group-key", "needs --target"),
        (["--target", THREE, "--rankers", "standard,fair"], "--rankers/--grid", "binary target"),
        (
            ["--target", THREE, "--grid", "forced_exposure:target_share=0.3"],
            "--rankers/--grid",
            "forced_exposure:target_share set the protected group's share",
        ),
    ]
    out = tmp_path / "out"
    base = ["sweep", "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    argvs = [[*base, *flags] for flags, _, _ in cases]
    child = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(argvs), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
    )
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout.strip().splitlines()[-1])
    for (flags, flag, words), result in zip(cases, report["results"], strict=True):
        assert result["code"] == 2, (flags, result)
        assert f"argument {flag}: " in result["stderr"], (flags, result["stderr"])
        assert words in result["stderr"], (flags, result["stderr"])
        assert "Traceback" not in result["stderr"]
    assert report["heavy"] == [], "a flag was checked only after loading the model or index"
    assert not out.exists() and not (tmp_path / "cache").exists()


def test_good_grids_parse_to_their_values() -> None:
    assert grid_flag("representative_stochastic: alpha=1,2 ; gain=0") == (
        "representative_stochastic",
        {"alpha": (1.0, 2.0), "gain": (0.0,)},
    )
    assert grid_flag("standard") == ("standard", {})
    assert grid_flag("fair:p=0.7") == ("fair", {"p": (0.7,)})
    # a user trial: spread, one of the amortized ranker's knobs in its guide, was refused
    assert grid_flag("amortized:spread=2,4") == ("amortized", {"spread": (2.0, 4.0)})
    with pytest.raises(argparse.ArgumentTypeError, match="spread"):
        grid_flag("amortized:spread=0.5")  # the ranker's own rule: a number >= 1
    settings = expand({"amortized": {"gain": (20.0, 80.0), "alpha": (8.0,)}})
    assert [s.label for s in settings] == ["gain=20;alpha=8", "gain=80;alpha=8"]
    assert all(s.streamed for s in settings)


def test_a_sweep_replaces_only_its_own_files(
    sweep_run: tuple[Path, Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder holding someone's ``sweep.csv`` (or a study's outputs) was written into and
    the file silently replaced; an earlier sweep's folder is still run again in place."""
    out, _, args = sweep_run
    assert (out / ".fairrag-sweep").is_file()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sweep.csv").write_text("my precious results\n")
    at = args.index("--out") + 1
    assert main([*args[:at], str(mine), *args[at + 1 :]]) == 2
    assert "holds files a sweep did not write: sweep.csv" in capsys.readouterr().err
    assert (mine / "sweep.csv").read_text() == "my precious results\n"
    from fairrag_study.sweep import check_sweep_folder

    check_sweep_folder(out)  # its own earlier outputs: no error
    (out / "sweep.csv.tmp").write_text("a sweep killed while writing")
    check_sweep_folder(out)  # and what a killed one left
    (out / "sweep.csv.tmp").unlink()
    (out / ".fairrag-sweep").unlink()  # as a sweep before the mark wrote it: its header tells
    check_sweep_folder(out)

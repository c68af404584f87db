"""Every `fairrag study` flag is checked before any work: a bad value exits 2 naming the flag,
with no model, index or data loaded and nothing created."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairrag_core import rankers as registry
from fairrag_core.exposure import FittedCurve
from fairrag_core.validation import check_alpha
from fairrag_study.cli import build_parser
from fairrag_study.dataset import custom_dataset
from fairrag_study.study import StudyConfig, run_study

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "sentence_transformers", "transformers", "chromadb", "langchain_chroma")
"""Modules a study loads for its work; none may be imported to reject a flag."""

# A child runs every case through main() and reports its exit status, stderr and what it
# imported: one interpreter start for all cases, and a clean sys.modules to look at.
CHILD = r"""
import contextlib, io, json, sys
from fairrag_study.cli import main
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


MORE_GROUPS = {"female": 1.3, "male": 0.8, "None": 1.0}
"""Factors of a curve fitted on a group the TREC data does not hold."""


def _curve_file(path: Path, factors: dict[str, float]) -> Path:
    """A per-group fitted curve file of five positions with ``factors``."""
    curve = FittedCurve((0.3, 0.25, 0.2, 0.15, 0.1), factors=tuple(factors.items()))
    path.write_text(json.dumps(curve.as_dict()))
    return path


def _bad_cases(tmp_path: Path) -> list[tuple[list[str], str, str]]:
    """``(extra flags, flag named, words of the message)``."""
    a_file = tmp_path / "a-file.txt"
    a_file.write_text("not a folder")
    mine = tmp_path / "mine.csv"
    mine.write_text("q_text,doc_id,region,doc_title,first sentence\n")
    three = '{"a": 0.4, "b": 0.3, "c": 0.3}'
    regions = ["--data", str(mine), "--target", three, "--group-key", "region"]
    # a per-group curve of other groups than the data's
    groups_ab = _curve_file(tmp_path / "groups-ab.json", {"a": 1.1, "b": 0.9})
    # a factor for a group the data does not hold: the binary target's OTHERS bucket (male and
    # None) would have two factors (it failed after the trials, naming no flag)
    groups_more = _curve_file(tmp_path / "groups-more.json", MORE_GROUPS)
    return [
        (
            ["--exposure", f"fitted:{groups_ab}"],
            "--exposure",
            "the data set's groups are ['female', 'male']",
        ),
        (["--exposure", f"fitted:{groups_more}"], "--exposure", "leave 2 factors for the target"),
        (["--target", "a=0.5"], "--target", "is not JSON"),
        (["--target", '{"a": 1}'], "--target", "two or more"),
        (["--target", '{"a": 0.5, "b": "half"}'], "--target", "non-numeric shares"),
        (["--target", '{"a": 0.7, "b": 0.7}'], "--target", "is not accepted"),
        (["--group-key", "region"], "--group-key", "needs --target"),
        (["--text-column", "bio"], "--text-column", "needs --target"),
        (["--group-key", " "], "--group-key", "expected a column name"),
        (["--target", three, "--protected", "z"], "--protected", "is not a group of --target"),
        (["--data", str(mine), "--target", three], "--group-key", "column 'gender' is not in"),
        ([*regions, "--text-column", "bio"], "--text-column", "column 'bio' is not in"),
        (["--trials", "0"], "--trials", "expected an integer >= 1"),
        (["--trials", "many"], "--trials", "is not an integer"),
        (["--k", "0"], "--k", "expected an integer >= 1"),
        (["--pool-size", "0"], "--pool-size", "expected an integer >= 1"),
        (["--per-group", "-3"], "--per-group", "expected an integer >= 1"),
        (["--seed", "-1"], "--seed", "expected an integer >= 0"),
        (["--alpha", "nan"], "--alpha", "finite number > 0"),
        (["--alpha", "0"], "--alpha", "finite number > 0"),
        (["--alpha", "inf"], "--alpha", "finite number > 0"),
        (["--alpha", "5000"], "--alpha", "alpha must be at most"),  # the core's bound
        (["--llm", "gpt"], "--llm", "fake, local[:<name>] or openai:<model>"),
        (["--llm", "openai:"], "--llm", "fake, local[:<name>] or openai:<model>"),
        (["--rankers", ","], "--rankers", "holds an empty name"),
        (["--rankers", ""], "--rankers", "holds an empty name"),
        (["--rankers", "standard,standard"], "--rankers", "more than once"),
        (["--rankers", "standard,best"], "--rankers", "unknown rankers ['best']"),
        ([*regions, "--rankers", "standard,fair"], "--rankers", "'fair' cannot rank"),
        (["--samples", "0"], "--samples", "expected an integer >= 1"),
        (["--samples", "10" + "0" * 11], "--samples", "expected an integer from 1 to 100,000"),
        (["--max-tokens", "0"], "--max-tokens", "expected an integer >= 1"),
        (["--topics", "Tennis,"], "--topics", "holds an empty name"),
        (["--chroma-timeout", "inf"], "--chroma-timeout", "seconds from 0.1 to 86400"),
        (["--chroma-timeout", "0"], "--chroma-timeout", "seconds from 0.1 to 86400"),
        (["--chroma-timeout", "1e300"], "--chroma-timeout", "seconds from 0.1 to 86400"),
        (["--llm-timeout", "-5"], "--llm-timeout", "seconds from 0.1 to 86400"),
        (["--llm-timeout", "nan"], "--llm-timeout", "seconds from 0.1 to 86400"),
        (["--target", '{"a": 0.5, "a": 0.5}'], "--target", "names group 'a' more than once"),
        (["--llm-retries", "-1"], "--llm-retries", "expected an integer >= 0"),
        (["--chroma-port", "70000"], "--chroma-port", "expected a port 1 to 65535"),
        (["--base-url", "localhost:8000"], "--base-url", "http:// or https://"),
        (["--out", str(a_file)], "--out", "is a file, not a folder"),
        (["--out", str(a_file / "sub")], "--out", "is a file, not a folder"),
        # Root writes through any mode bits, so the unwritable folder is one no one can write.
        (["--out", "/proc/fairrag-study-out"], "--out", "is not writable"),
        (["--cache-dir", str(a_file)], "--cache-dir", "is a file, not a folder"),
        (["--cache-dir", "/proc/fairrag-cache"], "--cache-dir", "is not writable"),
        (["--data", str(tmp_path / "missing.csv")], "--data", "is not a file"),
        # flag arithmetic is checked before --out is claimed (a researcher's trial: it was
        # refused after, and a previous study's outputs in --out were gone)
        (
            ["--llm", "fake", "--trials", "8", "--position-curve", "20"],
            "--position-curve",
            "20 questions, but the study's trials hold 8 (--trials 8)",
        ),
    ]


def test_every_bad_flag_exits_2_naming_it_before_loading_anything(tmp_path: Path) -> None:
    out = tmp_path / "out"
    base = ["study", "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    cases = _bad_cases(tmp_path)
    argvs = [[*base, *flags] for flags, _, _ in cases]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(argvs), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
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


@pytest.mark.parametrize("flag", ["--chroma-timeout", "--llm-timeout"])
@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("nan", "nan is not a finite number"),
        ("inf", "inf is not a finite number"),
        ("-inf", "-inf is not a finite number"),
        ("0", "0 is out of range"),
        ("-1", "-1 is out of range"),
        ("1e-300", "1e-300 is out of range"),  # reached the server as "no server answers"
        ("1e10", "1e+10 is out of range"),  # OverflowError from httpcore, exit 1
        ("1e300", "1e+300 is out of range"),
        ("ten", None),
    ],
)
def test_a_timeout_outside_its_range_is_refused_when_parsed(
    flag: str, value: str, why: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25: a timeout the HTTP client cannot use is a flag error naming the flag and the
    accepted range (0.1 s to a day), not a traceback or a misleading "no server"."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["study", f"{flag}={value}"])  # -inf is not an option
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"argument {flag}: {value!r} " in err
    assert "expected a finite number of seconds from 0.1 to 86400" in err
    assert (why or "is not a number") in err


@pytest.mark.parametrize("value", ["5000", "1100", "1025", "4", "1e-9", "-1"])
def test_alpha_is_the_cores_rule(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI accepts exactly the alphas `fairrag_core.validation.check_alpha` accepts."""
    try:
        check_alpha(float(value))
        core_accepts = True
    except (TypeError, ValueError):
        core_accepts = False
    args = ["study", "--alpha", value]
    if core_accepts:
        assert build_parser().parse_args(args).alpha == float(value)
    else:
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args(args)
        assert exited.value.code == 2
        assert "argument --alpha" in capsys.readouterr().err


def test_rankers_are_checked_against_the_registry_when_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ranker registered in the core is accepted without a change here."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["study", "--rankers", "standard,newcomer"])
    monkeypatch.setitem(registry.RANKERS, "newcomer", registry.RANKERS["standard"])
    parsed = build_parser().parse_args(["study", "--rankers", "standard, newcomer"])
    assert parsed.rankers == ("standard", "newcomer")
    # By default every ranker that takes the data set's target (resolved by run_study);
    # "paper" names the paper's four, whatever else the registry holds.
    assert build_parser().parse_args(["study"]).rankers is None
    assert build_parser().parse_args(["study", "--rankers", "paper"]).rankers == (
        "standard",
        "stochastic",
        "forced_exposure",
        "representative_stochastic",
    )


def test_a_curve_with_a_group_the_data_lacks_is_refused_only_for_rankers_aiming_at_exposure(
    tmp_path: Path,
) -> None:
    """Only representative_stochastic and amortized read a per-group curve's factors for their
    target (``targets_exposure``); a study of other rankers is not refused for it."""
    exposure = f"fitted:{_curve_file(tmp_path / 'groups-more.json', MORE_GROUPS)}"
    assert StudyConfig(rankers=("standard", "fair"), exposure=exposure).exposure == exposure
    assert [n for n in registry.available_rankers() if registry.RANKERS[n].targets_exposure] == [
        "representative_stochastic",
        "amortized",
    ]
    for name in ("representative_stochastic", "amortized"):
        with pytest.raises(ValueError, match=f"leave 2 factors.*as {name} would read it"):
            StudyConfig(rankers=("standard", name), exposure=exposure)
    # exactly the data set's groups: accepted
    two = _curve_file(tmp_path / "groups-two.json", {"female": 1.3, "male": 0.8})
    assert StudyConfig(rankers=("amortized",), exposure=f"fitted:{two}").exposure


def test_good_flags_parse_to_their_values(tmp_path: Path) -> None:
    parsed = build_parser().parse_args(
        ["study", "--trials", "8", "--k", "3", "--pool-size", "20", "--seed", "0",
         "--alpha", "2.5", "--llm", "openai:gpt-4.1-mini", "--llm-timeout", "1.5",
         "--llm-retries", "0", "--chroma-timeout", "10", "--topics", "Tennis, Medicine",
         "--base-url", "http://127.0.0.1:9/v1"]
    )  # fmt: skip
    assert (parsed.trials, parsed.k, parsed.pool_size, parsed.seed) == (8, 3, 20, 0)
    assert (parsed.alpha, parsed.llm, parsed.llm_timeout, parsed.llm_retries) == (
        2.5,
        "openai:gpt-4.1-mini",
        1.5,
        0,
    )
    assert parsed.topics == ("Tennis", "Medicine")
    assert math.isfinite(parsed.chroma_timeout)
    for value in ("0.1", "86400"):  # the ends of the timeouts' range
        ends = build_parser().parse_args(
            ["study", "--chroma-timeout", value, "--llm-timeout", value]
        )
        assert ends.chroma_timeout == ends.llm_timeout == float(value)
    defaults = build_parser().parse_args(["study"])
    assert (defaults.llm_timeout, defaults.llm_retries) == (None, None)  # the library's 60 s, 2


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("trials", 0, "trials must be an integer >= 1"),
        ("k", True, "k must be an integer >= 1"),
        ("seed", -1, "seed must be an integer >= 0"),
        ("alpha", math.nan, "alpha must be a finite number > 0"),
        ("rankers", ("standard", "standard"), "must name each ranker once"),
        ("rankers", ("best",), "unknown rankers ['best']"),
        ("rankers", ("fair",), "rankers: 'fair' cannot rank"),
        ("samples", 0, "samples (rankings drawn per question) must be an integer >= 1"),
        ("samples", 2.5, "samples (rankings drawn per question) must be an integer >= 1"),
        ("llm_timeout", math.inf, "llm_timeout must be a finite number of seconds from 0.1"),
        ("llm_retries", -1, "llm_retries must be an integer from 0 to 20"),
        ("chroma_timeout", 0, "chroma_timeout must be a finite number of seconds from 0.1"),
    ],
)
def test_run_study_checks_its_configuration_before_any_work(
    field: str, value: object, words: str, tmp_path: Path
) -> None:
    extra = {"dataset": custom_dataset({"a": 0.4, "b": 0.6})} if value == ("fair",) else {}
    with pytest.raises(ValueError) as caught:  # when the configuration is made
        run_study(
            StudyConfig(
                out=tmp_path / "out", cache_dir=tmp_path / "cache", **{field: value}, **extra
            )
        )
    assert words in str(caught.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 0.0, 1e-300, 1e300])
def test_library_timeouts_are_range_checked_like_the_flags(value, tmp_path):
    """The library paths the flags guard: ``connect_chroma_server(timeout=...)`` and
    ``StudyConfig(chroma_timeout=...)`` refuse what ``--chroma-timeout`` refuses (1e300 passed
    "> 0" and overflowed in httpcore; nan and 0 reached it)."""
    from fairrag_study.index import connect_chroma_server
    from fairrag_study.study import StudyConfig, run_study

    with pytest.raises(ValueError, match=r"timeout must be a finite number of seconds from 0\.1"):
        connect_chroma_server("127.0.0.1", 9, timeout=value)
    with pytest.raises(ValueError, match="chroma_timeout must be a finite number of seconds"):
        run_study(StudyConfig(out=tmp_path / "out", chroma_timeout=value), log=lambda _: None)


def test_max_tokens_reaches_the_study(monkeypatch, tmp_path):
    """``--max-tokens`` bounds each answer (issue 22: the flag was a StudyConfig field only)."""
    import fairrag_study.study as study_module
    from fairrag_study.cli import main

    seen = []

    def capture(config, log=print):
        seen.append(config)
        raise SystemExit(0)

    monkeypatch.setattr(study_module, "run_study", capture)
    with pytest.raises(SystemExit):
        main(
            [
                "study",
                "--llm",
                "openai:gpt-4o-mini",
                "--max-tokens",
                "64",
                "--out",
                str(tmp_path / "o"),
            ]
        )
    assert seen[0].max_tokens == 64


def test_a_fitted_curve_inside_out_is_refused_and_kept(tmp_path: Path, capsys) -> None:
    """A researcher's trial: ``--exposure fitted:DIR/exposure_fitted.json --out DIR`` (the
    curve run's folder, as the guide's workflow reaches it) deleted the curve when ``--out``
    was claimed, then failed naming neither flag. It is refused before, and kept."""
    from fairrag_study.cli import main

    out = tmp_path / "curve-run"
    out.mkdir()
    curve = _curve_file(out / "exposure_fitted_groups.json", {"female": 1.1, "male": 0.9})
    argv = ["study", "--llm", "fake", "--exposure", f"fitted:{curve}", "--out", str(out)]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--no-progress"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --exposure: " in err and "whose files this run replaces" in err
    assert curve.exists() and sorted(p.name for p in out.iterdir()) == [curve.name]
    with pytest.raises(ValueError, match=r"exposure: .* is in the output folder"):
        StudyConfig(exposure=f"fitted:{curve}", out=out)
    assert StudyConfig(exposure=f"fitted:{curve}", out=tmp_path / "elsewhere").exposure

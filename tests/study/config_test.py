"""The study's one configuration: made once, each named ranker built once when it is made."""

from __future__ import annotations

from pathlib import Path

import pytest

import fairrag_core.target as target_module
from fairrag_study.cli import build_parser
from fairrag_study.config import StudyConfig
from fairrag_study.dataset import custom_dataset


@pytest.fixture
def target_builds(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every fairness target built while the test runs."""
    built: list[object] = []
    original = target_module.Target.__post_init__

    def counted(self: target_module.Target) -> None:
        built.append(self)
        original(self)

    monkeypatch.setattr(target_module.Target, "__post_init__", counted)
    return built


def test_each_named_ranker_is_built_once_when_the_config_is_made(
    target_builds: list[object],
) -> None:
    dataset = custom_dataset({"a": 0.5, "b": 0.5})
    target_builds.clear()
    config = StudyConfig(dataset=dataset, rankers=("standard", "forced_exposure"))
    assert len(target_builds) == 2  # one per ranker, each needing the target
    assert config.ranker_names == ("standard", "forced_exposure")
    assert config.left_out == {}


def test_the_cli_makes_the_config_once_from_its_flags(
    target_builds: list[object], tmp_path: Path
) -> None:
    data = tmp_path / "mine.csv"
    data.write_text("q_text,doc_id,gender,doc_title,first sentence\n")
    argv = [
        "study", "--data", str(data), "--target", '{"a": 0.5, "b": 0.5}', "--rankers",
        "standard,forced_exposure", "--out", str(tmp_path / "out"), "--trials", "3",
    ]  # fmt: skip
    args = build_parser("study").parse_args(argv)
    args.check(args)
    # --target's check, the data set, then one per ranker (was 8: every check rebuilt them)
    assert len(target_builds) == 4
    assert isinstance(args.config, StudyConfig) and args.config.trials == 3
    assert args.config.ranker_names == ("standard", "forced_exposure")


def test_a_refused_field_names_the_flag_on_the_cli_and_the_field_in_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match="threads is only used with llm 'local'"):
        StudyConfig(llm="none", threads=2)
    args = build_parser("study").parse_args(["study", "--llm", "none", "--threads", "2"])
    with pytest.raises(SystemExit):
        args.check(args)
    assert "argument --threads: only used with --llm local" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "field", "words"),
    [
        (["--corpus", "natural", "--per-group", "5"], "per_group", "only used with --corpus"),
        (["--chroma-port", "1234"], "chroma_port", "only used with --chroma-host"),
        (["--chroma-timeout", "0.5"], "chroma_timeout", "only used with --chroma-host"),
    ],
)
def test_flags_a_run_would_not_read_are_refused(
    flags: list[str], field: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--per-group`` on the natural corpus (which embedded all 19,466 documents anyway, with
    ``per_group: 5`` in run.json) and a Chroma port or timeout without a server were ignored
    without a word, while other unread flags were refused (a researcher's trial)."""
    args = build_parser("study").parse_args(["study", *flags])
    with pytest.raises(SystemExit):
        args.check(args)
    flag = "--" + field.replace("_", "-")
    assert f"argument {flag}: {words}" in capsys.readouterr().err
    with pytest.raises(ValueError, match=f"{field} is only used with"):
        StudyConfig(**{"per_group": 5, "corpus": "natural"} if field == "per_group" else {field: 9})
    assert StudyConfig(corpus="balanced", per_group=5).per_group == 5
    assert StudyConfig(chroma_host="127.0.0.1", chroma_port=1234).chroma_port == 1234

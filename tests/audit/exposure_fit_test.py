"""``fairrag audit --fit-exposure FILE``: the position curve of a deployment's answered records,
written as a fitted exposure model the core reads (docs/SPEC.md, "Exposure model" → Fitted)."""

from __future__ import annotations

import gzip
import json

import pytest

from fairrag_audit.cli import main
from fairrag_audit.exposure_fit import fit_exposure_from_logs
from fairrag_core.exposure import load_fitted_curve, make_exposure_model
from tests.audit.logs import record

TITLES = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Edsger Dijkstra"]
GROUPS = ["female", "male", "female", "male"]


def _answered(query: str, cited: list[int]) -> dict[str, object]:
    return record(
        GROUPS,
        query=query,
        titles=TITLES,
        answer="\n".join(f"- {TITLES[i]}" for i in cited),
        attributed_sources=[{"title": TITLES[i], "group": GROUPS[i]} for i in cited],
        model="fake",
    )


def _log(path, records) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for item in records:
            handle.write(json.dumps(item) + "\n")
        handle.write("not json\n")


def test_the_cli_writes_the_curve_of_the_answered_records(tmp_path, capsys):
    # Position i attributed in (4, 3, 2, 1) of 4 answers; one record without an answer.
    cited = [[0, 1, 2, 3], [0, 1, 2], [0, 1], [0]]
    records = [_answered(f"q{n}", c) for n, c in enumerate(cited)]
    records.append(record(GROUPS, query="retrieval only", titles=TITLES))
    _log(tmp_path / "log.jsonl.gz", records)
    out = tmp_path / "curve.json"
    code = main(["audit", str(tmp_path / "log.jsonl.gz"), "--out", str(tmp_path / "report"),
                 "--fit-exposure", str(out)])  # fmt: skip
    assert code == 0
    assert f"-> {out}" in capsys.readouterr().out
    curve = load_fitted_curve(out)
    p = [(a + 0.5) / 5 for a in (4, 3, 2, 1)]
    assert curve.weights == pytest.approx(tuple(x / sum(p) for x in p), abs=1e-6)
    assert curve.provenance["answers"] == 4 and curve.provenance["units"] == 4
    assert "confounded" in curve.provenance["data"]
    assert make_exposure_model(f"fitted:{out}").weights(4).tolist() == list(curve.weights)


def test_logs_without_answers_are_a_clear_error(tmp_path):
    _log(tmp_path / "log.jsonl.gz", [record(GROUPS, query="q", titles=TITLES)])
    with pytest.raises(ValueError, match="holds a record with an answer"):
        fit_exposure_from_logs([tmp_path], tmp_path / "curve.json")

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
        for item in records:  # "" is a blank line
            handle.write((json.dumps(item) if item != "" else "  ") + "\n")
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


def test_a_partials_only_run_writes_the_curve_too(tmp_path, capsys):
    """A user trial: ``--fit-exposure`` with ``--partials-out`` and no ``--out`` wrote nothing,
    exit 0, not a word."""
    cited = [[0, 1, 2, 3], [0, 1, 2], [0, 1], [0]]
    _log(tmp_path / "log.jsonl.gz", [_answered(f"q{n}", c) for n, c in enumerate(cited)])
    out = tmp_path / "curve.json"
    code = main(["audit", str(tmp_path / "log.jsonl.gz"), "--partials-out",
                 str(tmp_path / "partials"), "--fit-exposure", str(out)])  # fmt: skip
    assert code == 0 and f"-> {out}" in capsys.readouterr().out
    assert load_fitted_curve(out).provenance["answers"] == 4


def test_logs_without_answers_are_a_clear_error(tmp_path):
    _log(tmp_path / "log.jsonl.gz", [record(GROUPS, query="q", titles=TITLES)])
    with pytest.raises(ValueError, match="holds a record with an answer"):
        fit_exposure_from_logs([tmp_path], tmp_path / "curve.json")


def test_the_curve_is_fitted_on_the_records_the_audit_counted_only(tmp_path, capsys):
    """A researcher's trial: ``--fit-exposure`` fitted every answer of the logs, also those
    the audit left out: with ``--since`` after them all ("nothing was audited") or every record
    refused (``schema: 3``), a curve of 36 answers was written. It fits the audit's records."""
    counted = [_answered(f"q{n}", c) for n, c in enumerate([[0, 1, 2, 3], [0, 1], [0]])]
    for item in counted:
        item["timestamp"] = "2026-06-01T00:00:00+00:00"
    old = [{**_answered("old", [3]), "timestamp": "2020-01-01T00:00:00+00:00"}] * 5
    newer = [{**_answered("newer", [2]), "timestamp": "2026-06-01T00:00:00+00:00", "schema": 99}]
    _log(tmp_path / "log.jsonl.gz", [*old, counted[0], *newer, "", *counted[1:]])
    out = tmp_path / "curve.json"
    code = main(["audit", str(tmp_path / "log.jsonl.gz"), "--out", str(tmp_path / "report"),
                 "--since", "2026-01-01", "--fit-exposure", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr()
    curve = load_fitted_curve(out)
    assert curve.provenance["answers"] == 3
    p = [(a + 0.5) / 4 for a in (3, 2, 1, 1)]  # the 3 answers counted, positions 1-4
    assert curve.weights == pytest.approx(tuple(x / sum(p) for x in p), abs=1e-6)
    # nothing counted: no curve, and the exit says so
    later = ["--since", "2030-01-01", "--fit-exposure", str(tmp_path / "none.json")]
    code = main(["audit", str(tmp_path / "log.jsonl.gz"), "--out", str(tmp_path / "later"), *later])
    assert code == 2 and not (tmp_path / "none.json").exists()
    assert "no record was audited" in capsys.readouterr().err

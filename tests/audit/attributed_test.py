"""The audit reports the attributed generation metrics (docs/SPEC.md "Attribution", "Auditing
logs") on logs the real LangChain handler writes, with answers citing context entry numbers,
bracketed titles or nothing (names only): the paper's generation parity is n/a for every
ranker, the attributed one is measured, and every figure of the report is recomputed here from
the logged records (numpy, scipy, the core's summary). Logs written before the attribution
still audit, with the attributed metrics n/a and said why."""

from __future__ import annotations

import json
import math
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from langchain_core.documents import Document
from scipy import stats as scipy_stats

from fairrag_audit import audit, write_report
from fairrag_audit.scan import ATTRIBUTED_FIELDS, METRIC_FIELDS
from fairrag_core import summarize_records
from fairrag_core.audit import GENERATION_FIELDS
from fairrag_core.citations import ContextDocument
from fairrag_langchain import FairnessCallbackHandler, FairRetriever, make_fair_rag_chain
from fairrag_langchain.fakes import _CONTEXT_BLOCK, _TITLE_LINE, FakeCitingChatModel
from tests.langchain.doubles import FixedPoolStore

STYLES = ("numbered", "bracketed", "names")
"""How the styled model cites, request by request in turn (none in the paper's format)."""
RANKERS = ("standard", "stochastic", "representative_stochastic")
QUESTIONS = 9
FEMALE = ["Ada", "Grace", "Marie", "Rosalind", "Barbara", "Katherine", "Hedy", "Emmy"]
MALE = ["Alan", "John", "Claude", "Edsger", "Donald", "Niklaus", "Dennis", "Kenneth"]
SURNAMES = [
    "Abbott", "Barnes", "Carver", "Dalton", "Ellison", "Fletcher", "Garrison", "Holloway",
    "Ingram", "Jennings", "Kimball", "Lancaster", "Merritt", "Norwood", "Oakley", "Prescott",
    "Quimby", "Radcliffe", "Sutherland", "Thornton", "Underwood", "Vickers", "Whitfield",
    "Yardley",
]  # fmt: skip
STRIPPED = (
    "citation_styles",
    "attributed_sources",
    "n_attribution_bullets",
    "n_attributed_bullets",
    *ATTRIBUTED_FIELDS,
)
"""The fields a record written before the attribution lacks."""


class StyledChatModel(FakeCitingChatModel):
    """Answers three people of its context (entries 1-3, 2-4 or 3-5 by its turn), in the
    style of its turn: ``- Name [n]`` (context entry numbers), ``- Name [Title]``, or ``n.
    Name: ...`` (no citation)."""

    turn: ClassVar[list[int]] = [0]
    """Answers given so far, by every instance (the styles rotate across rankers too)."""

    def answer(self, prompt: str) -> str:
        style = STYLES[self.turn[0] % len(STYLES)]
        self.turn[0] += 1
        block = _CONTEXT_BLOCK.search(prompt)
        titles = list(dict.fromkeys(_TITLE_LINE.findall(block.group(1) if block else prompt)))
        lines = []
        first = self.turn[0] // len(STYLES) % 3
        for number, title in enumerate(titles[first : first + 3], start=first + 1):
            person = ContextDocument(title).person
            if style == "numbered":
                lines.append(f"- {person} [{number}]")
            elif style == "bracketed":
                lines.append(f"- {person} [{title}]")
            else:
                lines.append(f"{number - first}. {person}: a pioneer of computing")
        return "\n".join(lines)


def pool(n: int = 24) -> tuple[list[Document], list[float]]:
    """``n`` biographies of named people, one woman in three, the women ranked lowest."""
    documents = []
    for i in range(n):
        gender = "female" if i % 3 == 0 else "male"
        first = (FEMALE if gender == "female" else MALE)[i % 8]
        title = f"{first} {SURNAMES[i]}"
        documents.append(
            Document(
                id=str(2000 + i),
                page_content=f"Title: {title}\n{title} (born 19{50 + i}) was a pioneer of "
                "computing.",
                metadata={"doc_id": str(2000 + i), "title": title, "gender": gender},
            )
        )
    ordered = [d for d in documents if d.metadata["gender"] == "male"]
    ordered += [d for d in documents if d.metadata["gender"] == "female"]
    return ordered, [0.1 + 0.01 * i for i in range(n)]


def styled_log(path: Path) -> list[dict]:
    """The LangChain handler's log of a chain whose model answers in :data:`STYLES` in turn."""
    handler = FairnessCallbackHandler(group_key="gender", protected="female", path=path)
    store = FixedPoolStore(*pool())
    for ranker in RANKERS:
        retriever = FairRetriever(
            vectorstore=store, ranker=ranker, group_key="gender", protected="female", seed=0, k=5
        )
        chain = make_fair_rag_chain(retriever, StyledChatModel())
        for i in range(QUESTIONS):
            tenant = "acme" if i % 3 else "globex"
            question = f"Who are role models in computing, take {i}?"
            chain.invoke(question, config={"callbacks": [handler], "metadata": {"tenant": tenant}})
    return [json.loads(line) for line in path.read_text().splitlines()]


def values(records: list[dict], name: str) -> np.ndarray:
    return np.array([r[name] for r in records if r.get(name) is not None], dtype=float)


def t_row(x: np.ndarray, low: float, high: float) -> tuple[float, float, float]:
    """Mean and 95% Student t interval of ``x``, clipped to [low, high]."""
    mean = float(x.mean())
    half = scipy_stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return mean, max(mean - half, low), min(mean + half, high)


def test_the_audit_is_one_list_of_generation_fields_with_the_core():
    assert METRIC_FIELDS == GENERATION_FIELDS  # the fields summarize_records reads
    assert ATTRIBUTED_FIELDS == (
        "attributed_generation_parity",
        "attributed_fairness_gap",
        "attributed_groundedness",
        "attributed_generation_parity_explicit",  # issue 33: citations alone, and precision
        "attributed_fairness_gap_explicit",
        "attributed_groundedness_explicit",
        "attributed_citation_precision",
    )


def test_answers_in_three_styles_are_audited_by_their_attributed_metrics(tmp_path, drawn):
    logged = styled_log(tmp_path / "fairness.jsonl")
    assert len(logged) == len(RANKERS) * QUESTIONS
    assert all(r["generation_parity"] is None for r in logged)  # the paper's: n/a
    assert all(r["follows_citation_format"] is False for r in logged)
    assert {s for r in logged for s in r["citation_styles"]} == {
        "numbered",
        "bracketed_title",
        "implicit",
    }
    result = audit([tmp_path / "fairness.jsonl"], protected="female", by="tenant", window="1h")

    core = summarize_records(logged, by="ranker")
    for ranker in RANKERS:
        mine = [r for r in logged if r["ranker"] == ranker]
        rows = result.rankers[result.rankers["ranker"] == ranker].set_index("metric")
        assert rows.loc["generation_parity", "n"] == 0
        assert math.isnan(rows.loc["generation_parity", "value"])
        for name in ATTRIBUTED_FIELDS:
            x = values(mine, name)
            assert len(x) == rows.loc[name, "n"]
            if name in ATTRIBUTED_FIELDS[:3]:  # the explicit-only ones are null without citation
                assert len(x) == len(mine)
            if len(x) < 2:
                continue
            low, high = (-1.0, 1.0) if "gap" in name else (0.0, 1.0)
            expected = t_row(x, low, high)
            got = tuple(rows.loc[name, ["value", "ci_low", "ci_high"]])
            assert got == pytest.approx(expected), name
            assert rows.loc[name, "value"] == pytest.approx(core[ranker][name]["mean"])
    shown = result.rankers.set_index(["ranker", "metric"])["value"]
    assert shown["representative_stochastic", "attributed_generation_parity"] > 0.3
    assert shown["standard", "attributed_generation_parity"] == 0  # no woman shown

    # per tenant and hour window: the same means over each cell's records
    cells = result.metrics[result.metrics["metric"] == "attributed_generation_parity"]
    for row in cells.itertuples():
        mine = [
            r
            for r in logged
            if r["ranker"] == row.ranker
            and r["metadata"]["tenant"] == row.tenant
            and hour(r["timestamp"]) == row.window
        ]
        assert row.records == len(mine) and row.n == len(mine)
        assert row.value == pytest.approx(values(mine, "attributed_generation_parity").mean())
    assert cells["records"].sum() == len(logged)

    # the rankers compared on the attributed parity: the pooled-variance t-test, per tenant
    pairs = result.pairwise[result.pairwise["metric"] == "attributed_generation_parity"]
    assert len(pairs) == 2 * 3  # two tenants, three pairs of rankers
    compared = 0
    for pair in pairs.to_dict("records"):
        a, b = (
            values(
                [
                    r
                    for r in logged
                    if r["ranker"] == name and r["metadata"]["tenant"] == pair["tenant"]
                ],
                "attributed_generation_parity",
            )
            for name in (pair["a"], pair["b"])
        )
        assert (pair["mean_a"], pair["mean_b"]) == pytest.approx((a.mean(), b.mean()))
        if np.isfinite(pair["t"]):
            test = scipy_stats.ttest_ind(a, b, equal_var=True)
            assert (pair["t"], pair["p"]) == pytest.approx((test.statistic, test.pvalue))
            compared += 1
    assert compared == 4  # representative_stochastic against the other two, per tenant

    # what the answers cited, per ranker
    table = result.generation.set_index("ranker")
    for ranker in RANKERS:
        mine = [r for r in logged if r["ranker"] == ranker]
        styles = Counter(s for r in mine for s in r["citation_styles"])
        row = table.loc[ranker]
        assert (row["answers"], row["follows_format"], row["paper_measured"]) == (len(mine), 0, 0)
        assert row["attributed_measured"] == len(mine)
        assert (row["without_attribution"], row["attributed_nothing"]) == (0, 0)
        assert row["bullets"] == sum(r["n_attribution_bullets"] for r in mine)
        assert row["style_numbered"] == styles["numbered"]
        assert row["style_bracketed_title"] == styles["bracketed_title"]
        assert row["style_implicit"] == styles["implicit"]
        assert row["style_doctitle"] == 0
    why = " ".join(result.generation_why)
    n = len(logged)
    assert f"Of {n} answers, 0 cited in the requested format (DocTitle: X)" in why
    assert f"measured for 0 and the attributed one for {n}" in why
    counts = Counter(s for r in logged for s in r["citation_styles"])
    assert (
        f"numbered {counts['numbered']}, bracketed_title {counts['bracketed_title']}, "
        f"implicit {counts['implicit']}"
    ) in why
    assert f"{n} answers have no paper generation parity (n/a)" in why
    assert "prompt for its format" in why

    out = tmp_path / "out"
    write_report(result, out)
    report = (out / "report.md").read_text()
    assert "## Why the generation metrics are what they are" in report
    assert f"- Of {n} answers, 0 cited in the requested format" in report
    assert "| attributed\\_generation\\_parity |" not in report  # a column of the wide table:
    assert "attributed_generation_parity" in report.split("## Per ranker, whole period")[1]
    html = (out / "report.html").read_text()
    assert "Why the generation metrics are what they are" in html
    csv_rows = (out / "generation.csv").read_text().splitlines()
    assert csv_rows[0].startswith("ranker,records,answers,follows_format,paper_measured")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["generation_why"] == result.generation_why
    assert {row["ranker"] for row in summary["generation"]} == set(RANKERS)

    # the figure: the paper's panel says why it is empty, the attributed one has the points
    figure = drawn["parity_vs_exposure.png"]
    paper, attributed = figure.axes
    assert not paper.collections
    texts = " ".join(t.get_text() for t in paper.texts)
    assert f"n/a: {n} of {n} answers cite nothing" in texts and "Styles: numbered" in texts
    assert paper.get_title() == f"measured for 0 of {n} answers"
    assert attributed.get_title() == f"measured for {n} of {n} answers"
    points = np.vstack([c.get_offsets() for c in attributed.collections])
    table = result.metrics.pivot_table(
        index=["ranker", "tenant", "window"], columns="metric", values="value"
    )
    expected = table[["exposure_share", "attributed_generation_parity"]].to_numpy()
    assert sorted(map(tuple, points.round(9))) == sorted(map(tuple, expected.round(9)))


def hour(stamp: str) -> str:
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:00:00Z")


def test_logs_written_before_the_attribution_audit_with_the_attributed_metrics_na(tmp_path, drawn):
    """Schema-1 records (no attributed fields), answers in the paper's format: the paper's
    parity measured, the attributed metrics n/a, and the report and figure say why."""
    handler = FairnessCallbackHandler(group_key="gender", protected="female")
    store = FixedPoolStore(*pool())
    for ranker in RANKERS:
        retriever = FairRetriever(
            vectorstore=store, ranker=ranker, group_key="gender", protected="female", seed=0, k=5
        )
        chain = make_fair_rag_chain(retriever, FakeCitingChatModel(max_citations=3))
        for i in range(4):
            chain.invoke(f"Who are role models, take {i}?", config={"callbacks": [handler]})
    old = []
    for record in handler.records:
        record = {k: v for k, v in record.items() if k not in STRIPPED}
        old.append({**record, "schema": 1})
    log = tmp_path / "old.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in old))
    result = audit([log], protected="female")

    assert result.reading.iloc[0]["used"] == len(old)
    for ranker in RANKERS:
        rows = result.rankers[result.rankers["ranker"] == ranker].set_index("metric")
        mine = [r for r in old if r["ranker"] == ranker]
        assert rows.loc["generation_parity", "value"] == pytest.approx(
            values(mine, "generation_parity").mean()
        )
        for name in ATTRIBUTED_FIELDS:
            assert rows.loc[name, "n"] == 0 and math.isnan(rows.loc[name, "value"])
            assert rows.loc[name, "n_missing"] == len(mine)
    n = len(old)
    for name in ATTRIBUTED_FIELDS:
        assert (
            f"{name}: no value in {n} of {n} records ({n} answered in records without the "
            "attributed fields (written before the attribution" in " ".join(result.notes)
        )
    assert (result.generation["without_attribution"] == result.generation["answers"]).all()
    why = " ".join(result.generation_why)
    assert f"Of {n} answers, {n} cited in the requested format" in why
    assert f"{n} answers are in records without the attributed fields" in why
    assert "their attributed metrics are n/a" in why

    write_report(result, tmp_path / "out")
    paper, attributed = drawn["parity_vs_exposure.png"].axes
    assert paper.collections and not attributed.collections
    texts = " ".join(t.get_text() for t in attributed.texts)
    assert f"of {n} answers, {n} recorded\nwithout the attributed fields" in texts
    report = (tmp_path / "out" / "report.md").read_text()
    assert f"{n} answers are in records without the attributed fields" in report


def test_a_retrieval_only_log_says_it_has_no_answer(tmp_path):
    from tests.audit.logs import record, write_log

    log = write_log(tmp_path / "log.jsonl", [record(["female", "male"]) for _ in range(3)])
    result = audit([log], protected="female")
    assert result.generation_why == [
        "No record of the 3 carries an answer (no follows_citation_format, citation_styles or "
        "generation metric): no generation metric to report. Records of a retriever without a "
        "generator, or of runs whose answer was not recorded."
    ]

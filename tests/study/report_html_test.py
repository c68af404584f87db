"""The study's report.html (issue 34): the same blocks as report.md, shown by a real headless
Chromium with every figure decoded and laid out, as the audit's report.html is checked.

The run's outputs are written from records made up here (five rankers, answers, the metrics
over many rankings and a two-setting frontier): the report renders what the study measured,
whatever measured it.
"""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import numpy as np
import pytest

from fairrag_study.frontier import REFERENCE, Frontier, FrontierRow
from fairrag_study.many_rankings import ManyRankings, Stream
from fairrag_study.report import FIGURE_CAPTIONS, FIGURES, RunFacts, output_files, write_outputs
from tests.audit.browser_test import checked_in_chromium

RANKERS = ["standard", "stochastic", "forced_exposure", "representative_stochastic", "amortized"]

CHECK = """
<script>
window.addEventListener("load", () => {
  const facts = {
    images: Array.from(document.images).map((img) => ({
      alt: img.alt,
      complete: img.complete,
      natural: [img.naturalWidth, img.naturalHeight],
      shown: [img.getBoundingClientRect().width, img.getBoundingClientRect().height],
      inline: img.src.startsWith("data:image/png;base64,"),
    })),
    title: document.title,
    headings: Array.from(document.querySelectorAll("h1, h2")).map((h) => h.textContent),
    tables: Array.from(document.querySelectorAll("table")).map((t) => t.rows.length),
    code: document.querySelectorAll("code").length,
    strong: document.querySelectorAll("strong").length,
  };
  const out = document.createElement("pre");
  out.id = "check";
  out.textContent = JSON.stringify(facts);
  document.body.appendChild(out);
});
</script>
"""


def _records(rng: np.random.Generator) -> list[dict[str, object]]:
    records = []
    for ranker in RANKERS:
        for trial in range(6):
            records.append(
                {
                    "ranker": ranker,
                    "trial": trial,
                    "exposure_disparity": float(rng.uniform(0, 0.4)),
                    "exposure_share": float(rng.uniform(0, 0.6)),
                    "precision_at_k": float(rng.uniform()),
                    "ndcg_at_k": float(rng.uniform()),
                    "answer": "Ada Lovelace (DocTitle: Ada Lovelace)",
                    "generation_parity": float(rng.uniform()) if trial % 2 else None,
                    "attributed_generation_parity": float(rng.uniform()),
                    "groundedness": float(rng.uniform()),
                    "attributed_groundedness": float(rng.uniform()),
                    "citation_styles": ["doctitle"] if trial % 2 else ["implicit"],
                    "follows_citation_format": bool(trial % 2),
                    "attributed_sources": ["Ada Lovelace"] if trial else [],
                }
            )
    return records


def _many(rng: np.random.Generator) -> ManyRankings:
    trials = []
    for ranker in RANKERS:
        for trial in range(6):
            loss = float(rng.uniform())
            trials.append(
                {"ranker": ranker, "trial": trial, "samples": 10, "ee_loss": loss,
                 "ee_disparity": loss + 0.25, "ee_relevance": 0.25, "awrf": float(rng.uniform()),
                 "trec_ndcg": 0.5, "trec_score": 0.3}
            )  # fmt: skip

    def row(label: str, ranker: str, params: dict, loss: float, ee: float) -> FrontierRow:
        return FrontierRow(label, ranker, params, 0.001, 0.001, loss, loss, ee, 3.0, 0.5)

    frontier = Frontier(
        [
            row(REFERENCE, REFERENCE, {"alpha": 4.0}, 0.01, 1.5),
            row("amortized alpha=7 spread=4", "amortized", {"alpha": 7.0, "spread": 4.0}, 0, 1.2),
        ],
        orders=1,
        samples=10,
        pools=4,
        k=5,
    )
    streams = {r: Stream(r, 6, float(rng.uniform(0, 0.2)), {"female": 0.3}) for r in RANKERS}
    return ManyRankings(10, trials, streams, frontier)


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("study")
    rng = np.random.default_rng(34)
    facts = RunFacts("balanced", 72, 3, 3, 12, 7, 6, 50, 5, 1000, "fake", None)
    write_outputs(
        out,
        _records(rng),
        RANKERS,
        config={"seed": 7, "llm": "fake <test double>"},
        generation_note=None,
        many=_many(rng),
        facts=facts,
    )
    return out


def test_report_md_and_html_are_written_from_the_same_blocks(report_dir: Path) -> None:
    assert {"report.md", "report.html"} <= set(output_files())
    markdown = (report_dir / "report.md").read_text(encoding="utf-8")
    html = (report_dir / "report.html").read_text(encoding="utf-8")
    md_headings = re.findall(r"^##? (.+)$", markdown, re.M)
    html_headings = [
        unescape(re.sub(r"<[^>]+>", "", h)) for h in re.findall(r"<h[12]>(.*?)</h[12]>", html)
    ]
    assert [h.replace("`", "") for h in md_headings] == html_headings
    assert "## Figures" in markdown and "## Differences from the paper" in markdown
    for name in FIGURES:  # linked from the Markdown, embedded in the HTML
        assert f"![{FIGURE_CAPTIONS[name]}]({name})" in markdown
    assert "<code>fake &lt;test double&gt;</code>" in html  # a config value, escaped, as code
    assert "<script" not in html and 'src="figures/' not in html


def test_report_html_shows_every_figure_and_table_in_chromium(
    report_dir: Path, tmp_path: Path
) -> None:
    html = (report_dir / "report.html").read_text(encoding="utf-8")
    facts = checked_in_chromium(html, CHECK, tmp_path)
    assert facts["title"] == "FairRAG study: reproduction of Tikoo (2026)"
    assert facts["headings"][:3] == [facts["title"], "Configuration", "This run beside the paper "
                                     "(the paper's rankers; means over trials)"]  # fmt: skip
    assert "Figures" in facts["headings"] and facts["headings"][-1] == "Files"
    markdown = (report_dir / "report.md").read_text(encoding="utf-8")
    assert len(facts["tables"]) == markdown.count("\n|---") and min(facts["tables"]) >= 2
    assert facts["code"] > 10 and facts["strong"] >= 6  # `code` and **Difference.** marks
    images = facts["images"]
    assert sorted(image["alt"] for image in images) == sorted(FIGURE_CAPTIONS[f] for f in FIGURES)
    for image in images:
        assert image["complete"] and image["inline"], image
        assert min(image["natural"]) > 100, image  # a decoded PNG of a real figure
        assert min(image["shown"]) > 50, image  # laid out on the page, not hidden

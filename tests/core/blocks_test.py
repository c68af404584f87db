"""fairrag_core.blocks: one list of blocks, two renderings (the study's and the audit's reports).

Plain text is escaped by both renderers (a value from a log cannot inject markup); Markup is the
report's own text, shown as written in Markdown and with its code and strong marks in HTML."""

from __future__ import annotations

import base64
from pathlib import Path

from fairrag_core.blocks import (
    Bullets,
    Figure,
    Heading,
    Markup,
    Paragraph,
    Table,
    html_page,
    markdown,
    markdown_text,
)

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def test_plain_text_is_escaped_and_markup_is_kept_in_markdown() -> None:
    blocks = [
        Heading("Report", 1),
        Paragraph("- <script> `x` | y"),
        Paragraph(Markup("**Seeds.** seed `7`")),
        Bullets(["=1+1 [a](http://x)", Markup("key: `value`")]),
    ]
    assert markdown(blocks) == (
        "# Report\n\n"
        "\\- &lt;script&gt; \\`x\\` \\| y\n\n"
        "**Seeds.** seed `7`\n\n"
        "- =1+1 [a]\\(http://x)\n"
        "- key: `value`\n"
    )
    assert markdown_text("1. a", block=True) == "1\\. a"


def test_tables_align_and_say_when_they_were_cut() -> None:
    table = Table(["ranker", "share"], [["a|b", "0.50"]], total=3, align="lr")
    assert markdown([table]) == (
        "| ranker | share |\n|---|---:|\n| a\\|b | 0.50 |\n\n(1 of 3 rows; all in the CSV files)\n"
    )
    page = html_page([table])
    assert '<th class="num">share</th>' in page and "<td>a|b</td>" in page
    assert "<p>(1 of 3 rows; all in the CSV files)</p>" in page


def test_html_escapes_plain_text_and_renders_markup_marks(tmp_path: Path) -> None:
    (tmp_path / "figures").mkdir()
    png = tmp_path / "figures" / "one.png"
    png.write_bytes(PNG)
    blocks = [
        Heading(Markup("Study of `region`"), 1),
        Paragraph("<b>not bold</b> **not strong**"),
        Paragraph(Markup("**Corpus.** `<name>` & more")),
        Figure(png, 'a "figure"'),
    ]
    page = html_page(blocks)
    assert "<title>Study of region</title>" in page
    assert "<h1>Study of <code>region</code></h1>" in page
    assert "<p>&lt;b&gt;not bold&lt;/b&gt; **not strong**</p>" in page
    assert "<p><strong>Corpus.</strong> <code>&lt;name&gt;</code> &amp; more</p>" in page
    assert f'src="data:image/png;base64,{base64.b64encode(PNG).decode()}"' in page
    assert 'alt="a &quot;figure&quot;"' in page and "<script" not in page
    assert markdown(blocks[3:], tmp_path) == '![a "figure"](figures/one.png)\n'

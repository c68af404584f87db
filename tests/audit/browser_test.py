"""report.html in a real headless Chromium: every figure is decoded and shown.

A copy of the report gets a script that, once the page has loaded, writes what the browser
made of each image (decoded, natural size, laid-out size) into the page; ``--dump-dom`` prints
the DOM after the scripts ran. The report itself carries no script.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from fairrag_audit.figures import FIGURES

CHECK = """
<script>
window.addEventListener("load", () => {
  const images = Array.from(document.images).map((img) => ({
    alt: img.alt,
    complete: img.complete,
    natural: [img.naturalWidth, img.naturalHeight],
    shown: [img.getBoundingClientRect().width, img.getBoundingClientRect().height],
    inline: img.src.startsWith("data:image/png;base64,"),
  }));
  const out = document.createElement("pre");
  out.id = "check";
  out.textContent = JSON.stringify(images);
  document.body.appendChild(out);
});
</script>
"""

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--virtual-time-budget=10000",
)


def chromium_or_skip() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    reason = "Chromium not found: install it with `make system-deps` (Debian package chromium)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def checked_in_chromium(html: str, check: str, tmp_path: Path) -> Any:
    """What ``check`` (a script writing JSON into ``<pre id="check">`` once the page has
    loaded) found in ``html`` opened by a real headless Chromium (skipped without one)."""
    browser = chromium_or_skip()
    page = tmp_path / "checked.html"
    page.write_text(html.replace("</body>", check + "</body>"), encoding="utf-8")
    done = subprocess.run(
        [
            browser,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    match = re.search(r'<pre id="check">(.*?)</pre>', done.stdout, re.DOTALL)
    assert match, f"no check output from Chromium (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(unescape(match.group(1)))


def test_report_html_shows_every_figure_in_chromium(report_dir: Path, tmp_path: Path) -> None:
    html = (report_dir / "report.html").read_text(encoding="utf-8")
    assert "<script" not in html
    assert 'src="figures/' not in html  # self-contained: no file next to it is needed
    images = checked_in_chromium(html, CHECK, tmp_path)
    assert sorted(image["alt"] for image in images) == sorted(FIGURES.values())
    for image in images:
        assert image["complete"] and image["inline"], image
        assert min(image["natural"]) > 100, image  # decoded PNG of a real figure
        assert min(image["shown"]) > 50, image  # laid out on the page, not hidden

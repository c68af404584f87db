"""The documentation site is checked like code (issue 38).

The site (``mkdocs.yml``, ``docs/``) is built once per test session in strict mode, offline (a
proxy that refuses every connection is set, so a plugin that fetches would fail the build), or
taken from ``FAIRRAG_DOCS_SITE`` (``make test`` builds it with ``make docs`` first, the same way);
then: a broken link planted in a copy of the docs fails the strict build; every name of every
package's ``__all__`` has its entry in the API reference; the home page and the
``FairRetriever`` reference render in headless Chromium, with a screenshot of each kept in the
session's temporary folder (printed with ``-s``).
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.audit.browser_test import CHROMIUM_FLAGS, chromium_or_skip

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"


def packages() -> list[str]:
    """The distribution's top-level packages (pyproject's package list): each has a page."""
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(
        r"^\[tool\.setuptools\.packages\.find\]\ninclude = \[(.*?)\]", pyproject, re.M | re.S
    )
    assert found, "pyproject.toml: no [tool.setuptools.packages.find] include list"
    return sorted(re.findall(r'"(\w+)\*"', found.group(1)))


def build(config: Path, site_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "NO_MKDOCS_2_WARNING": "1",
        # Nothing may be downloaded at build time: every HTTP client honouring the proxy
        # variables fails at once.
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "http_proxy": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
        "NO_PROXY": "",
        "no_proxy": "",
    }
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config)]
    return subprocess.run(
        [*command, "--site-dir", str(site_dir)],
        cwd=ROOT,  # README.md and CHANGELOG.md, included by snippets, are read from here
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site: the one `make test` has just built with `make docs` (named by
    FAIRRAG_DOCS_SITE), else built here, once per session."""
    made = os.environ.get("FAIRRAG_DOCS_SITE")
    if made:
        assert (Path(made) / "index.html").is_file(), f"FAIRRAG_DOCS_SITE={made}: no site there"
        return Path(made)
    out = tmp_path_factory.mktemp("site")
    done = build(ROOT / "mkdocs.yml", out)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def test_the_strict_build_passes_offline_and_loads_no_web_font(site: Path) -> None:
    home = re.sub(r"<[^>]+>", "", (site / "index.html").read_text(encoding="utf-8"))
    assert "FairRetriever(vectorstore=store" in home  # the README's quickstart, included
    for page in site.rglob("*.html"):
        assert "fonts.googleapis.com" not in page.read_text(encoding="utf-8"), page


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs", symlinks=True)
    (copy / "docs" / "notebooks").unlink()
    (copy / "docs" / "notebooks").symlink_to(ROOT / "notebooks")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    # The same configuration and pages, without rendering the API reference (two thirds of a
    # build's time): the planted link alone must fail it.
    for page in (copy / "docs" / "reference").glob("*.md"):
        text = page.read_text(encoding="utf-8")
        page.write_text(re.sub(r"^::: .*$", "", text, flags=re.M), encoding="utf-8")
    guide = copy / "docs" / "guides" / "langchain.md"
    guide.write_text(
        guide.read_text(encoding="utf-8") + "\nSee [the missing page](no-such-page.md).\n",
        encoding="utf-8",
    )
    done = build(copy / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "no-such-page.md" in output and "Aborted" in output, output[-2000:]


def _modules(package: str) -> dict[str, ModuleType]:
    root = importlib.import_module(package)
    found = {package: root}
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found[info.name] = importlib.import_module(info.name)
    return found


def _directives() -> dict[str, Path]:
    """Every ``::: module`` of the reference pages, with its page."""
    return {
        name: page
        for page in REFERENCE.glob("*.md")
        for name in re.findall(r"^::: ([\w.]+)\s*$", page.read_text(encoding="utf-8"), re.M)
    }


def test_every_package_has_a_reference_page_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    directives = _directives()
    for package in packages():
        page = REFERENCE / f"{package}.md"
        assert page.is_file(), f"write {page.relative_to(ROOT)} holding '::: {package}'"
        assert f"reference/{package}.md" in nav, f"list reference/{package}.md in mkdocs.yml"
        for name, module in _modules(package).items():
            if hasattr(module, "__path__") and hasattr(module, "__all__"):
                assert name in directives, f"no '::: {name}' in docs/reference/"


def test_every_public_name_is_in_the_api_reference(site: Path) -> None:
    """Each name of a package's ``__all__``, and of every module a reference page documents,
    has its entry: an anchor under the name it is exported as, or (a function named like its
    module, which the reference documents where it is defined) under its defining module."""
    anchors: set[str] = set()
    for page in (site / "reference").rglob("index.html"):
        anchors |= set(re.findall(r'id="([^"]+)"', page.read_text(encoding="utf-8")))
    documented = set(_directives())
    missing = []
    for package in packages():
        for name, module in _modules(package).items():
            is_package = hasattr(module, "__path__")
            if not hasattr(module, "__all__") or not (is_package or name in documented):
                continue
            for public in module.__all__:
                value = getattr(module, public)
                defined = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
                if f"{name}.{public}" not in anchors and defined not in anchors:
                    missing.append(f"{name}.{public}")
    assert not missing, f"not in the API reference: {missing}"


CHECK = """
<script>
window.addEventListener("load", () => {
  const header = document.querySelector(".md-header");
  const target = document.getElementById(TARGET);
  const facts = {
    title: document.title,
    h1: (document.querySelector("h1") || {}).textContent || "",
    header_position: header ? getComputedStyle(header).position : null,
    stylesheets: document.styleSheets.length,
    target_text: target ? target.closest(".doc-object, article").textContent.slice(0, 4000) : null,
    target_shown: target ? target.getBoundingClientRect().height : 0,
    images: Array.from(document.images).map((img) => [img.naturalWidth, img.naturalHeight]),
    code_blocks: document.querySelectorAll("pre code").length,
  };
  const out = document.createElement("pre");
  out.id = "docs-check";
  out.textContent = JSON.stringify(facts);
  document.body.appendChild(out);
});
</script>
"""


def _render(browser: str, page: Path, target: str, shot: Path, tmp: Path) -> dict[str, Any]:
    """What Chromium made of ``page`` (a copy with the check script, beside the original so
    its relative links resolve), and a screenshot of it in ``shot``."""
    html = page.read_text(encoding="utf-8")
    checked = page.with_name("checked.html")
    checked.write_text(
        html.replace("</body>", CHECK.replace("TARGET", json.dumps(target)) + "</body>"),
        encoding="utf-8",
    )
    common = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'profile'}"]
    done = subprocess.run(
        [*common, "--dump-dom", checked.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    match = re.search(r'<pre id="docs-check">(.*?)</pre>', done.stdout, re.DOTALL)
    assert match, f"no check output from Chromium (exit {done.returncode}): {done.stderr[-2000:]}"
    facts = json.loads(
        match.group(1)
        .replace("&quot;", '"')
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
    )
    subprocess.run(
        [*common, "--window-size=1280,1600", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=120,
    )
    print(f"screenshot: {shot}")
    return facts


def _is_drawn(shot: Path) -> bool:
    """A real rendering: a PNG of the window's size with many colours (text, not a blank)."""
    from PIL import Image

    with Image.open(shot) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20) or []
        return image.size == (1280, 1600) and len(colours) > 50


def test_home_and_fairretriever_pages_render_in_chromium(
    site: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    browser = chromium_or_skip()
    shots = tmp_path_factory.mktemp("docs-screenshots")

    home = _render(browser, site / "index.html", "quickstart", shots / "home.png", tmp_path)
    assert home["h1"].startswith("FairRAG"), home
    assert home["header_position"] == "sticky", home  # Material's stylesheet applied
    assert home["code_blocks"] >= 2, home  # the two quickstarts
    assert home["images"] and all(min(size) > 100 for size in home["images"]), home

    name = "fairrag_langchain.FairRetriever"
    page = site / "reference" / "fairrag_langchain" / "index.html"
    api = _render(browser, page, name, shots / "fairretriever.png", tmp_path)
    assert api["header_position"] == "sticky", api
    assert api["target_shown"] > 0, api
    assert "FairRetriever" in api["target_text"] and "vectorstore" in api["target_text"], api

    for shot in (shots / "home.png", shots / "fairretriever.png"):
        assert shot.is_file() and _is_drawn(shot), shot


def test_the_adapters_pages_show_the_shared_fields_with_their_descriptions(site: Path) -> None:
    """The fields every fair component inherits (``FairComponent``) are on each component's
    entry, each with its pydantic description."""
    from fairrag_core.kit.component import CONFIG_FIELDS, FairComponent

    pages = {
        "fairrag_langchain": ("FairRetriever", "FairReranker"),
        "fairrag_llamaindex": ("FairRerankPostprocessor",),
    }
    for package, classes in pages.items():
        html = (site / "reference" / package / "index.html").read_text(encoding="utf-8")
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&#39;", "'")
        for cls in classes:
            for field in CONFIG_FIELDS:
                assert f'id="{package}.{cls}.{field}"' in html, (cls, field)
        description = FairComponent.model_fields["target_share"].description
        assert description and description in text, package

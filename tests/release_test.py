"""A release a user can install (issue 24): the sdist builds and passes ``twine check``, its
metadata carries the one version of ``pyproject.toml`` and the extras, and CHANGELOG.md has a
section for that version.

The sdist is built from this checkout without build isolation (seconds, no download); the
wheel, the clean-venv installs of both and ``twine check`` of both are run by
``benchmarks/bench_release.py`` (``make dist`` builds and checks them).
"""

from __future__ import annotations

import email.parser
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "fairrag_core",
    "fairrag_langchain",
    "fairrag_llamaindex",
    "fairrag_study",
    "fairrag_audit",
)


def _pyproject_version() -> str:
    match = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert match, "pyproject.toml states the version"
    return match.group(1)


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    """The sdist, built from a copy of the checkout's tracked files: a build in the checkout
    rewrites its ``fairrag.egg-info``, which the tests running beside this one (``make test``
    runs two processes) read for the installed version."""
    out = tmp_path_factory.mktemp("dist")
    tree = tmp_path_factory.mktemp("tree")
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():  # a tracked file deleted in the checkout is not built
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
    done = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(out)],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (archive,) = out.glob("fairrag-*.tar.gz")
    return archive


def test_the_version_is_written_once():
    version = _pyproject_version()
    hits = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if re.search(rf"""['"]{re.escape(version)}['"]""", path.read_text(encoding="utf-8")):
                hits.append(str(path.relative_to(ROOT)))
    assert hits == [], f"the version {version} is also written in {hits}"


def test_the_changelog_has_a_section_for_the_version():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## \[{re.escape(_pyproject_version())}\]", changelog, re.M)


def test_the_sdist_passes_twine_check_and_holds_the_packages(sdist):
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(sdist)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    version = _pyproject_version()
    assert sdist.name == f"fairrag-{version}.tar.gz"
    top = f"fairrag-{version}/"
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
        info = archive.extractfile(top + "PKG-INFO")
        assert info is not None
        meta = email.parser.Parser().parsestr(info.read().decode())
    for name in ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md"):
        assert top + name in names, name
    for package in PACKAGES:
        assert top + f"{package}/__init__.py" in names and top + f"{package}/py.typed" in names
    assert meta["Version"] == version
    assert meta["License-Expression"] == "MIT"
    assert meta["Description-Content-Type"] == "text/markdown"
    extras = set(meta.get_all("Provides-Extra") or [])
    assert {"langchain", "llamaindex", "openai", "study", "audit", "examples", "all"} <= extras
    core = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert sorted(re.split(r"[<>=!~ ;]", r)[0] for r in core) == ["numpy", "scipy"]

"""A release a user can install: ``python -m build`` makes a wheel and an sdist, ``twine check``
passes on both, and each installs in a clean venv where ``fairrag --version`` answers.

Run: ``.venv/bin/python benchmarks/bench_release.py [--out DIR] [--keep]``. Builds with
isolation (as a release would; setuptools comes from the package index), checks both files
with ``twine check --strict``, then for each makes a fresh venv (``python -m venv``, from the
interpreter running this script), installs the file there (its dependencies, numpy and scipy,
from the package index) and runs ``fairrag --version``, ``fairrag --help`` and a ranking of the
core. Prints the sizes and the seconds each step took. ``make dist`` runs the build and the
check only. ``tests/release_test.py`` checks the sdist on every test run.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE_RANKING = (
    "from fairrag_core import make_ranker; "
    "print(make_ranker('representative_stochastic', protected='f', seed=0)"
    ".rank([0.9, 0.8, 0.1], ['m', 'm', 'f'], k=2).tolist())"
)


def step(label: str, command: list[str], **kwargs: object) -> str:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"{label} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    print(f"  {label:<44}{seconds:>7.1f} s")
    return str(done.stdout)


def version() -> str:
    match = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert match
    return match.group(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for the wheel and the sdist (a temp one)")
    parser.add_argument("--keep", action="store_true", help="keep the venvs (printed)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fairrag-release-"))
    out = args.out or work / "dist"
    print(f"fairrag {version()}: build in {out}")
    step(
        "python -m build (sdist, then wheel from it)",
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
    )
    files = sorted(out.glob(f"fairrag-{version()}*"))
    for file in files:
        print(f"  {file.name:<44}{file.stat().st_size / 1e3:>7.0f} kB")
    step(
        "twine check --strict",
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, files)],
    )
    for file in files:
        kind = "wheel" if file.suffix == ".whl" else "sdist"
        venv = work / f"venv-{kind}"
        print(f"{kind}: a clean venv in {venv}")
        step("python -m venv", [sys.executable, "-m", "venv", str(venv)])
        step(f"pip install {file.name}", [str(venv / "bin" / "pip"), "install", str(file)])
        shown = step("fairrag --version", [str(venv / "bin" / "fairrag"), "--version"], cwd=work)
        assert shown.strip() == f"fairrag {version()}", shown
        step("fairrag --help", [str(venv / "bin" / "fairrag"), "--help"], cwd=work)
        order = step(
            "a ranking of the core", [str(venv / "bin" / "python"), "-c", CORE_RANKING], cwd=work
        )
        print(f"  {'order':<44}{order.strip():>9}")
        listed = step("pip list", [str(venv / "bin" / "pip"), "list", "--format=freeze"])
        names = sorted(line.split("==")[0].lower() for line in listed.splitlines())
        print(f"  installed: {', '.join(names)}")
    if args.keep:
        print(f"kept: {work}")
    else:
        shutil.rmtree(work / "venv-wheel", ignore_errors=True)
        shutil.rmtree(work / "venv-sdist", ignore_errors=True)
    print("release: wheel and sdist build, pass twine check and install in clean venvs")


if __name__ == "__main__":
    main()

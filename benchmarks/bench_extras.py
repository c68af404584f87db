"""What each extra of ``pyproject.toml`` adds to a clean venv: packages and megabytes.

Run: ``.venv/bin/python benchmarks/bench_extras.py [--extras core,langchain,...]
[--no-constraints] [--project DIR] [--json FILE]``.

For each extra, pip's resolver answers ``pip install --dry-run --ignore-installed --report``
for ``DIR[extra]`` (``DIR`` alone for ``core``): what a fresh venv would get, nothing installed
or downloaded. The megabytes are installed sizes, read from the ``RECORD`` of the same
name and version in the running environment (``make venv`` installs every extra, so every
package of the Makefile's resolution is there); a package that is not (another version, as
without the constraints) counts its wheel's size when pip found it on this disk, else as
unknown ("?"). ``--no-constraints`` resolves as a user's ``pip install`` does (without the
Makefile's ``-c constraints.txt``, which pins the CPU build of torch).

The plugin extras (``langchain``, ``llamaindex``) must hold no torch, chromadb or
sentence-transformers: ``tests/extras_test.py`` checks that on the declared extras.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parents[1]
WATCHED = ("torch", "chromadb", "sentence-transformers", "transformers", "onnxruntime")
"""Packages named in the table when an extra brings them."""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_extras(project: Path) -> list[str]:
    """``core`` and every extra of ``project``'s pyproject.toml, in file order."""
    text = (project / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return ["core", *re.findall(r"^([A-Za-z0-9][A-Za-z0-9_-]*)\s*=", section, flags=re.M)]


def resolve(project: Path, extra: str, constraints: Path | None) -> list[dict]:
    """pip's installation report for ``project[extra]`` in a clean venv (a dry run)."""
    target = str(project) if extra == "core" else f"{project}[{extra}]"
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(report),
            target,
        ]
        if constraints is not None:
            command[4:4] = ["-c", str(constraints)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"pip could not resolve {target}:\n{done.stderr[-2000:]}")
        return list(json.loads(report.read_text())["install"])


def installed_megabytes(name: str, version: str) -> float | None:
    """The installed size of ``name==version`` here (its RECORD), else None."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    if dist.version != version or not dist.files:
        return None
    return sum(f.size or 0 for f in dist.files) / 1e6


def wheel_megabytes(url: str) -> float | None:
    """The size of the file pip chose when it lies on this disk (a ``file://`` index)."""
    parts = urlparse(url)
    if parts.scheme != "file":
        return None
    path = Path(unquote(parts.path))
    return path.stat().st_size / 1e6 if path.is_file() else None


def measure(items: list[dict]) -> tuple[list[tuple[str, str, float | None]], bool]:
    """Each package but fairrag itself, with its megabytes (None: unknown); and whether an
    installed size was unavailable for some (their wheel's size was used instead)."""
    rows, fallback = [], False
    for item in items:
        name = _normal(item["metadata"]["name"])
        version = item["metadata"]["version"]
        if name == "fairrag":
            continue
        size = installed_megabytes(name, version)
        if size is None:
            fallback = True
            size = wheel_megabytes(item["download_info"]["url"])
        rows.append((name, version, size))
    return rows, fallback


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--project", type=Path, default=ROOT, help="the folder with pyproject")
    parser.add_argument("--extras", help="comma-separated extras (default: core and every one)")
    parser.add_argument(
        "--no-constraints",
        action="store_true",
        help="resolve without constraints.txt (as `pip install fairrag[...]` does for a user)",
    )
    parser.add_argument("--json", type=Path, help="also write every extra's packages here")
    args = parser.parse_args()
    project = args.project.resolve()
    extras = args.extras.split(",") if args.extras else declared_extras(project)
    constraints = None if args.no_constraints else ROOT / "constraints.txt"
    print(
        f"pip install --dry-run --ignore-installed --report of {project}[extra] "
        f"({'no constraints' if constraints is None else '-c constraints.txt'}; "
        f"pip of {sys.executable})"
    )
    print(f"{'extra':<22}{'packages':>9}{'MB':>8}{'beyond core':>16}  largest; heavy packages")
    everything: dict[str, list[dict[str, object]]] = {}
    core: set[str] = set()
    for extra in extras:
        rows, fallback = measure(resolve(project, extra, constraints))
        known = [size for _, _, size in rows if size is not None]
        unknown = len(rows) - len(known)
        total = f"{sum(known):.0f}" + ("+?" if unknown else "")
        largest = sorted((r for r in rows if r[2] is not None), key=lambda r: -(r[2] or 0))[:3]
        heavy = sorted(name for name, _, _ in rows if name in WATCHED)
        note = ", ".join(f"{n} {s:.0f}" for n, _, s in largest)
        if heavy:
            note += f"; HEAVY: {', '.join(heavy)}"
        if unknown:
            note += f"; {unknown} of unknown size"
        elif fallback:
            note += "; some sizes are wheel sizes"
        if extra == "core":
            core = {name for name, _, _ in rows}
        beyond = [(n, s) for n, _, s in rows if n not in core]
        added = f"+{len(beyond)} / +{sum(s or 0 for _, s in beyond):.0f}" if core else "-"
        print(f"{extra:<22}{len(rows):>9}{total:>8}{added:>16}  {note}")
        everything[extra] = [{"name": n, "version": v, "megabytes": s} for n, v, s in rows]
        sys.stdout.flush()
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1) + os.linesep)
    print(
        "MB: installed size (the RECORD of the same version here), or the wheel's size; "
        "beyond core: packages / MB the extra adds to `pip install fairrag`"
    )


if __name__ == "__main__":
    main()

"""The LangChain plugin in a clean venv: ``pip install ".[langchain]"`` holds no torch, chromadb
or sentence-transformers, and the LangChain guide's re-ranking example runs there on the user's
own embeddings; the ``fairrag`` command answers and names the extras it lacks.

Run: ``.venv/bin/python benchmarks/bench_lean_install.py [--venv DIR] [--reuse]``. Makes a
venv (``python -m venv``) and installs this checkout's ``[langchain]`` extra with
``-c constraints.txt`` (pip reaches the package index), or with ``--reuse`` checks a venv
already made that way. Then, from a folder outside the checkout (so the installed copy is the
one imported): lists the installed packages and their installed megabytes, runs the README
quickstart's toy pool and the ``FairReranker`` block of docs/guides/langchain.md, and runs
``fairrag --help``, ``fairrag study --help`` and ``fairrag study`` / ``fairrag audit`` (exit 2
naming the extra to install).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("torch", "chromadb", "sentence-transformers", "transformers", "langchain-openai")
SIZES = (
    "from importlib import metadata\n"
    "for d in metadata.distributions():\n"
    "    print(d.metadata['Name'], sum(f.size or 0 for f in d.files or []))\n"
)


def run(command: list[str], cwd: Path, expect: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode != expect:
        raise SystemExit(
            f"{' '.join(command)} exited {done.returncode} (expected {expect}):\n"
            f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return done


def readme_example() -> str:
    """The README quickstart's toy pool and the LangChain guide's FairReranker block (the
    langchain-core-only example)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    guide = (ROOT / "docs" / "guides" / "langchain.md").read_text(encoding="utf-8")
    found = re.search(r"^PEOPLE = .*?^BIOGRAPHIES = .*?$", readme, flags=re.S | re.M)
    if found is None:
        raise SystemExit("README.md: the quickstart's PEOPLE and BIOGRAPHIES lines are missing")
    blocks = re.findall(r"```python\n(.*?)```", guide, flags=re.S)
    lean = next(b for b in blocks if "FairReranker(" in b)
    return found.group(0) + "\n" + lean


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--venv", type=Path, help="the venv (default: a new temporary folder)")
    parser.add_argument("--reuse", action="store_true", help="check --venv as it is")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fairrag-lean-"))
    venv = args.venv or work / "venv"
    python, pip = venv / "bin" / "python", venv / "bin" / "pip"
    if not args.reuse:
        start = time.perf_counter()
        run([sys.executable, "-m", "venv", str(venv)], work)
        run([str(pip), "install", "-c", str(ROOT / "constraints.txt"), f"{ROOT}[langchain]"], work)
        print(f"python -m venv and pip install '.[langchain]': {time.perf_counter() - start:.0f} s")
    sizes = {}
    for line in run([str(python), "-c", SIZES], work).stdout.splitlines():
        name, size = line.rsplit(" ", 1)
        sizes[re.sub(r"[-_.]+", "-", name).lower()] = int(size) / 1e6
    base = {"pip", "setuptools", "wheel"}
    added = {n: s for n, s in sizes.items() if n not in base | {"fairrag"}}
    largest = sorted(added.items(), key=lambda item: -item[1])[:4]
    print(
        f"{venv}: {len(added)} packages besides fairrag and pip, {sum(added.values()):.0f} MB; "
        f"largest: {', '.join(f'{n} {s:.0f}' for n, s in largest)}"
    )
    present = [name for name in FORBIDDEN if name in sizes]
    print(f"{', '.join(FORBIDDEN)}: {present or 'none'}")
    example = run([str(python), "-c", readme_example()], work).stdout.strip()
    print(f"README FairReranker example: {example}")
    run([str(venv / "bin" / "fairrag"), "--help"], work)
    run([str(venv / "bin" / "fairrag"), "study", "--help"], work)
    for command in (["study"], ["audit", "log.jsonl", "--out", "report"]):
        done = run([str(venv / "bin" / "fairrag"), *command], work, expect=2)
        message = done.stderr.strip().splitlines()[-1]
        assert "Traceback" not in done.stderr and "pip install 'fairrag[" in message, done.stderr
        print(f"fairrag {command[0]}: exit 2: {message}")
    if present:
        raise SystemExit(f"the [langchain] extra brought {present}")
    print("lean install: no torch, chromadb or sentence-transformers; the example runs")


if __name__ == "__main__":
    main()

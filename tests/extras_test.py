"""The extras match the job (issue 24): the plugin extras add one framework package each, and
the adapters import nothing heavy when they load.

``pyproject.toml``'s declared extras are read and expanded (``fairrag[x]`` inside an extra), and
the plugin extras' packages are followed through the installed distributions' own requirements
(what pip would resolve, without the network): torch, chromadb and sentence-transformers must not
be among them. ``benchmarks/bench_extras.py`` prints what each extra adds in a clean venv.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"torch", "chromadb", "sentence-transformers", "transformers", "onnxruntime"}
"""Distributions a plugin extra must never bring (the GPU stack, a vector store, a model)."""
PLUGINS = {
    "langchain": {"langchain-core"},
    "llamaindex": {"llama-index-core"},
    "haystack": {"haystack-ai"},
}


def _name(requirement: str) -> str:
    """The normalized distribution name of a requirement string (PEP 503)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def _project() -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def declared(extra: str | None) -> set[str]:
    """The distributions ``pip install fairrag[extra]`` asks for directly (the core's included;
    ``fairrag[other]`` inside an extra expanded)."""
    project = _project()
    names = {_name(r) for r in project["dependencies"]}
    pending = [extra] if extra else []
    seen: set[str] = set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        for requirement in project["optional-dependencies"][current]:
            nested = re.fullmatch(r"\s*fairrag\[([^\]]+)\]\s*", requirement)
            if nested:
                pending.extend(part.strip() for part in nested.group(1).split(","))
            else:
                names.add(_name(requirement))
    return names


def closure(names: set[str]) -> set[str]:
    """``names`` and everything their installed distributions require (no extras), as pip
    would resolve it here; a distribution that is not installed is kept as a name only."""
    from packaging.requirements import Requirement

    found: set[str] = set()
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in found:
            continue
        found.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(_name(requirement.name))
    return found


def test_the_core_is_numpy_and_scipy():
    assert declared(None) == {"numpy", "scipy"}


@pytest.mark.parametrize("extra", sorted(PLUGINS))
def test_a_plugin_extra_adds_its_framework_core_only(extra):
    assert declared(extra) == {"numpy", "scipy"} | PLUGINS[extra]


@pytest.mark.parametrize("extra", sorted(PLUGINS))
def test_no_heavy_package_enters_a_plugin_extra(extra):
    for name in PLUGINS[extra]:
        metadata.version(name)  # installed here, so its requirements can be followed
    resolved = closure(declared(extra))
    assert not resolved & HEAVY, sorted(resolved & HEAVY)


def test_the_heavy_stacks_are_in_the_extras_named_for_them():
    assert {"chromadb", "sentence-transformers", "langchain-chroma"} <= declared(
        "langchain-examples"
    )
    assert {"chromadb", "llama-index-vector-stores-chroma"} <= declared("llamaindex-examples")
    assert "langchain-openai" in declared("openai")
    assert {"chromadb", "matplotlib", "onnxruntime"} <= declared("study")
    assert {"duckdb", "pandas"} <= declared("audit")
    every = set(_project()["optional-dependencies"]) - {"all"}
    assert declared("all") == set().union(*(declared(extra) for extra in every))


BLOCKED = (
    "chromadb",
    "langchain_chroma",
    "langchain_huggingface",
    "langchain_openai",
    "llama_index.embeddings",
    "llama_index.vector_stores",
    "onnxruntime",
    "sentence_transformers",
    "torch",
    "transformers",
)

ADAPTERS_WITHOUT_EXTRAS = textwrap.dedent(
    f"""
    import sys
    for name in {BLOCKED!r}:
        sys.modules[name] = None  # as if not installed: importing it raises ImportError

    import os
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings

    import fairrag_langchain
    from fairrag_langchain import (
        CitationOutputParser, FairnessCallbackHandler, FairReranker, FairRetriever,
        MissingChatModelError, make_fair_rag_chain,
    )
    import fairrag_llamaindex
    from fairrag_llamaindex import FairRerankPostprocessor, FairnessEventHandler, query_seed


    class Letters(Embeddings):  # the user's own embedding model
        def embed_documents(self, texts):
            return [self.embed_query(t) for t in texts]

        def embed_query(self, text):
            return [text.lower().count(c) for c in "aeiou"]


    pool = [
        Document(f"{{name}} text", metadata={{"gender": g}})
        for name, g in [("Ada", "f"), ("Alan", "m"), ("Grace", "f"), ("John", "m")]
    ]
    reranker = FairReranker(
        ranker="representative_stochastic", group_key="gender", protected="f", top_n=2,
        seed=0, embeddings=Letters(),
    )
    shown = reranker.compress_documents(pool, "Ada")
    assert len(shown) == 2 and shown[0].metadata["score_source"] == "embeddings", shown
    os.environ.pop("OPENAI_API_KEY", None)
    try:  # without a key too (a docs trial: the key alone was named, then the extra)
        make_fair_rag_chain(reranker, group_key="gender", protected="f")
    except MissingChatModelError as exc:
        print("no key:", exc)
    os.environ["OPENAI_API_KEY"] = "sk-test"
    try:
        make_fair_rag_chain(reranker, group_key="gender", protected="f")
    except MissingChatModelError as exc:
        print("error:", exc)
    """
)


def test_the_adapters_work_without_chroma_embeddings_models_or_openai():
    done = subprocess.run(
        [sys.executable, "-c", ADAPTERS_WITHOUT_EXTRAS],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    # The default chat model is an optional path: its error names the extra to install.
    no_key, with_key = done.stdout.split("no key:")[1].split("error:")
    assert "OPENAI_API_KEY" in no_key and "pip install 'fairrag[openai]'" in no_key, no_key
    assert "pip install 'fairrag[openai]'" in with_key, done.stdout


def test_importing_the_adapters_loads_no_heavy_module():
    code = (
        "import sys\n"
        "import fairrag_langchain, fairrag_llamaindex\n"
        "from fairrag_langchain import FairReranker, FairRetriever, make_fair_rag_chain\n"
        "from fairrag_llamaindex import FairRerankPostprocessor, FairnessEventHandler\n"
        "heavy = ('chromadb', 'torch', 'sentence_transformers', 'transformers', "
        "'langchain_openai', 'onnxruntime', 'duckdb', 'matplotlib', 'pandas')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_importing_an_adapter_package_defers_its_modules():
    code = (
        "import sys\n"
        "import fairrag_langchain, fairrag_llamaindex\n"
        "print(sorted(m for m in sys.modules if m.startswith(('fairrag_langchain.', "
        "'fairrag_llamaindex.', 'langchain_core', 'llama_index'))))\n"
        "from fairrag_langchain import FairReranker\n"
        "print('fairrag_langchain.chains' in sys.modules, "
        "'fairrag_langchain.callbacks' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "False False"]

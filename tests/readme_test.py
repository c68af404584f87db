"""The README's promises: its two commands exist and CI runs one; its Python examples run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
def test_python_examples_run_in_order():
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(blocks) >= 3
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)  # the README's own code
    docs = namespace["docs"]
    assert len(docs) == 4
    assert {d.metadata["gender"] for d in docs} == {"female", "male"}
    handler = namespace["handler"]
    assert len(handler.records) == 1
    assert len(handler.records[0]["groups"]) == 4
    assert handler.records[0]["query_seed"] == 7 and handler.records[0]["ranker"] is not None
    from llama_index.core.schema import MetadataMode

    nodes = list(namespace["index"].docstore.docs.values())
    assert len(nodes) == 6
    for node in nodes:  # the group label is neither embedded nor shown to the LLM
        for mode in (MetadataMode.EMBED, MetadataMode.LLM):
            assert "gender" not in node.get_content(metadata_mode=mode)

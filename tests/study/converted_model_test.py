"""The local model's kept conversion (fairrag_study.converted_model; docs/SPEC.md, "The study"
→ Local generator, converted weights): the first load keeps what it de-quantised, a later
load reads it instead of the GGUF file and answers the same, and a damaged, foreign or
unrecorded conversion is never read: it is converted again, with a warning saying why."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import shutil
from pathlib import Path

import pytest

from fairrag_study import checked_folder, converted_model, local_llm
from fairrag_study.converted_model import (
    CONVERTED_FILES,
    LocalModelCacheWarning,
    converted_folder,
    keep_converted,
    load_converted,
)
from fairrag_study.data import default_cache_dir

KEY = ("smollm2", 1)
SHA = local_llm.LOCAL_MODELS["smollm2"].sha256


def _read(where: Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return (
        AutoTokenizer.from_pretrained(str(where)),
        AutoModelForCausalLM.from_pretrained(str(where), dtype=torch.float32).eval(),
    )


def _answer(tokenizer, model, tokens: int = 24) -> str:
    import torch

    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Name three women in physics."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=tokens, do_sample=False)
    return tokenizer.decode(out[0][ids.shape[1] :])


def _kept(local_model) -> Path:
    """The conversion this process's first load (the ``local_model`` fixture) kept."""
    folder = converted_folder(default_cache_dir(), "smollm2", SHA)
    assert folder.is_dir(), f"the first load kept no conversion in {folder}"
    return folder


@pytest.fixture
def fresh_process():
    """``_load`` as in a new process (nothing loaded yet); the loaded model put back after."""
    saved = local_llm._LOADED.pop(KEY)
    try:
        yield
    finally:
        local_llm._LOADED[KEY] = saved


def test_the_first_load_keeps_its_conversion_beside_a_digest_record(local_model):
    folder = _kept(local_model)
    assert sorted(p.name for p in folder.iterdir()) == sorted([*CONVERTED_FILES, "meta.json"])
    record = json.loads((folder.parent / f"{folder.name}.sha256.json").read_text())
    assert sorted(record["files"]) == sorted(CONVERTED_FILES)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["gguf_sha256"] == SHA and meta["transformers"] and meta["gguf"]


def test_a_later_load_reads_the_conversion_not_the_gguf_file_and_answers_the_same(
    local_model, fresh_process, monkeypatch
):
    """The GGUF reader made to fail: the second load never calls it, draws no progress bar,
    and its model is the first load's, tensor for tensor, answering the same."""
    import torch
    from transformers import modeling_gguf_pytorch_utils

    def no_gguf(*args, **kwargs):
        raise AssertionError("the GGUF file was read although its conversion is kept")

    monkeypatch.setattr(modeling_gguf_pytorch_utils, "load_gguf_checkpoint", no_gguf)
    _kept(local_model)
    written = io.StringIO()
    with contextlib.redirect_stderr(written):
        tokenizer, model = local_llm._load("smollm2", 1)
    assert model is not local_model.model
    assert "Loading weights" not in written.getvalue() and "%|" not in written.getvalue()
    first = local_model.model.state_dict()
    second = model.state_dict()
    assert sorted(first) == sorted(second)
    assert all(torch.equal(first[key], second[key]) for key in first)
    assert _answer(tokenizer, model) == _answer(local_model.tokenizer, local_model.model)


def _copy(folder: Path, cache: Path) -> Path:
    """``folder`` and its record placed the same way under ``cache``: the files hard-linked
    (538 MB each copy otherwise), the record copied. A test changing a file in place replaces
    its link with a copy first (the original is memory-mapped by this process's model)."""
    target = cache / "models" / folder.name
    shutil.copytree(folder, target, copy_function=os.link)
    name = f"{folder.name}.sha256.json"
    shutil.copyfile(folder.parent / name, target.parent / name)
    return target


def _flip_a_weight_byte(folder: Path) -> None:
    path = folder / "model.safetensors"
    linked = path.with_name("linked")
    path.rename(linked)
    shutil.copyfile(linked, path)  # a copy of its own to damage
    linked.unlink()
    with open(path, "r+b") as handle:
        handle.seek(path.stat().st_size - 1000)  # inside the tensors, past the header
        byte = handle.read(1)
        handle.seek(-1, 1)
        handle.write(bytes([byte[0] ^ 0x01]))


def _drop_record(folder: Path) -> None:
    (folder.parent / f"{folder.name}.sha256.json").unlink()


def _record_names_fewer(folder: Path) -> None:
    path = folder.parent / f"{folder.name}.sha256.json"
    record = json.loads(path.read_text())
    record["files"] = {"tokenizer.json": record["files"]["tokenizer.json"]}
    path.write_text(json.dumps(record))


def _other_format(folder: Path) -> None:
    meta = (folder / "meta.json").read_text()
    (folder / "meta.json").unlink()  # a linked file: replaced, not written through
    (folder / "meta.json").write_text(json.dumps({**json.loads(meta), "format": 0}))


def _an_extra_tokenizer_file(folder: Path) -> None:
    """A file transformers' ``from_pretrained`` reads though the record does not name it: it
    changed the tokenizer's end-of-text token, and with it every answer's end (a review)."""
    (folder / "special_tokens_map.json").write_text('{"eos_token": "<|endoftext|>"}')


def _a_recorded_file_missing(folder: Path) -> None:
    (folder / "generation_config.json").unlink()


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (_flip_a_weight_byte, "model.safetensors differs from the file converted (sha256)"),
        (_drop_record, "it has no digest record"),
        (_record_names_fewer, "names ['tokenizer.json']; expected a sha256 for each of"),
        (_other_format, "incomplete or of another format"),
        (_an_extra_tokenizer_file, "files its digest record does not name"),
        (_a_recorded_file_missing, "it lacks ['generation_config.json']"),
    ],
    ids=[
        "a weight flipped",
        "no record",
        "a record naming fewer files",
        "another format",
        "an extra file",
        "a file missing",
    ],
)
def test_a_damaged_or_foreign_conversion_is_never_read_and_is_converted_again(
    local_model, tmp_path, damage, why
):
    folder = _copy(_kept(local_model), tmp_path)
    damage(folder)
    read: list[Path] = []
    with pytest.warns(LocalModelCacheWarning, match="converting it again") as caught:
        assert load_converted(folder, lambda where: read.append(where) or ("t", "m")) is None
    assert why in str(caught[0].message)
    assert read == []  # nothing parsed the damaged folder
    assert not folder.exists()
    assert not (folder.parent / f"{folder.name}.sha256.json").exists()


def test_an_intact_copy_of_a_conversion_is_read(local_model, tmp_path):
    folder = _copy(_kept(local_model), tmp_path)
    assert load_converted(folder, lambda where: ("tokenizer", where)) == ("tokenizer", folder)


def test_a_conversion_that_passes_its_check_but_cannot_be_read_is_kept(local_model, tmp_path):
    """Reading a checked folder can fail for reasons of the moment (memory, open files): the
    run goes on with the GGUF file and the folder stays for the next process."""
    folder = _copy(_kept(local_model), tmp_path)

    def failing(where: Path):
        raise OSError(24, "Too many open files")

    with pytest.warns(LocalModelCacheWarning, match="could not be read .*Too many open files"):
        assert load_converted(folder, failing) is None
    assert folder.is_dir() and (folder.parent / f"{folder.name}.sha256.json").is_file()


def test_a_cache_this_user_may_only_read_is_read_and_never_breaks_the_run(
    local_model, tmp_path, monkeypatch
):
    """A cache made by another user (an image's, a shared one): its lock file opens for reading
    only. An intact conversion is read under the shared lock; a damaged one that cannot be
    removed leaves the run on the GGUF file with a warning, never an error (a review: the
    PermissionError escaped and stopped the study)."""
    folder = _copy(_kept(local_model), tmp_path)
    real_open = open

    def read_only(path, mode="r", *args, **kwargs):
        if any(flag in mode for flag in "wa+x"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, mode, *args, **kwargs)

    (folder.parent / f".{folder.name}.lock").touch()  # made by the cache's owner
    monkeypatch.setattr(checked_folder, "open", read_only, raising=False)
    assert load_converted(folder, lambda where: ("read", where)) == ("read", folder)
    _drop_record(folder)

    def cannot_remove(self, where):
        raise PermissionError(13, "Permission denied", str(where))

    monkeypatch.setattr(checked_folder.CheckedFolders, "remove", cannot_remove)
    with pytest.warns(LocalModelCacheWarning, match="cannot be used .*Permission denied"):
        assert load_converted(folder, lambda where: ("read", where)) is None


def test_a_conversion_that_reads_back_differently_is_not_kept(local_model, tmp_path):
    """The read-back check (every tensor, the chat template, the probe texts' ids) runs before
    the folder is placed: a conversion whose tensors come back changed is not kept."""
    import torch

    changed = copy.deepcopy(local_model.model)
    with torch.no_grad():
        next(changed.parameters()).view(-1)[0] += 1.0
    folder = converted_folder(tmp_path, "smollm2", SHA)
    with pytest.warns(LocalModelCacheWarning, match="converted tensor .* differs") as caught:
        kept = keep_converted(
            folder,
            local_model.tokenizer,
            local_model.model,
            lambda where: (local_model.tokenizer, changed),
            {"model": "smollm2"},
        )
    assert not kept and "every run reads the GGUF file" in str(caught[0].message)
    # neither the folder, its staging folder nor a record: only the lock file is left
    assert not any(p.name.startswith(folder.name) for p in (tmp_path / "models").iterdir())


def test_a_cache_that_cannot_be_written_leaves_the_model_as_loaded(local_model, tmp_path):
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    with pytest.warns(LocalModelCacheWarning, match="are not kept"):
        assert not keep_converted(
            converted_folder(blocked, "smollm2", SHA),
            local_model.tokenizer,
            local_model.model,
            _read,
            {},
        )


def test_another_transformers_or_gguf_version_converts_again(monkeypatch, tmp_path):
    here = converted_folder(tmp_path, "smollm2", SHA)
    assert converted_folder(tmp_path, "smollm2", SHA) == here
    monkeypatch.setattr(converted_model, "_versions", lambda: {"transformers": "9", "gguf": "1"})
    assert converted_folder(tmp_path, "smollm2", SHA) != here
    monkeypatch.undo()
    assert converted_folder(tmp_path, "smollm2", "0" * 64) != here  # another GGUF file


def test_the_study_keeps_the_conversion_in_its_cache_dir(
    local_model, fresh_process, tmp_path, monkeypatch
):
    """``--cache-dir`` (``StudyConfig.cache_dir``) is where the study's local model looks for
    and keeps its conversion, as for its index, data and ONNX export."""
    from fairrag_study.config import StudyConfig
    from fairrag_study.phases.generation import chat_model

    monkeypatch.setattr(local_llm, "cap_malloc_arenas", lambda: False)  # this process's own
    settings = StudyConfig(llm="local", threads=1, cache_dir=tmp_path).generation_settings()
    local, _ = chat_model(settings)
    assert local_llm.LocalChatModel().cache_dir is None  # the default cache
    looked: list[Path] = []

    def found(folder: Path, load):
        looked.append(folder)
        return local_model.tokenizer, local_model.model

    monkeypatch.setattr(local_llm, "load_converted", found)
    local.max_tokens = 2
    local.invoke("Name one physicist.")  # the first call loads the model
    assert looked == [converted_folder(tmp_path, "smollm2", SHA)]

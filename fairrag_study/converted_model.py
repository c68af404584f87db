"""The local chat model's weights converted once: float32 safetensors in the study's cache
(docs/SPEC.md, "The study" → Local generator, converted weights).

transformers reads a GGUF file by de-quantising it to float32, and reads the file three times
(config, tokenizer, weights): 42.5 CPU-s for SmolLM2-135M on this project's 2-core machine, in
every process. The first load keeps what it de-quantised: the model's tensors as
``model.safetensors`` with its config, generation config and tokenizer, in
``<cache>/models/<name>-<key>`` (:func:`converted_folder`); later loads read that folder with
``from_pretrained`` (5.0 CPU-s with the check, and 0.56 GiB of peak memory against 1.19: the
weights are memory-mapped; benchmarks/bench_local_load.py) after checking every file's sha256
against the digest record beside it (:class:`~fairrag_study.checked_folder.CheckedFolders`).

The key is the GGUF file's pinned sha256 with the versions of transformers and gguf that
de-quantised it: another version converts again. Before the folder is placed, it is loaded back
and must equal what was converted: every tensor (``torch.equal``), the chat template, and the
tokenizer's ids on :data:`PROBE_TEXTS`. A folder that fails its check at a load is converted
again (a :class:`LocalModelCacheWarning` says why); a conversion that cannot be kept (a cache
that cannot be written, another transformers' files) leaves the run on the GGUF file, with the
warning.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from .checked_folder import CheckedFolders
from .data import sha256_of

__all__ = [
    "CONVERTED_FILES",
    "PROBE_TEXTS",
    "LocalModelCacheWarning",
    "converted_folder",
    "keep_converted",
    "load_converted",
]

CONVERSION_FORMAT = 1
"""Version of the converted folder's layout; a folder of another version is converted again."""
CONVERTED_FILES = (
    "model.safetensors",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)
"""The files a conversion holds, each in its digest record (what transformers' ``save``
methods write for a chat model; a transformers that writes others keeps no conversion)."""
PROBE_TEXTS = (
    "Title: Yusuf al-Qaradawi\nYusuf al-Qaradawi was an Egyptian scholar.",
    "- Émilie du Châtelet (DocTitle: Émilie du Châtelet) – 数学 [1]",
    "",
)
"""Texts whose token ids the conversion's tokenizer must give as the GGUF one does."""
_CONVERSIONS = CheckedFolders(CONVERTED_FILES, CONVERSION_FORMAT, "conversion", "converted")


class LocalModelCacheWarning(UserWarning):
    """The local model's converted weights were not used or not kept (why is said): the run
    goes on with the GGUF file, read as before."""


def _versions() -> dict[str, str]:
    """The versions of the packages that de-quantise a GGUF file (part of the key)."""
    found = {}
    for package in ("transformers", "gguf"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "none"
    return found


def converted_folder(cache_dir: Path, name: str, gguf_sha256: str) -> Path:
    """``<cache>/models/<name>-<key>``: the conversion of model ``name`` whose GGUF file has
    ``gguf_sha256``, by this transformers and gguf (the key hashes all three)."""
    text = json.dumps({"gguf_sha256": gguf_sha256, **_versions()}, sort_keys=True)
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    return Path(cache_dir) / "models" / f"{name}-{key}"


def load_converted(folder: Path, load: Callable[[Path], tuple[Any, Any]]) -> tuple[Any, Any] | None:
    """``(tokenizer, model)`` read from ``folder`` by ``load`` when it is a conversion that
    passes its check (:meth:`CheckedFolders.verify <.checked_folder.CheckedFolders.verify>`);
    None when there is none. A folder failing its check is removed (to be converted again); a
    folder that passes but cannot be read, or a cache that cannot be read or changed, is left
    as it is. Either way a :class:`LocalModelCacheWarning` says why."""
    try:
        if not _CONVERSIONS.ready(folder):
            if folder.exists():
                _discard(folder, "is incomplete or of another format")
            return None
        with _CONVERSIONS.lock(folder, exclusive=False):  # the folder and its record, as placed
            try:
                _CONVERSIONS.verify(folder)
            except ValueError as exc:
                failed = f"fails its check ({exc})"
            else:
                try:
                    return load(folder)
                except Exception as exc:  # it passed its check: kept, not converted again
                    _warn(f"the converted model in {folder} could not be read ({exc})", "")
                    return None
        _discard(folder, failed)
    except OSError as exc:  # a cache this user cannot read, lock or change
        _warn(f"the converted model in {folder} cannot be used ({exc})", "")
    return None


def _discard(folder: Path, why: str) -> None:
    """Remove ``folder`` and its record under the exclusive lock, when it still fails its check
    there (another process may have placed a good one since), and say why."""
    with _CONVERSIONS.lock(folder, exclusive=True):
        try:
            if not _CONVERSIONS.ready(folder):
                raise ValueError("not ready")
            _CONVERSIONS.verify(folder)
        except (ValueError, OSError):
            _CONVERSIONS.remove(folder)
        else:
            return  # placed again meanwhile: the next load reads it
    _warn(f"the converted model in {folder} {why}", " and converting it again")


def _warn(why: str, then: str) -> None:
    warnings.warn(
        f"{why}: reading the GGUF file (about a minute){then}",
        LocalModelCacheWarning,
        stacklevel=4,
    )


def keep_converted(
    folder: Path,
    tokenizer: Any,
    model: Any,
    load: Callable[[Path], tuple[Any, Any]],
    facts: dict[str, Any],
) -> bool:
    """Save ``tokenizer`` and ``model`` (de-quantised from a GGUF file) as ``folder``, checked
    first (:func:`check_conversion`) and placed whole with its digest record; ``facts`` go to
    its ``meta.json``. True when kept; False, with a :class:`LocalModelCacheWarning` saying
    why, when it cannot be (the run goes on with the model it has)."""
    try:
        with _CONVERSIONS.staged(folder) as (work, record):
            _save(work, tokenizer, model)
            written = sorted(p.name for p in work.iterdir())
            if written != sorted(CONVERTED_FILES):
                raise ValueError(f"transformers wrote {written}, not {sorted(CONVERTED_FILES)}")
            digests = {name: sha256_of(work / name) for name in CONVERTED_FILES}
            check_conversion(tokenizer, model, *load(work))
            meta = {"format": CONVERSION_FORMAT, **facts, **_versions(), "files": digests}
            (work / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
            record.update(digests)
    except Exception as exc:  # a cache that cannot be written, another transformers
        warnings.warn(
            f"the local model's converted weights are not kept in {folder} ({exc}): every "
            "run reads the GGUF file (about a minute)",
            LocalModelCacheWarning,
            stacklevel=2,
        )
        return False
    return True


def _save(folder: Path, tokenizer: Any, model: Any) -> None:
    """The model's tensors (tied ones once: safetensors' ``save_model``), its config without the
    GGUF quantisation note (the tensors are float32 already), generation config, tokenizer."""
    import copy

    from safetensors.torch import save_model

    save_model(model, str(folder / "model.safetensors"))
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def check_conversion(tokenizer: Any, model: Any, read_tokenizer: Any, read_model: Any) -> None:
    """The conversion read back (``read_*``) equals what was converted, else ``ValueError``
    saying what differs: the same tensor names, each tensor equal (``torch.equal``: same
    shape, dtype and values), the same chat template, the same token ids for each of
    :data:`PROBE_TEXTS`."""
    import torch

    mine, theirs = model.state_dict(), read_model.state_dict()
    if sorted(mine) != sorted(theirs):
        missing = sorted(set(mine) ^ set(theirs))[:3]
        raise ValueError(f"the converted tensors' names differ ({missing} ...)")
    for key, tensor in mine.items():
        if not torch.equal(tensor, theirs[key]):
            raise ValueError(f"the converted tensor {key} differs from the GGUF file's")
    if tokenizer.chat_template != read_tokenizer.chat_template:
        raise ValueError("the converted chat template differs from the GGUF file's")
    for text in PROBE_TEXTS:
        if tokenizer(text)["input_ids"] != read_tokenizer(text)["input_ids"]:
            raise ValueError(f"the converted tokenizer's ids for {text!r} differ")

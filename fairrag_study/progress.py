"""Progress bars for the study's and the sweep's long phases (embedding, trials, sweep), and
none of the libraries' own while a model loads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["progress_bar", "quiet_transformers"]


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' warnings and progress bars (``Loading weights``) silenced while a model
    loads, put back as they were afterwards: the study's progress is its own, and
    ``--no-progress`` asked for none."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(show: bool, total: int, desc: str, unit: str) -> Any:
    """A tqdm bar of ``total`` steps, or a stand-in that shows nothing."""
    if not show:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit)

"""Progress bars for the study's and the sweep's long phases (embedding, trials, sweep)."""

from __future__ import annotations

from typing import Any

__all__ = ["progress_bar"]


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

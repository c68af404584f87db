"""The rankers' inner loops, compiled by numba when it is installed, numpy otherwise.

``pip install fairrag[fast]`` adds numba; nothing else changes. The backend is chosen once, at
import, by the environment variable ``FAIRRAG_KERNELS``: ``auto`` (the default: numba when it can
be imported), ``numba`` (an error when it cannot) or ``numpy``. :data:`active` is the backend in
use; :func:`use` switches it, process-wide, for a ``with`` block (tests and benchmarks compare
the two; it is not meant for use while other threads rank).

Both backends compute the same function of the same inputs, and every random number is drawn
from the ranker's numpy Generator *before* a kernel runs, so a seed gives the same ranking
whichever backend runs (``tests/core/kernels_test.py`` checks this on random pools, ties and
large alpha included; the libraries' ``pow``/``log`` may differ in the last place, which could
only matter for two keys within one ulp).

A backend is a module offering:

- ``NAME``: ``"numba"`` or ``"numpy"``;
- ``score_range(scores) -> (low, high)``: minimum and maximum of a non-empty 1-D float array
  (NaN when any value is NaN);
- ``plackett_luce_log_weights(scores, alpha, low, high)``: the 1-D log-weights of
  :func:`fairrag_core.plackett_luce.plackett_luce_log_weights` for a pool with known range;
- ``plackett_luce_top_k(scores, alpha, low, high, exponentials, k)``: the ``k`` largest keys
  ``log_weights + G`` with ``G = -log(exponentials)``, best first, equal keys by larger ``G``
  (:func:`fairrag_core.plackett_luce.gumbel_order`); ``exponentials`` may be overwritten;
- ``jit(function)``: ``function`` compiled (numba) or wrapped to run on Python lists (numpy).
  Functions passed to it are written once, in the loop style both can run; helpers they call
  are marked with :func:`jitable`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TypeVar

__all__ = ["BACKENDS", "ENV_VAR", "active", "available_backends", "jitable", "load", "use"]

ENV_VAR = "FAIRRAG_KERNELS"
BACKENDS = ("numba", "numpy")

F = TypeVar("F", bound=Callable)


def _numba_importable() -> bool:
    try:
        importlib.import_module("numba")
    except ImportError:
        return False
    return True


def _choose(setting: str) -> str:
    setting = setting.strip().lower() or "auto"
    if setting == "auto":
        return "numba" if _numba_importable() else "numpy"
    if setting not in BACKENDS:
        raise ValueError(
            f"{ENV_VAR}={setting!r} is not a kernel backend; use 'auto', 'numba' or 'numpy'"
        )
    return setting


_HELPERS: list[Callable] = []
_registered: set[Callable] = set()


def jitable(function: F) -> F:
    """Mark a helper that :func:`jit`-ed functions call; returned unchanged for plain Python.

    Under numba it is compiled inline into its callers (registered when the numba backend
    loads, so choosing numpy never imports numba).
    """
    _HELPERS.append(function)
    if "numba" in _loaded:
        _register_helpers()
    return function


def _register_helpers() -> None:
    from numba.extending import register_jitable

    for helper in _HELPERS:
        if helper not in _registered:
            register_jitable(helper)
            _registered.add(helper)


_loaded: set[str] = set()


def load(name: str) -> ModuleType:
    """The backend module ``name`` ('numba' or 'numpy'); a clear error when numba is missing."""
    if name not in BACKENDS:
        raise ValueError(f"unknown kernel backend {name!r}; known backends: {list(BACKENDS)}")
    if name == "numba":
        if not _numba_importable():
            raise ImportError(
                "the numba kernel backend needs numba: pip install 'fairrag[fast]' "
                f"(or set {ENV_VAR}=numpy to use the numpy kernels)"
            )
        _register_helpers()
    _loaded.add(name)
    return importlib.import_module(f"{__name__}._{name}_backend")


def available_backends() -> list[str]:
    """Backends that can run here."""
    return [name for name in BACKENDS if name == "numpy" or _numba_importable()]


active: ModuleType = load(_choose(os.environ.get(ENV_VAR, "auto")))
"""The backend the rankers call (a module with the functions listed above, and ``NAME``)."""


@contextmanager
def use(name: str) -> Iterator[ModuleType]:
    """Run the ``with`` block on backend ``name``, then restore the previous one."""
    global active
    previous, active = active, load(name)
    try:
        yield active
    finally:
        active = previous

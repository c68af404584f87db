"""Position-weight (exposure) models: the attention rank i receives (SPEC.md, "Exposure model")."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["ExposureModel", "make_exposure_model", "position_weights"]


@dataclass(frozen=True)
class ExposureModel:
    """A position-weight model ``v_i`` for 1-based ranks ``i``.

    - ``dcg`` (default): ``v_i = 1 / log2(i + 1)``, the DCG discount (Järvelin & Kekäläinen 2002).
    - ``rbp``: ``v_i = p ** (i - 1)`` with patience ``p`` in (0, 1] (Moffat & Zobel 2008).
    - ``uniform``: ``v_i = 1``; every shown position gets the same attention.
    """

    name: str = "dcg"
    patience: float = 0.8
    """RBP patience ``p``; only used by ``name="rbp"``."""

    def __post_init__(self) -> None:
        if self.name not in _MODELS:
            raise ValueError(
                f"exposure model {self.name!r} is unknown; known models: {sorted(_MODELS)}"
            )
        if self.name == "rbp" and not (0.0 < self.patience <= 1.0):
            raise ValueError(f"patience must be in (0, 1] for the rbp model, got {self.patience!r}")

    def weights(self, k: int) -> np.ndarray:
        """The weights ``v_1 .. v_k`` as a read-only float array."""
        return position_weights(k, self.name, self.patience)


def _dcg(k: int, _p: float) -> np.ndarray:
    return 1.0 / np.log2(np.arange(2, k + 2, dtype=float))


def _rbp(k: int, p: float) -> np.ndarray:
    return p ** np.arange(k, dtype=float)


def _uniform(k: int, _p: float) -> np.ndarray:
    return np.ones(k, dtype=float)


_MODELS = {"dcg": _dcg, "rbp": _rbp, "uniform": _uniform}


@lru_cache(maxsize=256)
def position_weights(k: int, name: str = "dcg", patience: float = 0.8) -> np.ndarray:
    """Weights ``v_1 .. v_k`` of the named model (cached; the array is read-only)."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k!r}")
    weights = _MODELS[name](k, patience)
    weights.setflags(write=False)
    return weights


def make_exposure_model(model: str | ExposureModel | None) -> ExposureModel:
    """Accept a model name, ``rbp(p)`` (the form records write, e.g. ``rbp(0.5)``), an
    :class:`ExposureModel`, or ``None`` (the DCG default)."""
    if model is None:
        return ExposureModel()
    if isinstance(model, ExposureModel):
        return model
    if isinstance(model, str):
        if model.startswith("rbp(") and model.endswith(")"):
            try:
                patience = float(model[4:-1])
            except ValueError:
                raise ValueError(
                    f"exposure {model!r}: the patience in rbp(p) must be a number in (0, 1]"
                ) from None
            return ExposureModel("rbp", patience)
        return ExposureModel(model)
    raise TypeError(
        f"exposure must be a model name {sorted(_MODELS)} or an ExposureModel, got {model!r}"
    )

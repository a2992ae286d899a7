"""Non-negative least squares on relative error, with a held-out split (numpy + scipy only)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.optimize import nnls

from sim.cost.features import Array

Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class FitResult:
    coef: dict[str, float]
    train_mape: float
    heldout_mape: float
    heldout_p95: float  # 95th percentile of |pred - y| / y on held-out rows, in percent
    n_train: int
    n_heldout: int

    def as_dict(self) -> dict[str, object]:
        return {
            "coef": {k: float(f"{v:.6g}") for k, v in self.coef.items()},
            "train_mape_pct": round(self.train_mape, 2),
            "heldout_mape_pct": round(self.heldout_mape, 2),
            "heldout_p95_pct": round(self.heldout_p95, 2),
            "n_train": self.n_train,
            "n_heldout": self.n_heldout,
        }


def ape(pred: Array, y: Array) -> Array:
    """Absolute percentage error, percent."""
    return np.asarray(100.0 * np.abs(pred - y) / y, dtype=np.float64)


def nnls_relative(x: Array, y: Array) -> Array:
    """min || (x c - y) / y ||  s.t. c >= 0. Columns are rescaled for conditioning."""
    w = 1.0 / y
    xw = x * w[:, None]
    scale = np.abs(xw).max(axis=0)
    scale[scale == 0] = 1.0
    c, _ = nnls(xw / scale, np.ones_like(y), maxiter=50 * x.shape[1])
    return np.asarray(c / scale, dtype=np.float64)


def heldout_mask(n: int, frac: float, seed: int) -> Mask:
    rng = np.random.default_rng(seed)
    mask = np.zeros(n, dtype=bool)
    k = max(1, round(n * frac)) if n >= 5 else 0
    mask[rng.choice(n, size=k, replace=False)] = True
    return mask


def fit_terms(x: Array, y: Array, terms: tuple[str, ...], *, heldout: Mask | None = None,
              frac: float = 0.2, seed: int = 0) -> FitResult:
    """Fit on the rows not held out; report errors on the held-out rows.

    ``heldout``: a boolean mask chosen by the caller (e.g. the random mixed batches); by default
    a random ``frac`` of the rows.
    """
    y = np.asarray(y, dtype=np.float64)
    keep = y > 0
    x, y = x[keep], y[keep]
    hold: Mask = heldout_mask(len(y), frac, seed) if heldout is None else np.asarray(heldout, dtype=bool)[keep]
    if hold.all() or (~hold).sum() < len(terms):
        hold = heldout_mask(len(y), frac, seed)
    c = nnls_relative(x[~hold], y[~hold])
    coef = dict(zip(terms, (float(v) for v in c), strict=True))
    tr = ape(x[~hold] @ c, y[~hold])
    ho = ape(x[hold] @ c, y[hold]) if hold.any() else tr
    return FitResult(coef, float(tr.mean()), float(ho.mean()), float(np.percentile(ho, 95)),
                     int((~hold).sum()), int(hold.sum()))

"""Activation observers: what calibration records about one layer's input over the batches.

One ``Observer`` per quantised layer keeps the running min/max, a histogram and the per-channel
mean (for bias correction). The histogram spans [min, max] in ``BINS`` bins; when a batch falls
outside, the counts are re-binned onto the wider range (cumulative counts interpolated, as ORT's
HistogramCollector does), so memory stays ``BINS`` counts per layer whatever the batch count.
Everything is deterministic: the same batches give the same ranges.

Ranges (``lo <= 0 <= hi`` always, so zero padding is exact):
- ``min_max``: the observed extremes;
- ``percentile``: the ``max_percentile`` / ``1 - min_percentile`` quantiles of the histogram;
- ``kl``: TensorRT's entropy calibration: the clip threshold whose 255/127-level quantisation
  of the clipped histogram has the least KL divergence from it (searched in steps of ``KL_STEP`` bins).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BINS = 2048
KL_STEP = 16


@dataclass
class Observer:
    """Statistics of one activation tensor; ``channel_axis`` picks the per-channel mean."""

    channel_axis: int = 1
    lo: float = np.inf
    hi: float = -np.inf
    hist: np.ndarray | None = None
    edges: np.ndarray | None = None
    channel_sum: np.ndarray | None = None
    count_per_channel: int = 0
    batches: int = 0
    zeros: float = 0.0  # exact zeros seen (ReLU's): exactly representable, left out of the KL search

    def update(self, x: np.ndarray) -> None:
        """Add one batch (any float array; non-finite values are ignored for the ranges)."""
        x = np.asarray(x, dtype=np.float32)
        finite = x[np.isfinite(x)] if not np.isfinite(x).all() else x.reshape(-1)
        self.batches += 1
        if x.ndim > 0:
            ax = self.channel_axis % x.ndim
            moved = np.moveaxis(x, ax, 0).reshape(x.shape[ax], -1).astype(np.float64)
            s = np.nan_to_num(moved, nan=0.0, posinf=0.0, neginf=0.0).sum(axis=1)
            self.channel_sum = s if self.channel_sum is None or self.channel_sum.shape != s.shape else self.channel_sum + s
            self.count_per_channel += moved.shape[1]
        if finite.size == 0:
            return
        lo, hi = float(finite.min()), float(finite.max())
        new_lo, new_hi = min(self.lo, lo, 0.0), max(self.hi, hi, 0.0)
        if new_hi == new_lo:
            new_hi = new_lo + 1e-8
        if self.hist is None or self.edges is None:
            self.edges = np.linspace(new_lo, new_hi, BINS + 1)
            self.hist = np.zeros(BINS, np.float64)
        elif new_lo < self.edges[0] or new_hi > self.edges[-1]:
            self._rebin(new_lo, new_hi)
        self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)
        h, _ = np.histogram(finite, bins=self.edges)
        self.hist = self.hist + h
        self.zeros += float(np.count_nonzero(finite == 0))

    def _rebin(self, lo: float, hi: float) -> None:
        assert self.hist is not None and self.edges is not None
        cum = np.concatenate([[0.0], np.cumsum(self.hist)])
        edges = np.linspace(lo, hi, BINS + 1)
        new_cum = np.interp(edges, self.edges, cum, left=0.0, right=cum[-1])
        self.hist = np.diff(new_cum)
        self.edges = edges

    @property
    def channel_mean(self) -> np.ndarray | None:
        if self.channel_sum is None or self.count_per_channel == 0:
            return None
        return self.channel_sum / self.count_per_channel

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of the histogram (linear within a bin)."""
        if self.hist is None or self.edges is None or self.hist.sum() == 0:
            return 0.0
        cum = np.cumsum(self.hist) / self.hist.sum()
        return float(np.interp(q, np.concatenate([[0.0], cum]), self.edges))

    def range(self, algo: str, max_percentile: float = 0.99999, min_percentile: float = 0.99999,
              levels: int = 255) -> tuple[float, float]:
        """(lo, hi) to quantise into, always containing 0."""
        if self.hist is None:
            return 0.0, 0.0
        if algo == "min_max":
            lo, hi = self.lo, self.hi
        elif algo == "percentile":
            lo, hi = self.quantile(1.0 - min_percentile), self.quantile(max_percentile)
        elif algo == "kl":
            lo, hi = self._kl_range(levels)
        else:
            raise ValueError(f"unknown calibration algorithm {algo!r}")
        return min(lo, 0.0), max(hi, 0.0)

    def _kl_range(self, levels: int) -> tuple[float, float]:
        """Entropy calibration on the histogram of |x| (or of x when it is one-signed)."""
        assert self.hist is not None and self.edges is not None
        centers = (self.edges[:-1] + self.edges[1:]) / 2
        amax = max(abs(self.lo), abs(self.hi))
        if amax == 0:
            return 0.0, 0.0
        abs_edges = np.linspace(0.0, amax, BINS + 1)
        hist, _ = np.histogram(np.abs(centers), bins=abs_edges, weights=self.hist)
        # a ReLU's exact zeros (often half the values) quantise without error: kept in the first bin
        # they make every merge of that bin look costly, and the search then picks the threshold
        # with the fewest merges, i.e. the smallest (EfficientNet-Lite0's ReLU6 outputs clipped at 0.75
        # of 6, every prediction lost)
        hist[0] = max(0.0, hist[0] - self.zeros)
        n_levels = levels // 2 + 1 if self.lo < 0 < self.hi else levels
        best_t, best_kl = amax, np.inf
        for i in range(max(n_levels, KL_STEP), BINS + 1, KL_STEP):
            p = hist[:i].astype(np.float64).copy()
            p[-1] += hist[i:].sum()
            if p.sum() == 0:
                continue
            kl = _kl_quantised(p, hist[:i], n_levels)
            if kl < best_kl:
                best_kl, best_t = kl, abs_edges[i]
        if self.lo >= 0:
            return 0.0, float(best_t)
        if self.hi <= 0:
            return -float(best_t), 0.0
        return -float(best_t), float(best_t)


def _kl_quantised(p: np.ndarray, raw: np.ndarray, n_levels: int) -> float:
    """KL(P || Q) where Q spreads each of ``n_levels`` merged bins of ``raw`` evenly over its
    non-empty bins (TensorRT's entropy calibrator)."""
    n = p.size
    idx = np.minimum((np.arange(n) * n_levels) // n, n_levels - 1)
    nonzero = raw > 0
    q_sum = np.bincount(idx, weights=raw, minlength=n_levels)
    q_cnt = np.bincount(idx, weights=nonzero.astype(np.float64), minlength=n_levels)
    q = np.where(nonzero, q_sum[idx] / np.maximum(q_cnt[idx], 1), 0.0)
    ps, qs = p / p.sum(), q / max(q.sum(), 1e-30)
    mask = ps > 0
    qs = np.where(mask & (qs == 0), 1e-10, qs)
    return float(np.sum(ps[mask] * np.log(ps[mask] / qs[mask])))


def quant_params(lo: float, hi: float, asymmetric: bool, reduce_range: bool = False) -> tuple[float, int]:
    """(scale, zero_point) for uint8 (asymmetric, zero point in 0..255; 0..127 with
    ``reduce_range``) or int8 (symmetric, 0)."""
    if asymmetric:
        top = 127.0 if reduce_range else 255.0
        scale = (hi - lo) / top if hi > lo else 1.0
        zp = int(np.clip(np.round(-lo / scale), 0, top))
        return float(np.float32(scale)), zp
    amax = max(abs(lo), abs(hi))
    return float(np.float32(amax / 127.0 if amax > 0 else 1.0)), 0


def weight_scales(w: np.ndarray, axis: int, channel_wise: bool) -> np.ndarray:
    """Symmetric int8 scales of a weight: one per index of ``axis`` (channel_wise) or one in all."""
    a = np.abs(w.astype(np.float64))
    if channel_wise:
        amax = np.moveaxis(a, axis, 0).reshape(w.shape[axis], -1).max(axis=1)
    else:
        amax = np.array([a.max()])
    return np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)

"""Detection / image-layout ops (ONNX spec, Operators.md): RoiAlign (10, 16),
NonMaxSuppression (10), Col2Im (18) and CenterCropPad (18). Part of the ``pycann.ops.misc``
family.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import Dim, DType, TensorDesc
from pycann.ops.opdef import InferContext, OpDef


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# --------------------------------------------------------------------------------- RoiAlign


def _bilinear_rows(coord: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """RoiAlign's per-axis bilinear taps: (low, high, w_low, w_high); samples outside
    [-1, size] get zero weight (Detectron / ORT roi_align.cc rules)."""
    out = (coord < -1.0) | (coord > size)
    c = np.maximum(coord, 0.0)
    low = c.astype(np.int64)
    top = low >= size - 1
    low = np.where(top, size - 1, low)
    high = np.where(top, size - 1, low + 1)
    c = np.where(top, low.astype(c.dtype), c)
    lw = c - low
    w_low, w_high = 1.0 - lw, lw
    w_low = np.where(out, 0.0, w_low)
    w_high = np.where(out, 0.0, w_high)
    return low, high, w_low, w_high


def _k_roi_align(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """RoiAlign (Operators.md#RoiAlign): bilinear samples on a roi_bin_grid per output bin,
    averaged ('avg') or max of the weighted corner values ('max', as ONNX Runtime does)."""
    X, rois, bidx = x[0], x[1], np.asarray(x[2]).astype(np.int64)
    n_rois = rois.shape[0]
    N, C, H, W = X.shape
    ph_n, pw_n = int(a["output_height"]), int(a["output_width"])
    ratio = int(a["sampling_ratio"])
    scale = float(a["spatial_scale"])
    half = _text(a["coordinate_transformation_mode"]) == "half_pixel"
    avg = _text(a["mode"]) == "avg"
    cdt = np.float64 if X.dtype == np.float64 else np.float32
    Xc = X.astype(cdt, copy=False)
    out = np.zeros((n_rois, C, ph_n, pw_n), cdt)
    off = 0.5 if half else 0.0
    for r in range(n_rois):
        x0, y0, x1, y1 = (float(v) * scale - off for v in rois[r])
        rw, rh = x1 - x0, y1 - y0
        if not half:  # legacy mode forces malformed ROIs to 1x1
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / ph_n, rw / pw_n
        gh = ratio if ratio > 0 else int(np.ceil(rh / ph_n))
        gw = ratio if ratio > 0 else int(np.ceil(rw / pw_n))
        if gh <= 0 or gw <= 0:
            continue
        ys = y0 + np.arange(ph_n)[:, None] * bh + (np.arange(gh)[None, :] + 0.5) * bh / gh  # [ph, gh]
        xs = x0 + np.arange(pw_n)[:, None] * bw + (np.arange(gw)[None, :] + 0.5) * bw / gw
        yl, yh, wyl, wyh = _bilinear_rows(ys.reshape(-1), H)
        xl, xh, wxl, wxh = _bilinear_rows(xs.reshape(-1), W)
        img = Xc[bidx[r]]
        if avg:
            # Separable: out = Ay @ img @ Ax^T with the sample weights summed per bin.
            Ay = np.zeros((ph_n, H), cdt)
            rows = np.repeat(np.arange(ph_n), gh)
            np.add.at(Ay, (rows, yl), wyl)
            np.add.at(Ay, (rows, yh), wyh)
            Ax = np.zeros((pw_n, W), cdt)
            cols = np.repeat(np.arange(pw_n), gw)
            np.add.at(Ax, (cols, xl), wxl)
            np.add.at(Ax, (cols, xh), wxh)
            out[r] = (Ay @ img @ Ax.T) / max(gh * gw, 1)
        else:
            corners = []
            for yi, wy in ((yl, wyl), (yh, wyh)):
                for xi, wx in ((xl, wxl), (xh, wxh)):
                    v = img[:, yi[:, None], xi[None, :]] * (wy[:, None] * wx[None, :]).astype(cdt)
                    corners.append(v)
            v = np.maximum.reduce(corners)  # [C, ph*gh, pw*gw]
            out[r] = v.reshape(C, ph_n, gh, pw_n, gw).max(axis=(2, 4))
    return [out.astype(X.dtype)]


def _infer_roi_align(ctx: InferContext) -> list[TensorDesc]:
    x, rois, bi = ctx.input(0), ctx.input(1), ctx.input(2)
    if _text(ctx.attrs["mode"]) not in ("avg", "max"):
        raise ctx.fail(f"attribute 'mode' is {ctx.attrs['mode']!r}; expected avg or max")
    if _text(ctx.attrs["coordinate_transformation_mode"]) not in ("half_pixel", "output_half_pixel"):
        raise ctx.fail("attribute 'coordinate_transformation_mode' must be half_pixel or output_half_pixel")
    if x is not None and x.rank is not None and x.rank != 4:
        raise ctx.fail(f"input X has shape {x}; expected rank 4 (N, C, H, W)")
    if rois is not None and rois.shape is not None:
        if len(rois.shape) != 2 or (isinstance(rois.shape[1], int) and rois.shape[1] != 4):
            raise ctx.fail(f"input rois has shape {rois}; expected (num_rois, 4)")
    n = rois.shape[0] if rois is not None and rois.shape is not None else None
    if n is None and bi is not None and bi.shape is not None:
        n = bi.shape[0]
    c = x.shape[1] if x is not None and x.shape is not None else None
    return [TensorDesc(x.dtype if x else 1, (n, c, int(ctx.attrs["output_height"]), int(ctx.attrs["output_width"])))]


# ------------------------------------------------------------------------ NonMaxSuppression


def _k_nms(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """NonMaxSuppression (Operators.md#NonMaxSuppression): per batch and class, greedily keep
    the highest-scoring boxes (ties: lower index first) whose IoU with every kept box is
    <= iou_threshold, scores > score_threshold, at most max_output_boxes_per_class."""
    boxes, scores = x[0].astype(np.float64), x[1].astype(np.float64)
    get = lambda i, d: float(np.asarray(x[i]).reshape(-1)[0]) if len(x) > i and x[i] is not None and np.size(x[i]) else d
    max_out = int(get(2, 0))
    iou_th = get(3, 0.0)
    score_th = get(4, None)
    if a["center_point_box"]:
        cx, cy, w, h = (boxes[..., k] for k in range(4))
        y1, x1, y2, x2 = cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2
    else:
        y1, x1, y2, x2 = (boxes[..., k] for k in range(4))
    ymin, ymax = np.minimum(y1, y2), np.maximum(y1, y2)
    xmin, xmax = np.minimum(x1, x2), np.maximum(x1, x2)
    area = (ymax - ymin) * (xmax - xmin)
    sel: list[tuple[int, int, int]] = []
    if max_out <= 0:
        return [np.zeros((0, 3), np.int64)]
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            cand = np.argsort(-s, kind="stable")
            if score_th is not None:
                cand = cand[s[cand] > score_th]
            kept: list[int] = []
            while cand.size and len(kept) < max_out:
                i = int(cand[0])
                kept.append(i)
                rest = cand[1:]
                ih = np.minimum(ymax[b, i], ymax[b, rest]) - np.maximum(ymin[b, i], ymin[b, rest])
                iw = np.minimum(xmax[b, i], xmax[b, rest]) - np.maximum(xmin[b, i], xmin[b, rest])
                inter = np.maximum(ih, 0) * np.maximum(iw, 0)
                union = area[b, i] + area[b, rest] - inter
                with np.errstate(invalid="ignore", divide="ignore"):
                    iou = np.where((area[b, i] > 0) & (area[b, rest] > 0), inter / union, 0.0)
                cand = rest[~(iou > iou_th)]
            sel.extend((b, c, i) for i in kept)
    return [np.array(sel, np.int64).reshape(-1, 3)]


def _infer_nms(ctx: InferContext) -> list[TensorDesc]:
    b, s = ctx.input(0), ctx.input(1)
    if b is not None and b.shape is not None:
        if len(b.shape) != 3 or (isinstance(b.shape[2], int) and b.shape[2] != 4):
            raise ctx.fail(f"input boxes has shape {b}; expected (batch, num_boxes, 4)")
    if s is not None and s.rank is not None and s.rank != 3:
        raise ctx.fail(f"input scores has shape {s}; expected (batch, num_classes, num_boxes)")
    return [TensorDesc(int(DType.INT64), (None, 3))]


# ----------------------------------------------------------------------------------- Col2Im


def _k_col2im(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """Col2Im (Operators.md#Col2Im): scatter-add column blocks back into an N-D image."""
    cols = x[0]
    img = [int(v) for v in np.asarray(x[1]).reshape(-1)]
    blk = [int(v) for v in np.asarray(x[2]).reshape(-1)]
    d = len(img)
    dil = list(a.get("dilations") or [1] * d)
    pads = list(a.get("pads") or [0] * (2 * d))
    strides = list(a.get("strides") or [1] * d)
    n_blocks = [(img[i] + pads[i] + pads[i + d] - (dil[i] * (blk[i] - 1) + 1)) // strides[i] + 1 for i in range(d)]
    N = cols.shape[0]
    kprod = int(np.prod(blk))
    C = cols.shape[1] // kprod
    if C * kprod != cols.shape[1] or int(np.prod(n_blocks)) != cols.shape[2]:
        raise ValueError(f"input shape {cols.shape} does not match block_shape {blk} / image_shape {img}")
    padded = np.zeros((N, C, *[img[i] + pads[i] + pads[i + d] for i in range(d)]), cols.dtype)
    c = cols.reshape(N, C, *blk, *n_blocks)
    nc = (slice(None), slice(None))  # leading N, C axes, taken whole
    for k in np.ndindex(*blk):
        sl = tuple(slice(k[i] * dil[i], k[i] * dil[i] + strides[i] * (n_blocks[i] - 1) + 1, strides[i]) for i in range(d))
        padded[nc + sl] += c[nc + k]
    crop = tuple(slice(pads[i], pads[i] + img[i]) for i in range(d))
    return [np.ascontiguousarray(padded[nc + crop])]


def _infer_col2im(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    img, blk = ctx.value(1), ctx.value(2)
    n = c = None
    if x is not None and x.shape is not None:
        if len(x.shape) != 3:
            raise ctx.fail(f"input has shape {x}; expected (N, C * prod(block_shape), L)")
        n = x.shape[0]
        if blk is not None and isinstance(x.shape[1], int):
            k = int(np.prod(blk))
            if k <= 0 or x.shape[1] % k:
                raise ctx.fail(f"input dim 1 ({x.shape[1]}) is not a multiple of prod(block_shape)={k}")
            c = x.shape[1] // k
    if img is None:
        img_desc = ctx.input(1)
        d = img_desc.shape[0] if img_desc is not None and img_desc.shape else None
        spatial: tuple[Dim, ...] = (None,) * d if isinstance(d, int) else ()
        if not spatial:
            return [TensorDesc(x.dtype if x else 1, None)]
    else:
        spatial = tuple(int(v) for v in np.asarray(img).reshape(-1))
    return [TensorDesc(x.dtype if x else 1, (n, c, *spatial))]


# ---------------------------------------------------------------------------- CenterCropPad


def _k_center_crop_pad(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """CenterCropPad (Operators.md#CenterCropPad): crop start rounded down, odd padding goes
    to the end, zero padding."""
    data = x[0]
    shape = [int(v) for v in np.asarray(x[1]).reshape(-1)]
    r = data.ndim
    axes = [int(v) % r for v in (a.get("axes") or range(r))]
    out_shape = list(data.shape)
    src, dst = [slice(None)] * r, [slice(None)] * r
    for ax, t in zip(axes, shape):
        dim = data.shape[ax]
        out_shape[ax] = t
        if t <= dim:
            s = (dim - t) // 2
            src[ax] = slice(s, s + t)
        else:
            p = (t - dim) // 2
            dst[ax] = slice(p, p + dim)
    out = np.zeros(out_shape, data.dtype)
    out[tuple(dst)] = data[tuple(src)]
    return [out]


def _infer_center_crop_pad(ctx: InferContext) -> list[TensorDesc]:
    x, shape = ctx.input(0), ctx.value(1)
    if x is None or x.shape is None:
        return [TensorDesc(x.dtype if x else 1, None)]
    r = len(x.shape)
    axes = list(ctx.attrs.get("axes") or range(r))
    if any(not -r <= int(v) < r for v in axes):
        raise ctx.fail(f"attribute 'axes' {axes} is out of range for rank {r}")
    axes = [int(v) % r for v in axes]
    dims: list[Dim] = list(x.shape)
    if shape is None:
        for ax in axes:
            dims[ax] = None
    else:
        vals = [int(v) for v in np.asarray(shape).reshape(-1)]
        if len(vals) != len(axes):
            raise ctx.fail(f"input 'shape' has {len(vals)} values; expected {len(axes)} (one per axis)")
        for ax, v in zip(axes, vals):
            dims[ax] = v
    return [TensorDesc(x.dtype, tuple(dims))]


_ROI_ATTRS = {"mode": "avg", "output_height": 1, "output_width": 1, "sampling_ratio": 0, "spatial_scale": 1.0}

OPS: list[OpDef] = [
    # RoiAlign-10 had no coordinate_transformation_mode: it behaved as output_half_pixel.
    OpDef("RoiAlign", _infer_roi_align, _k_roi_align, since=10,
          attrs={**_ROI_ATTRS, "coordinate_transformation_mode": "output_half_pixel"}),
    OpDef("RoiAlign", _infer_roi_align, _k_roi_align, since=16,
          attrs={**_ROI_ATTRS, "coordinate_transformation_mode": "half_pixel"}),
    OpDef("NonMaxSuppression", _infer_nms, _k_nms, since=10, attrs={"center_point_box": 0}),
    OpDef("Col2Im", _infer_col2im, _k_col2im, since=18, attrs={"dilations": None, "pads": None, "strides": None}),
    OpDef("CenterCropPad", _infer_center_crop_pad, _k_center_crop_pad, since=18, attrs={"axes": None}),
]

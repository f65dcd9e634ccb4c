"""Control flow: If, Loop, Scan (ONNX spec, Operators.md). Scoped kernels.

A scoped kernel gets ``run_body(attr_name, feeds) -> outputs``, supplied by the executor, which
runs the GRAPH attribute ``attr_name`` with ``feeds`` bound to the body's inputs and the
caller's values visible as outer scope. This keeps the op library free of executor imports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ops.opdef import REQUIRED, InferContext, OpDef

RunBody = Callable[[str, Sequence[np.ndarray]], Sequence[np.ndarray]]


def _body_out_descs(body: Any) -> list[TensorDesc | None]:
    return [body.descs.get(o) for o in body.outputs]


def _merge(a: TensorDesc | None, b: TensorDesc | None) -> TensorDesc:
    if a is None or b is None:
        d = a or b
        return TensorDesc(d.dtype if d else 0, None)
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return TensorDesc(a.dtype or b.dtype, None)
    return TensorDesc(a.dtype or b.dtype, tuple(x if x == y else None for x, y in zip(a.shape, b.shape)))


def _infer_if(ctx: InferContext) -> list[TensorDesc]:
    """A known condition (e.g. folded from static shapes inside a branch) gives the taken
    branch's descs; otherwise each output is what both branches agree on (``_merge``)."""
    then = _body_out_descs(ctx.attrs["then_branch"])
    other = _body_out_descs(ctx.attrs["else_branch"])
    if len(then) != len(other):
        raise ctx.fail(f"then_branch has {len(then)} outputs but else_branch has {len(other)}")
    cond = ctx.values[0] if ctx.values else None
    if cond is not None and np.asarray(cond).size == 1:
        taken = then if bool(np.asarray(cond).reshape(-1)[0]) else other
        return [d if d is not None else TensorDesc(0, None) for d in taken]
    return [_merge(a, b) for a, b in zip(then, other)]


def _k_if(x: Sequence[Any], a: Mapping[str, Any], run_body: RunBody) -> list[np.ndarray]:
    cond = x[0]
    if cond.size != 1:
        raise ValueError(f"If condition must hold exactly one element, got shape {cond.shape}")
    return list(run_body("then_branch" if bool(cond.reshape(-1)[0]) else "else_branch", []))


def _stack_desc(d: TensorDesc | None) -> TensorDesc:
    if d is None or d.shape is None:
        return TensorDesc(d.dtype if d else 0, None)
    return TensorDesc(d.dtype, (None,) + d.shape)


def _infer_loop(ctx: InferContext) -> list[TensorDesc]:
    body = ctx.attrs["body"]
    n_carried = len(ctx.inputs) - 2
    outs = _body_out_descs(body)[1:]
    res: list[TensorDesc] = []
    for i in range(ctx.n_outputs):
        if i < n_carried:
            init = ctx.inputs[2 + i]
            got = outs[i] if i < len(outs) else None
            res.append(_merge(init, got) if init is not None and got is not None else (got or init or TensorDesc(0, None)))
        else:
            res.append(_stack_desc(outs[i] if i < len(outs) else None))
    return res


def _k_loop(x: Sequence[Any], a: Mapping[str, Any], run_body: RunBody) -> list[Any]:
    """Loop; outputs are arrays, or sequences (lists) / empty optionals (None) for carried values."""
    max_trip = None if x[0] is None else int(np.asarray(x[0]).reshape(-1)[0])
    cond = True if len(x) < 2 or x[1] is None else bool(np.asarray(x[1]).reshape(-1)[0])
    carried = [v for v in x[2:]]
    n_carried = len(carried)
    scans: list[list[np.ndarray]] | None = None
    i = 0
    while cond and (max_trip is None or i < max_trip):
        outs = run_body("body", [np.array(i, dtype=np.int64), np.array(cond, dtype=np.bool_), *carried])
        cond = bool(np.asarray(outs[0]).reshape(-1)[0])
        carried = list(outs[1 : 1 + n_carried])
        per_iter = outs[1 + n_carried :]
        if scans is None:
            scans = [[] for _ in per_iter]
        for lst, v in zip(scans, per_iter):
            lst.append(np.asarray(v))
        i += 1
    # sequences (lists) and empty optionals (None) are carried as they are
    result = [c if c is None or isinstance(c, list) else np.asarray(c) for c in carried]
    n_scan = a["_n_outputs"] - n_carried
    if scans is None:
        # zero iterations: scan outputs are empty along the new axis; element shape unknown
        body = a["body"]
        for o in body.outputs[1 + n_carried :][:n_scan]:
            d = body.descs.get(o)
            dt = np.float32 if d is None or not d.dtype else _np(d.dtype)
            tail = tuple(s if isinstance(s, int) else 0 for s in (d.shape or ())) if d is not None else ()
            result.append(np.zeros((0,) + tail, dtype=dt))
    else:
        result.extend(np.stack(lst) for lst in scans)
    return result


def _np(dtype: int) -> np.dtype:
    from pycann.dtypes import to_numpy

    return to_numpy(dtype)


def _infer_scan(ctx: InferContext) -> list[TensorDesc]:
    body = ctx.attrs["body"]
    n_scan_in = ctx.attrs["num_scan_inputs"]
    n_state = len(ctx.inputs) - n_scan_in
    outs = _body_out_descs(body)
    res: list[TensorDesc] = []
    for i in range(ctx.n_outputs):
        d = outs[i] if i < len(outs) else None
        init = ctx.inputs[i] if i < n_state else None
        res.append(d if (i < n_state and d is not None) else (init if init else _stack_desc(d)))
    return res


def _k_scan(x: Sequence[Any], a: Mapping[str, Any], run_body: RunBody) -> list[np.ndarray]:
    n_in = a["num_scan_inputs"]
    n_state = len(x) - n_in
    states = list(x[:n_state])
    scan_in = list(x[n_state:])
    in_axes = list(a.get("scan_input_axes") or [0] * n_in)
    in_dirs = list(a.get("scan_input_directions") or [0] * n_in)
    seqs = []
    for v, ax, dr in zip(scan_in, in_axes, in_dirs):
        v = np.moveaxis(v, ax % v.ndim, 0)
        seqs.append(v[::-1] if dr else v)
    steps = seqs[0].shape[0] if seqs else 0
    collected: list[list[np.ndarray]] = []
    for t in range(steps):
        outs = run_body("body", [*states, *(s[t] for s in seqs)])
        states = [np.asarray(o) for o in outs[:n_state]]
        per = outs[n_state:]
        if not collected:
            collected = [[] for _ in per]
        for lst, v in zip(collected, per):
            lst.append(np.asarray(v))
    n_out = a["_n_outputs"] - n_state
    out_axes = list(a.get("scan_output_axes") or [0] * n_out)
    out_dirs = list(a.get("scan_output_directions") or [0] * n_out)
    results = [np.asarray(s) for s in states]
    for j in range(n_out):
        lst = collected[j] if collected else []
        if out_dirs[j]:
            lst = lst[::-1]
        stacked = np.stack(lst) if lst else np.zeros((0,), dtype=np.float32)
        results.append(np.moveaxis(stacked, 0, out_axes[j] % stacked.ndim) if stacked.ndim else stacked)
    return results


def _infer_scan8(ctx: InferContext) -> list[TensorDesc]:
    n_scan_in = ctx.attrs["num_scan_inputs"]
    n_state = len(ctx.inputs) - 1 - n_scan_in
    outs = _body_out_descs(ctx.attrs["body"])
    res: list[TensorDesc] = []
    for i in range(ctx.n_outputs):
        if i < n_state and ctx.inputs[1 + i] is not None:
            res.append(ctx.inputs[1 + i])  # type: ignore[arg-type]
        else:
            d = outs[i] if i < len(outs) else None
            res.append(TensorDesc(d.dtype if d else 0, None if d is None or d.shape is None else (None, None) + d.shape))
    return res


def _k_scan8(x: Sequence[Any], a: Mapping[str, Any], run_body: RunBody) -> list[np.ndarray]:
    """Scan-8: inputs (sequence_lens?, states..., scan inputs...) all carry a leading batch axis;
    each batch item is scanned along axis 1 independently (``directions`` reverses inputs)."""
    seq_lens = x[0]
    n_in = a["num_scan_inputs"]
    n_state = len(x) - 1 - n_in
    states, scans = list(x[1 : 1 + n_state]), list(x[1 + n_state :])
    dirs = list(a.get("directions") or [0] * n_in)
    batch = (states[0] if states else scans[0]).shape[0]
    per_state: list[list[np.ndarray]] = [[] for _ in range(n_state)]
    per_out: list[list[np.ndarray]] = []
    for b in range(batch):
        steps = scans[0].shape[1] if scans else 0
        if seq_lens is not None:
            steps = int(np.asarray(seq_lens).reshape(-1)[b])
        st = [s[b] for s in states]
        seqs = [(v[b, :steps][::-1] if d else v[b, :steps]) for v, d in zip(scans, dirs)]
        outs_b: list[list[np.ndarray]] = []
        for t in range(steps):
            res = run_body("body", [*st, *(q[t] for q in seqs)])
            st = [np.asarray(r) for r in res[:n_state]]
            if not outs_b:
                outs_b = [[] for _ in res[n_state:]]
            for lst, v in zip(outs_b, res[n_state:]):
                lst.append(np.asarray(v))
        for k in range(n_state):
            per_state[k].append(st[k])
        if not per_out:
            per_out = [[] for _ in outs_b]
        for lst, seq in zip(per_out, outs_b):
            lst.append(np.stack(seq))
    return [np.stack(v) for v in per_state] + [np.stack(v) for v in per_out]


OPS: list[OpDef] = [
    OpDef("If", _infer_if, _k_if, since=1, attrs={"then_branch": REQUIRED, "else_branch": REQUIRED}, scoped=True),
    OpDef("Loop", _infer_loop, _k_loop, since=1, attrs={"body": REQUIRED}, scoped=True),
    OpDef("Scan", _infer_scan8, _k_scan8, since=8, attrs={"body": REQUIRED, "num_scan_inputs": REQUIRED}, scoped=True),
    OpDef(
        "Scan",
        _infer_scan,
        _k_scan,
        since=9,
        attrs={"body": REQUIRED, "num_scan_inputs": REQUIRED},
        scoped=True,
    ),
]


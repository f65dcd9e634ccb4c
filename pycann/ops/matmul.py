"""Matrix-product ops (ONNX spec, Operators.md: MatMul, Gemm, MatMulInteger, QLinearMatMul,
Einsum). The heavy lifting is ``np.matmul``/``np.einsum`` (BLAS for float32/float64).

The kernels here compute float products with numpy (the reference); ``pycann.kernels.gemm`` runs
the same kernels with the provider-dispatching product (``FloatMatMul`` / ``FloatGemm``): the
algorithm GE's KernelSelection pass recorded in the node attribute ``_algo``, or without one the
static table's choice for the concrete shapes.

float16/bfloat16 products are accumulated in float32 and cast back (as ONNX Runtime does);
integer products are computed exactly in a float type wide enough for the reduction length.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import Dim, DType, TensorDesc, bfloat16, is_bfloat16
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.operand_checks import check_vector
from pycann.ops.shape_utils import broadcast_shapes

# A 2-D B at least this big is read once for all rows of a batched A: numpy's matmul loops over
# A's leading dims (one GEMV per row at decode), reading B again each time once it is out of
# cache (GPT-2's LM head 768 x 50257 at batch 4: 41 ms looped vs 23 ms folded, one thread).
# Smaller weights stay cached between those GEMVs, where the loop is as fast or faster.
FOLD_BYTES = 16 << 20


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul`` (BLAS for float32/float64), into ``out`` when it fits. A C-contiguous A of
    rank > 2 against a 2-D B of ``FOLD_BYTES`` or more is folded into one (rows, K) product."""
    fits = out is not None and out.dtype == np.result_type(a, b)
    if a.ndim > 2 and b.ndim == 2 and b.nbytes >= FOLD_BYTES and a.flags.c_contiguous and a.shape[-1] == b.shape[0]:
        shape = a.shape[:-1] + (b.shape[1],)
        a2 = a.reshape(-1, a.shape[-1])
        if fits and out is not None and out.shape == shape and out.flags.c_contiguous:
            np.matmul(a2, b, out=out.reshape(-1, b.shape[1]))
            return out
        return np.matmul(a2, b).reshape(shape)
    if fits:
        return np.matmul(a, b, out=out)
    return np.matmul(a, b)


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, alpha: float, beta: float,
         out: np.ndarray | None = None) -> np.ndarray:
    """alpha * a @ b + beta * c for floats; BLAS writes into ``out`` when it has the dtype.

    beta == 0 drops C altogether (ONNX Runtime does not evaluate 0 * C).
    """
    acc = a.dtype
    y = np.matmul(a, b, out=out if out is not None and out.dtype == acc else None)
    if alpha != 1.0:
        y *= acc.type(alpha)
    if c is not None and beta != 0.0:
        cc = c.astype(acc, copy=False)
        y += cc if beta == 1.0 else cc * acc.type(beta)
    return y



def _acc_dtype(dtype: np.dtype) -> np.dtype:
    """float32 for narrow floats, the dtype itself otherwise."""
    if dtype.kind == "f" and dtype.itemsize < 4 or dtype.kind == "V" or str(dtype) == "bfloat16":
        return np.dtype(np.float32)
    return np.dtype(dtype)


def _merge_dim(a: Dim, b: Dim) -> Dim:
    """Two dims that must be equal: the known one wins."""
    if isinstance(a, int):
        return a
    return b if b is not None else a


# ---------------------------------------------------------------- MatMul


def _matmul_shape(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[tuple[Dim, ...], str | None]:
    """numpy.matmul output shape (1-D operands promoted then squeezed) or an error message."""
    if not a or not b:
        return (), "MatMul operands must have rank >= 1"
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    ka, kb = a2[-1], b2[-2]
    if isinstance(ka, int) and isinstance(kb, int) and ka != kb:
        return (), f"inner dims differ: A {list(a)} has K={ka}, B {list(b)} has K={kb}"
    try:
        batch = broadcast_shapes(a2[:-2], b2[:-2]) or ()
    except ValueError as e:
        return (), f"batch dims of A {list(a)} and B {list(b)} do not broadcast: {e}"
    out = tuple(batch) + ((a2[-2],) if len(a) > 1 else ()) + ((b2[-1],) if len(b) > 1 else ())
    return out, None


def _float_matmul(a: np.ndarray, b: np.ndarray, acc: np.dtype, attrs: Mapping[str, Any],
                  out: np.ndarray | None) -> np.ndarray:
    """a @ b in the float dtype ``acc`` by numpy (the reference; ``FloatMatMul``)."""
    return matmul(a.astype(acc, copy=False), b.astype(acc, copy=False), out)


# How a MatMul kernel computes a float product: ``(a, b, acc dtype, attrs, out) -> a @ b``. The op
# kernels here take it as a parameter (numpy by default); ``pycann.kernels.gemm`` passes the
# provider-dispatching one, so one copy of MatMul's semantics serves both.
FloatMatMul = Callable[[np.ndarray, np.ndarray, np.dtype, Mapping[str, Any], "np.ndarray | None"], np.ndarray]
# bf16 x bf16 -> float32 product by a bf16 GEMM, or None (then computed in float32)
Bf16MatMul = Callable[[np.ndarray, np.ndarray, Mapping[str, Any]], "np.ndarray | None"]


def _no_bf16(a: np.ndarray, b: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray | None:
    return None




def _k_matmul(inputs: Sequence[Any], attrs: Mapping[str, Any], mm: FloatMatMul = _float_matmul,
              bf16: Bf16MatMul = _no_bf16) -> list[np.ndarray]:
    """MatMul (spec: MatMul-13): numpy.matmul semantics, incl. 1-D operands and batch broadcast.
    ``mm`` computes float products, ``bf16`` bf16 ones (see ``FloatMatMul``). Non-finite inputs
    and float16 overflow give IEEE inf / NaN silently, as torch and ONNX Runtime (numpy's
    RuntimeWarnings were an exception under ``-W error``)."""
    with np.errstate(all="ignore"):
        return _matmul_kernel(inputs, attrs, mm, bf16)


def _matmul_kernel(inputs: Sequence[Any], attrs: Mapping[str, Any], mm: FloatMatMul,
                   bf16: Bf16MatMul) -> list[np.ndarray]:
    a, b = inputs[0], inputs[1]
    if a.dtype == b.dtype and is_bfloat16(a.dtype):
        # bf16 precision modes: oneDNN/MKL bf16 GEMM (fp32 accumulation), as the NPU's cube unit
        y16 = bf16(a, b, attrs)
        if y16 is not None:
            return [y16.astype(bfloat16())]
    acc = _acc_dtype(a.dtype)
    if acc.kind == "f" and a.dtype == b.dtype:
        return [np.asarray(mm(a, b, acc, attrs, None).astype(a.dtype, copy=False))]
    if acc != a.dtype:
        y = np.matmul(a.astype(acc), b.astype(acc)).astype(a.dtype)
    else:
        y = np.matmul(a, b)
    return [np.asarray(y)]


def _out_matmul(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray],
                mm: FloatMatMul = _float_matmul, bf16: Bf16MatMul = _no_bf16) -> None:
    """MatMul into a preallocated output (BLAS writes straight into the arena); quiet as ``_k_matmul``."""
    a, b = inputs[0], inputs[1]
    with np.errstate(all="ignore"):
        if a.dtype == b.dtype == outs[0].dtype and a.dtype.kind == "f" and a.dtype.itemsize >= 4:
            y = mm(a, b, a.dtype, attrs, outs[0])
            if y is not outs[0]:
                outs[0][...] = y
        else:
            outs[0][...] = _matmul_kernel(inputs, attrs, mm, bf16)[0]


def _infer_matmul(ctx: InferContext) -> list[TensorDesc]:
    """numpy.matmul shape rules over symbolic dims (spec: MatMul)."""
    a, b = ctx.input(0), ctx.input(1)
    dtype = a.dtype if a is not None else b.dtype if b is not None else 0
    if a is None or b is None or a.shape is None or b.shape is None:
        return [TensorDesc(dtype, None)]
    shape, err = _matmul_shape(a.shape, b.shape)
    if err:
        raise ctx.fail(err)
    return [TensorDesc(dtype, shape)]


# ---------------------------------------------------------------- Gemm


def _float_gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, alpha: float, beta: float,
                attrs: Mapping[str, Any], out: np.ndarray | None) -> np.ndarray:
    """Gemm's float product by numpy (the reference; ``FloatGemm``)."""
    return gemm(a, b, c, alpha, beta, out)


# How a Gemm kernel computes a float product: ``(a', b', c or None, alpha, beta, attrs, out)``
# (operands transposed and in the accumulation dtype); see ``FloatMatMul``.
FloatGemm = Callable[[np.ndarray, np.ndarray, "np.ndarray | None", float, float, Mapping[str, Any],
                      "np.ndarray | None"], np.ndarray]


def _gemm(inputs: Sequence[Any], attrs: Mapping[str, Any], out: np.ndarray | None = None,
          fg: FloatGemm = _float_gemm) -> np.ndarray:
    """Gemm (spec: Gemm-13): Y = alpha * A' B' + beta * C, C broadcast unidirectionally.

    Floats accumulate in ``out`` when it has the accumulation dtype (BLAS writes into it).
    """
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    if attrs.get("transA", 0):
        a = a.T
    if attrs.get("transB", 0):
        b = b.T
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    acc = _acc_dtype(a.dtype)
    a, b = a.astype(acc, copy=False), b.astype(acc, copy=False)
    if acc.kind != "f":
        y = np.matmul(a, b)
        if alpha != 1.0:
            y = (y * alpha).astype(acc)
        if c is not None and beta != 0.0:
            y = y + (c if beta == 1.0 else (c * beta).astype(acc))
        return y
    cc = c if c is not None and beta != 0.0 else None
    return fg(a, b, cc.astype(acc, copy=False) if cc is not None else None, alpha, beta, attrs, out)


def _k_gemm(inputs: Sequence[Any], attrs: Mapping[str, Any], fg: FloatGemm = _float_gemm) -> list[np.ndarray]:
    """Gemm kernel (see ``_gemm``); narrow floats and ints are cast back to A's dtype; quiet as
    ``_k_matmul``."""
    with np.errstate(all="ignore"):
        return [np.asarray(_gemm(inputs, attrs, None, fg), dtype=inputs[0].dtype)]


def _out_gemm(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray],
              fg: FloatGemm = _float_gemm) -> None:
    """Gemm into a preallocated output; quiet as ``_k_matmul``."""
    with np.errstate(all="ignore"):
        y = _gemm(inputs, attrs, outs[0], fg)
        if y is not outs[0]:
            outs[0][...] = y


def _infer_gemm(ctx: InferContext) -> list[TensorDesc]:
    """(M, N) from A (M, K) / B (K, N) after transA/transB; C must broadcast to (M, N)."""
    a, b, c = ctx.input(0), ctx.input(1), ctx.input(2)
    dtype = a.dtype if a is not None else b.dtype if b is not None else 0
    m: Dim = None
    n: Dim = None
    k_a: Dim = None
    k_b: Dim = None
    for name, d in (("A", a), ("B", b)):
        if d is not None and d.shape is not None and len(d.shape) != 2:
            raise ctx.fail(f"input {name} {d} must be 2-D")
    if a is not None and a.shape is not None:
        m, k_a = (a.shape[1], a.shape[0]) if ctx.attrs.get("transA", 0) else a.shape
    if b is not None and b.shape is not None:
        k_b, n = (b.shape[1], b.shape[0]) if ctx.attrs.get("transB", 0) else b.shape
    if isinstance(k_a, int) and isinstance(k_b, int) and k_a != k_b:
        raise ctx.fail(f"inner dims differ: A' has K={k_a}, B' has K={k_b} (check transA/transB)")
    if c is not None and c.shape is not None:
        if len(c.shape) > 2:
            raise ctx.fail(f"input C {c} must have rank <= 2 to broadcast to (M, N)")
        for cd, od in zip(reversed(c.shape), (n, m)):
            if isinstance(cd, int) and cd != 1 and isinstance(od, int) and cd != od:
                raise ctx.fail(f"input C {c} does not broadcast unidirectionally to ({m}, {n})")
    return [TensorDesc(dtype, (m, n))]


# ---------------------------------------------------------------- integer / quantized


def _exact_dtype(k: int) -> np.dtype:
    """A float dtype whose BLAS products are exact for a K-long sum of |v| <= 255 * 255 terms."""
    return np.dtype(np.float32) if k * 255 * 255 < (1 << 24) else np.dtype(np.float64)


def _zp(zp: np.ndarray | None, x: np.ndarray, per_row: bool) -> np.ndarray | int:
    """Zero point shaped to broadcast: per-row for A (M -> (M, 1)), per-column for B."""
    if zp is None:
        return 0
    zp = np.asarray(zp)
    if per_row and zp.ndim == 1 and zp.size > 1:
        return zp.reshape(-1, 1)
    return zp


def _int_matmul(a: np.ndarray, azp: Any, b: np.ndarray, bzp: Any) -> np.ndarray:
    """Exact (A - a_zp) @ (B - b_zp) for 8-bit operands, as a float array holding integers."""
    k = a.shape[-1] if a.ndim else 1
    dt = _exact_dtype(k)
    return np.matmul(a.astype(dt) - np.asarray(azp, dtype=dt), b.astype(dt) - np.asarray(bzp, dtype=dt))


def _k_matmul_integer(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """MatMulInteger (spec: MatMulInteger-10): int32 (A - a_zero_point) @ (B - b_zero_point)."""
    a, b = inputs[0], inputs[1]
    azp = _zp(inputs[2] if len(inputs) > 2 else None, a, per_row=True)
    bzp = _zp(inputs[3] if len(inputs) > 3 else None, b, per_row=False)
    return [np.asarray(_int_matmul(a, azp, b, bzp)).astype(np.int32)]


def _infer_matmul_integer(ctx: InferContext) -> list[TensorDesc]:
    """MatMul shape rules, int32 output; for 2-D A (M, K) and B (K, N), a_zero_point is a scalar or
    M long (per row, spec), b_zero_point a scalar or N long (per column)."""
    d = _infer_matmul(ctx)[0]
    a, b = ctx.input(0), ctx.input(1)
    for i, name, src, axis in ((2, "a_zero_point", a, 0), (3, "b_zero_point", b, 1)):
        z = ctx.input(i)
        if src is not None and src.shape is not None and len(src.shape) == 2 and z is not None \
                and z.shape is not None and len(z.shape) == 1:
            check_vector(ctx, i, name, src.shape[axis], "one per row of A" if axis == 0 else "one per column of B",
                         allow_scalar=True)
    return [TensorDesc(int(DType.INT32), d.shape)]


def _k_qlinear_matmul(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """QLinearMatMul (spec: QLinearMatMul-10/21): y = saturate(round(acc * a_s * b_s / y_s) + y_zp)
    with acc = (a - a_zp) @ (b - b_zp); rounding half to even, in float32 like ONNX Runtime."""
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = inputs[:8]
    acc = _int_matmul(a, _zp(a_zp, a, True), b, _zp(b_zp, b, False)).astype(np.float32)
    a_s = np.asarray(a_s, np.float32)
    a_s = a_s.reshape(-1, 1) if a_s.ndim == 1 and a_s.size > 1 else a_s
    scale = (a_s * np.asarray(b_s, np.float32)) / np.asarray(y_s, np.float32)
    out_dt = np.asarray(y_zp).dtype if y_zp is not None else np.dtype(np.uint8)
    info = np.iinfo(out_dt)
    zp = np.asarray(y_zp if y_zp is not None else 0).astype(np.float32)
    v = np.rint(acc * scale) + zp
    return [np.clip(v, info.min, info.max).astype(out_dt)]


def _infer_qlinear_matmul(ctx: InferContext) -> list[TensorDesc]:
    """MatMul shape of a/b, dtype of y_zero_point."""
    a, b, yzp = ctx.input(0), ctx.input(3), ctx.input(7)
    dtype = yzp.dtype if yzp is not None else (a.dtype if a is not None else int(DType.UINT8))
    if a is None or b is None or a.shape is None or b.shape is None:
        return [TensorDesc(dtype, None)]
    shape, err = _matmul_shape(a.shape, b.shape)
    if err:
        raise ctx.fail(err)
    return [TensorDesc(dtype, shape)]


# ---------------------------------------------------------------- Einsum


def _einsum_shape(eq: str, shapes: Sequence[tuple[Dim, ...]]) -> tuple[tuple[Dim, ...], str | None]:
    """Output shape of an einsum equation over symbolic dims (spec: Einsum), or an error."""
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        return (), f"equation {eq!r} has {len(terms)} operands but {len(shapes)} inputs were given"
    dims: dict[str, Dim] = {}
    counts: dict[str, int] = {}
    ells: list[tuple[Dim, ...]] = []
    for term, shape in zip(terms, shapes):
        before, has_ell, after = term.partition("...")
        letters = before + after
        n_ell = len(shape) - len(letters)
        if n_ell < 0 or (n_ell and not has_ell):
            return (), f"term {term!r} does not match input rank {len(shape)}"
        picked = list(shape[: len(before)]) + list(shape[len(shape) - len(after) :])
        ells.append(tuple(shape[len(before) : len(before) + n_ell]))
        for ch, d in zip(letters, picked):
            if not ch.isalpha():
                return (), f"equation {eq!r} has invalid label {ch!r}"
            counts[ch] = counts.get(ch, 0) + 1
            old = dims.get(ch)
            if isinstance(old, int) and isinstance(d, int) and old != d and 1 not in (old, d):
                return (), f"label {ch!r} is {old} in one operand and {d} in another"
            dims[ch] = d if ch not in dims or old == 1 else _merge_dim(old, d)
    try:
        ell_out = broadcast_shapes(*ells) or ()
    except ValueError as e:
        return (), f"ellipsis dims do not broadcast: {e}"
    if "->" not in eq:
        out_terms = ("...", "".join(sorted(ch for ch, n in counts.items() if n == 1)))
        out: list[Dim] = list(ell_out) + [dims[ch] for ch in out_terms[1]]
        return tuple(out), None
    before, has_ell, after = rhs.partition("...")
    for ch in before + after:
        if ch not in dims:
            return (), f"output label {ch!r} of {eq!r} appears in no input"
    return tuple([dims[c] for c in before] + (list(ell_out) if has_ell else []) + [dims[c] for c in after]), None


def _k_einsum(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """Einsum (spec: Einsum-12): numpy.einsum with path optimisation (BLAS contractions)."""
    eq = str(attrs["equation"] if not isinstance(attrs["equation"], bytes) else attrs["equation"].decode())
    eq = eq.replace(" ", "")
    dt = inputs[0].dtype
    acc = _acc_dtype(dt)
    ops = [x.astype(acc, copy=False) for x in inputs]
    y = np.einsum(eq, *ops, optimize=len(ops) > 1)
    return [np.asarray(y, dtype=dt)]


def _infer_einsum(ctx: InferContext) -> list[TensorDesc]:
    """Shape from the equation's labels (implicit output: sorted single-use labels)."""
    eq = ctx.attrs["equation"]
    eq = (eq.decode() if isinstance(eq, bytes) else str(eq)).replace(" ", "")
    descs = [d for d in ctx.inputs if d is not None]
    dtype = descs[0].dtype if descs else 0
    if any(d.shape is None for d in descs):
        return [TensorDesc(dtype, None)]
    shape, err = _einsum_shape(eq, [d.shape for d in descs])  # type: ignore[misc]
    if err:
        raise ctx.fail(err)
    return [TensorDesc(dtype, shape)]


OPS: list[OpDef] = [
    OpDef("MatMul", _infer_matmul, _k_matmul, since=1, out_kernel=_out_matmul),
    OpDef("Gemm", _infer_gemm, _k_gemm, since=1, attrs={"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0},
          out_kernel=_out_gemm),
    OpDef("MatMulInteger", _infer_matmul_integer, _k_matmul_integer, since=10),
    OpDef("QLinearMatMul", _infer_qlinear_matmul, _k_qlinear_matmul, since=10),
    OpDef("Einsum", _infer_einsum, _k_einsum, since=12, attrs={"equation": ""}),
]

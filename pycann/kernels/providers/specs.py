"""What a kernel choice is about: one Conv/ConvTranspose/MatMul/Gemm call (``ConvSpec``, ``GemmSpec``,
built from shapes and ONNX attributes by ``conv_spec``/``make_spec``) and one algorithm's code
(``Implementation``).

Separate from the selection code in ``pycann.kernels.providers`` because every provider module
(numpy_blas, onednn, torch_onednn, ...) declares its ``ALGORITHMS`` with these types: they import this
small module rather than the package that imports them back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pycann.kernels.algorithm import Algorithm
from pycann.ops.nn.spatial import Window, compute_dtype, plan_window

CONV_OPS = ("Conv", "ConvTranspose")
GEMM_OPS = ("MatMul", "Gemm")


@dataclass(frozen=True)
class ConvSpec:
    """One Conv/ConvTranspose call, as far as choosing a kernel goes (all ints, hashable).

    For ConvTranspose, ``win.pads_begin`` are the output offsets of ``conv_transpose_geometry``
    and ``out_sizes`` the output spatial sizes; for Conv ``out_sizes == win.out``.
    """

    op_type: str
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    group: int
    win: Window
    out_sizes: tuple[int, ...]
    dtype: str = "float32"  # the compute dtype (``compute_name``): float16 inputs run in float32

    @property
    def n_spatial(self) -> int:
        return len(self.x_shape) - 2

    @property
    def depthwise(self) -> bool:
        """group == C_in == C_out > 1 (one filter per channel)."""
        return self.op_type == "Conv" and self.group > 1 and self.group == self.x_shape[1] == self.w_shape[0]

    @property
    def pointwise(self) -> bool:
        """1x1 kernel without padding (a GEMM on the (C, H*W) view)."""
        return self.op_type == "Conv" and all(k == 1 for k in self.win.kernel) and not self.win.padded

    @property
    def patches(self) -> bool:
        """A 2-D ConvTranspose whose kernel equals its stride (one group, no dilation, no output offset,
        output = input x stride): every input pixel writes its own output patch, one GEMM with no
        per-size primitive (``onednn_pointwise.PatchDeconv``)."""
        return self.op_type == "ConvTranspose" and patch_geometry(self.w_shape, self.group, self.win, self.x_shape,
                                                                  self.out_sizes)

    @property
    def flops(self) -> int:
        """2 * multiply-adds."""
        if self.op_type == "Conv":
            return 2 * self.x_shape[0] * self.w_shape[0] * int(math.prod(self.out_sizes)) * int(math.prod(self.w_shape[1:]))
        return 2 * int(math.prod(self.x_shape)) * int(math.prod(self.w_shape[1:]))


def patch_geometry(w_shape: Sequence[int], group: int, win: Window, x_shape: Sequence[int],
                   out_sizes: Sequence[int]) -> bool:
    """``ConvSpec.patches`` from the parts (``win`` from ``conv_transpose_geometry``; ConvTranspose-11/22)."""
    k = tuple(int(d) for d in w_shape[2:])
    return group == 1 and len(k) == 2 and len(x_shape) == 4 and tuple(win.kernel) == k \
        and tuple(win.strides) == k and all(d == 1 for d in win.dilations) and not any(win.pads_begin) \
        and tuple(out_sizes) == (x_shape[2] * k[0], x_shape[3] * k[1])


@dataclass(frozen=True)
class GemmSpec:
    """One MatMul/Gemm call: operand shapes as given (before ``transA``/``transB``)."""

    op_type: str
    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    dtype: str = "float32"
    trans_a: bool = False
    trans_b: bool = False

    @property
    def mkn(self) -> tuple[int, int, int, int]:
        """(batch, M, K, N) of the product."""
        a = self.a_shape[::-1] if self.trans_a else self.a_shape
        b = self.b_shape[::-1] if self.trans_b else self.b_shape
        m = a[-2] if len(a) > 1 else 1
        k = a[-1]
        n = b[-1] if len(b) > 1 else 1
        batch = max(math.prod(a[:-2]), math.prod(b[:-2])) if len(a) > 2 or len(b) > 2 else 1  # not np.prod: ~5 us a call
        return batch, m, k, n

    @property
    def flops(self) -> int:
        batch, m, k, n = self.mkn
        return 2 * batch * m * k * n


OpSpec = ConvSpec | GemmSpec


@dataclass(frozen=True)
class Implementation:
    """The code of one ``Algorithm`` in its provider module.

    ``fn`` signatures (arrays already in the compute dtype; ``out`` optional, used when its
    dtype and layout fit; the result may be a view of ``out``):

    * Conv: ``fn(x, w, b, group, win, out) -> y`` with the bias added.
    * ConvTranspose: ``fn(x, w, b, group, win, out_sizes, out) -> y`` with the bias added.
    * MatMul: ``fn(a, b, out) -> y`` (numpy.matmul semantics).
    * Gemm: ``fn(a, b, c, alpha, beta, out) -> y`` (``a``, ``b`` already transposed, ``c``
      broadcast to (M, N) or None).
    """

    algo: Algorithm
    supports: Callable[[Any], bool]
    fn: Callable[..., np.ndarray]
    doc: str = ""

    @property
    def provider(self) -> str:
        return self.algo.provider

    @property
    def op_type(self) -> str:
        return self.algo.op_type

    @property
    def key(self) -> str:
        """``"<provider>:<name>"`` (reports, logs, the bank)."""
        return self.algo.key

    @property
    def exact(self) -> bool:
        return self.algo.exact

    @property
    def writes_out(self) -> bool:
        return self.algo.writes_out


def compute_name(dtype: Any) -> str:
    """Name of the dtype a kernel computes in: narrow floats widen to float32, others stay."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return str(dtype)
    if dt.kind == "f" or dt.name == "bfloat16":
        return compute_dtype(dt).name
    return dt.name


def conv_spec(op_type: str, x_shape: Sequence[int], w_shape: Sequence[int], attrs: Mapping[str, Any],
              dtype: str = "float32") -> ConvSpec:
    """The spec of a Conv/ConvTranspose with static shapes and ONNX attributes."""
    xs, ws = tuple(int(d) for d in x_shape), tuple(int(d) for d in w_shape)
    ks = attrs.get("kernel_shape") or []
    kernel = tuple(int(k) for k in ks) if ks else ws[2:]
    group = int(attrs.get("group", 1) or 1)
    if op_type == "ConvTranspose":
        from pycann.ops.nn.conv import conv_transpose_geometry  # conv imports this package

        win, outs = conv_transpose_geometry(xs[2:], kernel, attrs)
        return ConvSpec(op_type, xs, ws, group, win, tuple(outs), compute_name(dtype))
    win = plan_window(xs[2:], kernel, attrs)
    return ConvSpec(op_type, xs, ws, group, win, win.out, compute_name(dtype))


def make_spec(op_type: str, shapes: Sequence[Sequence[int]], attrs: Mapping[str, Any],
              dtype: str = "float32") -> OpSpec:
    """The spec of a Conv/ConvTranspose/MatMul/Gemm from its first two input shapes."""
    if op_type in CONV_OPS:
        return conv_spec(op_type, shapes[0], shapes[1], attrs, dtype)
    if op_type in GEMM_OPS:
        return GemmSpec(op_type, tuple(int(d) for d in shapes[0]), tuple(int(d) for d in shapes[1]), compute_name(dtype),
                        bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0)))
    raise ValueError(f"no kernel providers for op {op_type}")


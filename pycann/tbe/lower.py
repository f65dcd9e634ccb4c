"""Lowering a TBE DSL graph onto pycann.ascendc: one generated Ascend C kernel per ``build``.

Row schedule: the data is viewed as R rows of W elements (W = the last axis; for pure
elementwise graphs, flattened tiles of up to 4096 elements). Rows are split over the cores; each
row is copied into UB (DataCopy, or DataCopyPad with zero padding when W is not 32-byte aligned),
every node of the graph becomes one vector instruction on a per-node UB slot, last-axis
reductions go through ReduceSum/Max/Min and a V_S-synchronised scalar read, and the output is
copied back. Findings point at the DSL line that made the node (``CoreState.where_override``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pycann import ascendc as A
from pycann.ascendc import core as _core
from pycann.ascendc.diagnostics import KernelCheckError
from pycann.ascendc.dtypes import ElemType
from pycann.tbe.expr import TbeError, Tensor, topo

ELEM = {"float16": A.half, "float32": A.float32, "int32": A.int32_t, "int8": A.int8_t, "uint8": A.uint8_t,
        "bfloat16": A.bfloat16_t}
NP = {k: v.np_dtype for k, v in ELEM.items()}
BINARY = {"vadd": A.Add, "vsub": A.Sub, "vmul": A.Mul, "vdiv": A.Div, "vmax": A.Max, "vmin": A.Min}
UNARY = {"vexp": A.Exp, "vlog": A.Ln, "vabs": A.Abs, "vsqrt": A.Sqrt, "vrsqrt": A.Rsqrt, "vrec": A.Reciprocal,
         "vrelu": A.Relu}
SCALAR = {"vadds": A.Adds, "vmuls": A.Muls, "vmaxs": A.Maxs, "vmins": A.Mins, "vlrelu": A.LeakyRelu}
REDUCE = {"reduce_sum": A.ReduceSum, "reduce_max": A.ReduceMax, "reduce_min": A.ReduceMin}
_PY: dict[str, Callable[..., float]] = {
    "vadd": lambda a, b: a + b, "vsub": lambda a, b: a - b, "vmul": lambda a, b: a * b, "vdiv": lambda a, b: a / b,
    "vmax": max, "vmin": min, "vexp": np.exp, "vlog": np.log, "vabs": abs, "vsqrt": np.sqrt,
    "vrsqrt": lambda a: 1 / np.sqrt(a), "vrec": lambda a: 1 / a, "vrelu": lambda a: max(a, 0),
    "vadds": lambda a, s: a + s, "vmuls": lambda a, s: a * s, "vmaxs": max, "vmins": min,
    "vlrelu": lambda a, s: a if a >= 0 else a * s,
}
FLAT_TILE = 4096


def _round32(n: int, t: ElemType) -> int:
    per = 32 // t.size
    return -(-n // per) * per


class BuiltKernel:
    """A built DSL kernel: ``kernel(*numpy_inputs, soc_version=..., block_dim=None) -> numpy output``."""

    def __init__(self, name: str, inputs: list[Tensor], out: Tensor, pattern: str) -> None:
        self.name, self.inputs, self.out, self.pattern = name, inputs, out, pattern
        self.nodes = topo(out)
        for t in self.nodes:
            if t.op == "placeholder" and not any(t is i for i in inputs):
                raise TbeError(f"build {name}: placeholder {t.name} is used but missing from tensor_list")
        full = max(self.nodes, key=lambda t: t.size)  # the row space: the biggest tensor of the graph
        self.full = full.shape
        total = full.size
        if pattern == "elewise":
            self.W = min(total, FLAT_TILE)
        else:
            self.W = self.full[-1]
        self.R = -(-total // self.W)
        self.total = total
        self.kind: dict[int, str] = {}
        for t in self.nodes:
            self.kind[id(t)] = self._classify(t)
        self.last_result: A.TwinResult | None = None
        self.kernel = A.kernel(self._kernel)
        self.kernel.name = name

    # ------------------------------------------------------------------ analysis
    def _classify(self, t: Tensor) -> str:
        k = [self.kind[id(i)] for i in t.inputs]
        if t.op == "placeholder":
            if t.size == self.total:
                return "row"
            if t.size == self.W and t.shape[-1] == self.W and self.pattern == "norm":
                return "shared"
            if t.size == 1:
                return "scalar"
            raise TbeError(f"{t.where}: placeholder {t.name} {list(t.shape)} is neither the full shape "
                           f"{list(self.full)}, one shared row of {self.W}, nor a single value")
        if t.op.startswith("reduce"):
            if k[0] != "row":
                raise TbeError(f"{t.where}: {t.op} needs a full-shape input")
            return "rowscalar"
        if t.op == "broadcast_scalar":
            return "row"
        if t.op == "broadcast":
            return "row" if k[0] in ("rowscalar", "scalar", "row") else "shared_row"
        if all(x in ("rowscalar", "scalar") for x in k):
            return "rowscalar"
        if any(x in ("rowscalar", "scalar") for x in k):
            raise TbeError(f"{t.where}: {t.op} mixes a per-row scalar with a row; broadcast it first")
        return "row"

    def _is_row(self, t: Tensor) -> bool:
        return self.kind[id(t)] in ("row", "shared", "shared_row")

    # ------------------------------------------------------------------ the generated kernel
    def _kernel(self, *gms: A.GmAddr) -> None:
        c = _core.current()
        nb, cores = self.R, A.GetBlockNum()
        per = -(-nb // cores)
        r0, r1 = A.GetBlockIdx() * per, min(nb, (A.GetBlockIdx() + 1) * per)
        out_gm = gms[-1]
        pipe = A.TPipe()
        c.where_override = self.out.where
        slots: dict[int, A.LocalTensor] = {}
        queues: dict[int, A.TQue] = {}
        calc = A.TBuf(A.TPosition.VECCALC)
        layout: list[tuple[Tensor, int]] = []
        offset = 0
        for t in self.nodes:
            k = self.kind[id(t)]
            if (k in ("row", "shared_row") and t.op != "placeholder") or k == "shared":
                layout.append((t, offset))
                offset += _round32(self.W, ELEM[t.dtype]) * ELEM[t.dtype].size
        work = offset
        offset += _round32(self.W, A.float32) * 4 + 64
        qout = A.TQue(A.TPosition.VECOUT, 1)
        for t in self.inputs:
            if self.kind[id(t)] == "row":
                c.where_override = t.where
                q = A.TQue(A.TPosition.VECIN, 1)
                pipe.InitBuffer(q, 2, _round32(self.W, ELEM[t.dtype]) * ELEM[t.dtype].size)
                queues[id(t)] = q
        c.where_override = self.out.where
        od = ELEM[self.out.dtype]
        out_row = self._is_row(self.out)
        pipe.InitBuffer(qout, 1, (_round32(self.W, od) if out_row else _round32(max(per, 1), od)) * od.size)
        pipe.InitBuffer(calc, offset)
        base = calc.Get(A.uint8_t)
        for t, off in layout:
            slots[id(t)] = base[off].ReinterpretCast(ELEM[t.dtype])
        wk = base[work].ReinterpretCast(A.float32)
        red = base[offset - 64].ReinterpretCast(A.float32)
        scalars: dict[int, float] = {}
        for t in self.inputs:           # shared rows and single values: loaded once per core
            k = self.kind[id(t)]
            if k in ("shared", "scalar"):
                c.where_override = t.where
                g = A.GlobalTensor(ELEM[t.dtype])
                g.SetGlobalBuffer(gms[self._index(t)].As(ELEM[t.dtype]), t.size)
                if k == "shared":
                    self._copy_in(slots[id(t)], g, self.W, t)
                else:
                    scalars[id(t)] = float(g.GetValue(0))
        A.SetFlag(A.HardEvent.MTE2_V, 0)
        A.WaitFlag(A.HardEvent.MTE2_V, 0)
        res_t = qout.AllocTensor(od) if not out_row else None
        for r in range(r0, r1):
            w = min(self.W, self.total - r * self.W)
            row_vals = dict(scalars)
            live: list[tuple[A.TQue, A.LocalTensor]] = []
            for t in self.inputs:
                if self.kind[id(t)] == "row":
                    c.where_override = t.where
                    q = queues[id(t)]
                    x = q.AllocTensor(ELEM[t.dtype])
                    g = A.GlobalTensor(ELEM[t.dtype])
                    g.SetGlobalBuffer(gms[self._index(t)].As(ELEM[t.dtype]), self.total)
                    self._copy_in(x, g[r * self.W], w, t)
                    q.EnQue(x)
                    x = q.DeQue(ELEM[t.dtype])
                    slots[id(t)] = x
                    live.append((q, x))
            dst_out = qout.AllocTensor(od) if out_row else None
            for t in self.nodes:
                if t.op == "placeholder":
                    continue
                c.where_override = t.where
                dst = dst_out if (t is self.out and dst_out is not None) else slots.get(id(t))
                self._emit(t, dst, slots, row_vals, w, wk, red)
                if t is self.out and dst_out is not None:
                    slots[id(t)] = dst_out
            for q, x in live:
                q.FreeTensor(x)
            c.where_override = self.out.where
            og = A.GlobalTensor(od)
            if out_row:
                assert dst_out is not None
                qout.EnQue(dst_out)
                o = qout.DeQue(od)
                og.SetGlobalBuffer(out_gm.As(od), self.total)
                self._copy_out(og[r * self.W], o, w)
                qout.FreeTensor(o)
            else:
                assert res_t is not None
                res_t.SetValue(r - r0, row_vals[id(self.out)])
        if res_t is not None:
            c.where_override = self.out.where
            A.SetFlag(A.HardEvent.S_MTE3, 0)
            A.WaitFlag(A.HardEvent.S_MTE3, 0)
            qout.EnQue(res_t)
            o = qout.DeQue(od)
            og = A.GlobalTensor(od)
            og.SetGlobalBuffer(out_gm.As(od), self.R)
            if r1 > r0:
                self._copy_out(og[r0], o, r1 - r0)
            qout.FreeTensor(o)
        c.where_override = None

    def _index(self, t: Tensor) -> int:
        return next(i for i, x in enumerate(self.inputs) if x is t)

    @staticmethod
    def _copy_in(dst: A.LocalTensor, src: A.GlobalTensor, n: int, t: Tensor) -> None:
        size = dst.dtype.size
        if (n * size) % 32 == 0 or not _core.current().soc.data_copy_pad:
            A.DataCopy(dst, src, n)
        else:
            pad = (_round32(n, dst.dtype) - n)
            A.DataCopyPad(dst, src, A.DataCopyExtParams(1, n * size, 0, 0, 0), A.DataCopyPadExtParams(True, 0, pad, 0))

    @staticmethod
    def _copy_out(dst: A.GlobalTensor, src: A.LocalTensor, n: int) -> None:
        size = src.dtype.size
        if (n * size) % 32 == 0 or not _core.current().soc.data_copy_pad:
            A.DataCopy(dst, src, n)
        else:
            A.DataCopyPad(dst, src, A.DataCopyExtParams(1, n * size, 0, 0, 0))

    def _emit(self, t: Tensor, dst: A.LocalTensor | None, slots: dict[int, A.LocalTensor],
              vals: dict[int, float], w: int, wk: A.LocalTensor, red: A.LocalTensor) -> None:
        kind = self.kind[id(t)]
        if kind == "rowscalar":
            if t.op in REDUCE:
                src = slots[id(t.inputs[0])]
                rd = red.ReinterpretCast(src.dtype)
                REDUCE[t.op](rd, src, wk.ReinterpretCast(src.dtype), w)
                A.SetFlag(A.HardEvent.V_S, 0)
                A.WaitFlag(A.HardEvent.V_S, 0)
                vals[id(t)] = float(rd.GetValue(0))
                A.SetFlag(A.HardEvent.S_V, 0)
                A.WaitFlag(A.HardEvent.S_V, 0)
                return
            args = [vals[id(i)] for i in t.inputs]
            if "scalar" in t.attrs:
                args.append(t.attrs["scalar"])
            with np.errstate(all="ignore"):
                v = _PY[t.op](*args) if t.op in _PY else float(np.asarray(args[0]).astype(NP[t.dtype]))
            vals[id(t)] = float(np.asarray(v, np.float64).astype(NP[t.dtype]))  # the scalar unit rounds to T
            return
        assert dst is not None, t
        n = _round32(w, dst.dtype)
        if t.op == "broadcast_scalar":
            A.Duplicate(dst, t.attrs["scalar"], n)
        elif t.op == "broadcast":
            src_t = t.inputs[0]
            if self.kind[id(src_t)] in ("rowscalar", "scalar"):
                A.Duplicate(dst, vals[id(src_t)], n)
            else:
                A.Muls(dst, slots[id(src_t)], 1, n)  # a copy that keeps -0.0 and NaN bits
        elif t.op in BINARY:
            BINARY[t.op](dst, slots[id(t.inputs[0])], slots[id(t.inputs[1])], n)
        elif t.op in UNARY:
            UNARY[t.op](dst, slots[id(t.inputs[0])], n)
        elif t.op in SCALAR:
            SCALAR[t.op](dst, slots[id(t.inputs[0])], t.attrs["scalar"], n)
        elif t.op == "cast_to":
            src = slots[id(t.inputs[0])]
            mode = A.RoundMode.CAST_TRUNC if (src.dtype.is_float and not dst.dtype.is_float) else A.RoundMode.CAST_RINT
            # every slot holds _round32(w, its dtype) valid elements: convert what both sides hold
            # (a narrower destination's extra tail elements, which the next instructions read, zeroed)
            k = min(n, _round32(w, src.dtype))
            if k < n:
                A.Duplicate(dst, 0, n)
            A.Cast(dst, src, mode, k)
        else:
            raise TbeError(f"{t.where}: no lowering for {t.op}")

    # ------------------------------------------------------------------ running
    def __call__(self, *arrays: np.ndarray, soc_version: str = "Ascend910B1", block_dim: int | None = None,
                 trace: Any = None) -> np.ndarray:
        """Run on the twin; raises ``KernelCheckError`` on findings, ``TbeError`` on bad inputs."""
        if len(arrays) != len(self.inputs):
            raise TbeError(f"{self.name}: {len(arrays)} inputs given, the kernel takes {len(self.inputs)}")
        bufs = []
        for a, t in zip(arrays, self.inputs):
            a = np.asarray(a)
            if tuple(a.shape) != t.shape or a.dtype != NP[t.dtype]:
                raise TbeError(f"{self.name}: input {t.name} is {a.dtype}{list(a.shape)}, expected {t.dtype}{list(t.shape)}")
            g = A.GmAlloc(a.nbytes)
            g.numpy(np.uint8)[:] = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
            bufs.append(g)
        od = NP[self.out.dtype]
        out = A.GmAlloc(max(self.out.size * od.itemsize, 32))
        bd = block_dim or min(8, self.R)
        res = A.run_kernel(self.kernel, bd, (*bufs, out), soc_version=soc_version, mode=A.KernelMode.AIV_MODE,
                           trace=trace)
        self.last_result = res
        if res.errors:
            raise KernelCheckError(res.errors)
        return out.numpy(od)[: self.out.size].reshape(self.out.shape).copy()

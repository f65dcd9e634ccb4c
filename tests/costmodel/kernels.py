"""Small Ascend C kernels for the cost-model tests (run on the twin)."""

from __future__ import annotations

import numpy as np

from pycann import ascendc as A

P = A.TPosition


def copy_in_kernel(n_elems: int):
    """One DataCopy GM->UB of n_elems fp16, then one back (UB->GM)."""
    h = A.half

    def kern(x, z):
        pipe = A.TPipe()
        q = A.TQue(P.VECIN, 1)
        gx, gz = A.GlobalTensor(h), A.GlobalTensor(h)
        gx.SetGlobalBuffer(x.As(h), n_elems)
        gz.SetGlobalBuffer(z.As(h), n_elems)
        pipe.InitBuffer(q, 1, n_elems * 2)
        t = q.AllocTensor(h)
        A.DataCopy(t, gx, n_elems)
        q.EnQue(t)
        t = q.DeQue(h)
        A.DataCopy(gz, t, n_elems)
        q.FreeTensor(t)
    return kern


def add_kernel(total: int, tile: int, bufnum: int, n_cores: int = 1, rounds: int = 0):
    """add_custom: z = x + y (+ y ``rounds`` more times; fp16), tiles of ``tile`` elements, ``bufnum`` buffers."""
    h = A.half
    block = total // n_cores

    def kern(x, y, z):
        pipe = A.TPipe()
        qx, qy, qz = A.TQue(P.VECIN, 1), A.TQue(P.VECIN, 1), A.TQue(P.VECOUT, 1)
        gx, gy, gz = A.GlobalTensor(h), A.GlobalTensor(h), A.GlobalTensor(h)
        off = block * A.GetBlockIdx()
        gx.SetGlobalBuffer(x.As(h) + off, block)
        gy.SetGlobalBuffer(y.As(h) + off, block)
        gz.SetGlobalBuffer(z.As(h) + off, block)
        for q in (qx, qy, qz):
            pipe.InitBuffer(q, bufnum, tile * 2)
        for i in range(block // tile):
            a, b = qx.AllocTensor(h), qy.AllocTensor(h)
            A.DataCopy(a, gx[i * tile], tile)
            A.DataCopy(b, gy[i * tile], tile)
            qx.EnQue(a)
            qy.EnQue(b)
            a, b = qx.DeQue(h), qy.DeQue(h)
            c = qz.AllocTensor(h)
            A.Add(c, a, b, tile)
            for _ in range(rounds):
                A.Add(c, c, b, tile)
            qz.EnQue(c)
            qx.FreeTensor(a)
            qy.FreeTensor(b)
            c = qz.DeQue(h)
            A.DataCopy(gz[i * tile], c, tile)
            qz.FreeTensor(c)
    return kern


def gm(arr: np.ndarray) -> A.GmAddr:
    g = A.GmAlloc(arr.nbytes)
    g.numpy(arr.dtype)[:] = arr.reshape(-1)
    return g

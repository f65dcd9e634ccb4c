"""Replay a compiled model's convolutions (and MaxPool) back to back in oneDNN, with no Python between
them: the floor pycann's executor can reach with oneDNN's kernels (compare it with the plain-run time
of ``bench/profile_ops.py`` for the same model; the model's other ops are not replayed).

    python bench/replay_convs.py --model resnet50 [--batch 8] [--layout nhwc|blocked] [--jit-1x1]

``nhwc`` is pycann's layout (channels-last, descriptors by strides); ``blocked`` lets oneDNN pick
(``format_tag any``: nChw16c on AVX-512); ``--jit-1x1`` forces oneDNN's ``jit_1x1`` implementation for
the 1x1 convs. Grouped and depthwise convs, their activations and residuals are replayed as the plan
binds them; residual convs accumulate in place (the ``sum`` post-op). ConvTranspose is not replayed. Weights
are the model's, scaled by 0.5 so activations stay finite; the values computed are not checked (this
measures time only). Needs the ``onednn`` provider. Prints one line: layout, batch, median ms, count.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from model_zoo import MODELS  # noqa: E402

from pycann.ge.compile.compiler import compile_model  # noqa: E402
from pycann.ge.run.model import LoadedModel  # noqa: E402
from pycann.kernels.providers import onednn_capi as capi  # noqa: E402
from pycann.kernels.providers import onednn_capi_ops as capi_ops  # noqa: E402
from pycann.kernels.providers.onednn import onednn_unary  # noqa: E402
from pycann.ops import fused  # noqa: E402
from pycann.ops.nn.conv import conv_window  # noqa: E402


def _cl(s: tuple[int, ...]) -> tuple[int, ...]:
    n, c, h, w = s
    return (h * w * c, 1, w * c, c)


def build(model: str, batch: int, layout: str, jit_1x1: bool) -> list[capi.Primitive]:
    """The primitives of ``model``'s conv / MaxPool nodes in plan order, memories bound (kept alive)."""
    import onnx

    spec = MODELS[model]
    lm = LoadedModel.from_compiled(compile_model(onnx.load(str(spec.ensure()))))
    feeds = spec.inputs(0, batch)
    plan, _ = lm.executor.plan_for(lm.check_feeds([feeds[i.name] for i in lm.inputs]))
    g = plan.graph
    mds: dict[str, capi.MemoryDesc] = {}
    bufs: dict[str, np.ndarray] = {}
    prims: list[capi.Primitive] = []

    def fresh(shape: tuple[int, ...]) -> capi.MemoryDesc:
        return capi.MemoryDesc.strided(shape, _cl(shape)) if layout == "nhwc" else capi.MemoryDesc.any(shape)

    def src_of(name: str, shape: tuple[int, ...]) -> capi.MemoryDesc:
        if name not in mds:  # a graph input: channels-last (nhwc) or plain NCHW (blocked)
            md = capi.MemoryDesc.strided(shape, _cl(shape)) if layout == "nhwc" else capi.MemoryDesc.dense(shape)
            mds[name] = md
            bufs[name] = np.random.default_rng(0).random(md.size() // 4, dtype=np.float32)
        return mds[name]

    for n in g.nodes:
        if n.op_type not in ("Conv", "FusedConv", "MaxPool"):
            continue
        xs = tuple(int(d) for d in g.descs[n.inputs[0]].shape)  # type: ignore[union-attr]
        ys = tuple(int(d) for d in g.descs[n.outputs[0]].shape)  # type: ignore[union-attr]
        smd = src_of(n.inputs[0], xs)
        if n.op_type == "MaxPool":
            k = [int(v) for v in n.attrs["kernel_shape"]]
            st = [int(v) for v in n.attrs.get("strides") or [1, 1]]
            pads = [int(v) for v in n.attrs.get("pads") or [0] * 4]
            pd = capi_ops.pooling_pd(capi.POOLING["max"], smd, fresh(ys), st, k, [0, 0], pads[:2], pads[2:])
            args: list[tuple[int, capi.Memory]] = []
        else:
            w = g.initializers[n.inputs[1]]
            win = conv_window(xs, w.shape, n.attrs)
            res = len(n.inputs) > 3 and bool(n.inputs[3])
            dmd = mds[n.inputs[3]] if res else fresh(ys)
            ops: list[tuple[object, ...]] = [("sum", 1.0)] if res else []
            act, alpha, beta = fused._act(n.attrs)
            if act:
                u = onednn_unary(act, alpha, beta)
                if u is None:
                    raise SystemExit(f"{n.name}: activation {act} has no oneDNN post-op; cannot replay")
                ops.append(("eltwise", *u))
            aff = fused.post_affine(n.attrs)
            if aff is not None:
                ops.append(("eltwise", capi.ELTWISE["linear"], aff[0], aff[1]))
            group = int(n.attrs.get("group", 1))
            # ONNX (M, C/G, *k) -> oneDNN (G, M/G, C/G, *k) for grouped convs
            wdims = list(w.shape) if group == 1 else [group, w.shape[0] // group, *w.shape[1:]]
            bias = capi.MemoryDesc.strided((w.shape[0],), (1,))
            geo = (win.strides, [d - 1 for d in win.dilations], list(win.pads_begin), list(win.pads_end))
            conv_args = (smd, capi.MemoryDesc.any(wdims), bias, dmd, *geo, capi_ops.Attr(ops))
            pd = capi_ops.convolution_pd(*conv_args)
            if jit_1x1 and all(k == 1 for k in w.shape[2:]):
                while not pd.impl_info().startswith("jit_1x1"):
                    if not pd.next_impl():
                        pd = capi_ops.convolution_pd(*conv_args)
                        break
            wc = np.ascontiguousarray(w * 0.5, dtype=np.float32)
            bufs[n.name + ":w"] = wc
            wu = capi.MemoryDesc.strided(wdims, capi.dense_strides(wdims))
            wm = capi_ops.reorder(wu, capi.ptr(wc), pd.query_md(capi.QUERY_WEIGHTS_MD))
            b = g.initializers.get(n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] else None
            bufs[n.name + ":bias"] = np.zeros(w.shape[0], np.float32) if b is None else b
            args = [(capi.ARG_WEIGHTS, wm), (capi.ARG_BIAS, capi.Memory(bias, capi.ptr(bufs[n.name + ":bias"])))]
            if res:
                mds[n.outputs[0]] = dmd
                bufs[n.outputs[0]] = bufs[n.inputs[3]]
        dmd = pd.query_md(capi.QUERY_DST_MD)
        if n.outputs[0] not in bufs:
            mds[n.outputs[0]] = dmd
            bufs[n.outputs[0]] = np.zeros(dmd.size() // 4, np.float32)
        args += [(capi.ARG_SRC, capi.Memory(pd.query_md(129), capi.ptr(bufs[n.inputs[0]]))),
                 (capi.ARG_DST, capi.Memory(dmd, capi.ptr(bufs[n.outputs[0]])))]
        prims.append(capi.Primitive(pd, args))
    if not prims:
        raise SystemExit(f"{model}: no Conv / FusedConv / MaxPool node to replay")
    build.keep = bufs  # type: ignore[attr-defined]  # the buffers outlive this call
    return prims


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", choices=sorted(MODELS), help="a model_zoo model (default resnet50)")
    ap.add_argument("--batch", type=int, default=1, help="batch size of the benchmark inputs (default 1)")
    ap.add_argument("--layout", default="nhwc", choices=("nhwc", "blocked"),
                    help="nhwc: pycann's channels-last layout; blocked: oneDNN's choice (nChw16c)")
    ap.add_argument("--jit-1x1", action="store_true", help="force oneDNN's jit_1x1 implementation for 1x1 convs")
    ap.add_argument("--runs", type=int, default=30, help="timed replays; the median is printed (default 30)")
    a = ap.parse_args()
    prims = build(a.model, a.batch, a.layout, a.jit_1x1)
    for _ in range(3):
        for p in prims:
            p.execute()
    ts = []
    for _ in range(a.runs):
        t = time.perf_counter()
        for p in prims:
            p.execute()
        ts.append(time.perf_counter() - t)
    print(f"{a.model} batch {a.batch} {a.layout}{' jit_1x1' if a.jit_1x1 else ''}: "
          f"{np.median(ts) * 1e3:.2f} ms median over {a.runs} runs, {len(prims)} primitives")


if __name__ == "__main__":
    main()

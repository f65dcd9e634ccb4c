"""The shape-generic plan's per-shape conv bind (``kernels/bind_generic_conv_node.py``) against the
reference it shortcuts (``bind_generic_conv._bind``: the static binder's path): for each input shape
the same kernel (guard, layout, implementation) and the same values; and what a bound shape leaves
behind bounded: objects for the cyclic GC, no choice-cache entry, no descriptor oneDNN copied."""

from __future__ import annotations

import ctypes
import gc
from collections import Counter
from typing import Any

import numpy as np
import pytest

from pycann.dtypes import TensorDesc
from pycann.kernels import bind_generic_conv, providers
from pycann.kernels.providers import onednn, onednn_conv_plan
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops
from pycann.kernels.providers.onednn_conv_descs import ConvDescs
from pycann.ops.nn.conv import conv_window
from pycann.ops.nn.spatial import plan_window, window_of, window_params
from tests.kernels.test_bind_generic_conv import _generic, _model
from tests.kernels.test_onednn_provider import ATOL, RTOL, _data, _ort_conv

pytestmark = [pytest.mark.usefixtures("default_providers"),
              pytest.mark.skipif(not onednn.available(), reason="libdnnl.so.3 (onednn-cpu-gomp) not available")]

from pycann.kernels.providers import onednn_pointwise as pw  # noqa: E402

# (w shape, attributes, bias, residual): the activations the guard wraps (Relu, Clip) or passes
# through, pointwise (run-time-rows matmul) and not, depthwise, strided, dilated, SAME pads, a
# residual, a tiny conv (numpy's im2col)
CASES = [
    ((16, 8, 3, 3), {"pads": [1, 1, 1, 1], "activation": "Relu"}, True, False),
    ((16, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, True, False),
    ((8, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 8, "activation": "Clip", "act_alpha": 0.0, "act_beta": 6.0},
     True, False),
    ((12, 8, 1, 1), {"activation": "HardSwish"}, True, False),
    ((12, 8, 1, 1), {"activation": "Relu"}, False, False),
    ((8, 8, 3, 3), {"pads": [1, 1, 1, 1], "activation": "Relu"}, True, True),
    ((8, 8, 1, 1), {}, True, True),
    ((16, 8, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, False, False),
    ((16, 8, 3, 3), {"pads": [2, 1, 2, 1], "dilations": [2, 1]}, True, False),
    ((2, 8, 1, 1), {}, True, False),
]
SHAPES = [(1, 8, 1, 2), (1, 8, 9, 13), (2, 8, 16, 7), (1, 8, 24, 40)]


def _node(w: np.ndarray, b: np.ndarray | None, attrs: dict[str, Any], residual: bool) -> tuple[Any, Any, list[Any]]:
    ins = [TensorDesc(1, (1, w.shape[1] * int(attrs.get("group", 1)), "h", "w")), TensorDesc(1, w.shape),
           TensorDesc(1, b.shape) if b is not None else None] + ([TensorDesc(1, ("n", w.shape[0], "h", "w"))]
                                                                 if residual else [])
    consts = [None, w, b] + ([None] if residual else [])
    k = bind_generic_conv.conv(attrs, ins, consts, [None], lambda i, a: pytest.fail("generic kernel"))
    assert k is not None
    return k, k.keep[3], [ins, consts]


def _same_kernel(got: Any, want: Any) -> None:
    assert (got is None) == (want is None)
    if got is None:
        return
    for f in ("writes_out", "inplace", "threads", "layout", "packing", "impl"):
        assert getattr(got, f) == getattr(want, f), f
    assert (got.guarded is None) == (want.guarded is None)
    if want.run.__qualname__.startswith("passes_bound_for."):  # (acts on arena views only, which the table
        assert got.run.__qualname__ == "BoundConv.kernel.<locals>.kernel"  # never passes: left out)
    else:
        assert got.run.__qualname__ == want.run.__qualname__


@pytest.mark.parametrize("case", range(len(CASES)))
def test_each_shape_binds_what_the_reference_binds(case: int) -> None:
    w_shape, attrs, bias, residual = CASES[case]
    _, w, b = _data((1, 1, 1, 1), w_shape, bias, seed=case)
    attrs = {"group": 1, **attrs}
    k, node, (ins, consts) = _node(w, b, attrs, residual)
    rng = np.random.default_rng(case)
    # the weight's first primitive (``onednn_conv_plan._own_kernels``: later ones may take another implementation)
    x0 = rng.standard_normal((1, 8, 30, 31)).astype(np.float32)
    out0 = (1, w_shape[0]) + conv_window(x0.shape, w_shape, attrs).out
    node.bind(attrs, x0, rng.standard_normal(out0).astype(np.float32) if residual else None)
    for s in SHAPES:
        x = rng.standard_normal(s).astype(np.float32)
        out = (s[0], w_shape[0]) + conv_window(s, w_shape, attrs).out
        r = rng.standard_normal(out).astype(np.float32) if residual else None
        want = bind_generic_conv._bind(attrs, ins, consts, [None], x, r, w, b, residual)
        got = node.bind(attrs, x, r)
        _same_kernel(got, want)
        if got is None:
            continue
        inputs = [x, w, b] + ([r] if residual else [])
        np.testing.assert_array_equal(got.run(inputs, attrs)[0], want.run(inputs, attrs)[0])
        y = k.run(inputs, attrs)[0]  # the node's kernel, through its table
        ref = _ort_conv(x, w, b, {a: v for a, v in attrs.items() if a in ("pads", "strides", "dilations", "auto_pad")},
                        attrs["group"], residual=r)
        act = attrs.get("activation")
        ref = np.maximum(ref, 0) if act == "Relu" else np.clip(ref, 0, 6) if act == "Clip" else \
            ref * np.clip(ref / 6 + 0.5, 0, 1) if act == "HardSwish" else ref
        np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)


def test_other_attributes_take_the_reference() -> None:
    _, w, b = _data((1, 1, 1, 1), (16, 8, 3, 3), True)
    attrs = {"group": 1, "pads": [1, 1, 1, 1]}
    k, node, _ = _node(w, b, attrs, False)
    calls: list[Any] = []
    general = node.general
    node.general = lambda *a: calls.append(a) or general(*a)
    x = np.random.default_rng(1).standard_normal((1, 8, 11, 9)).astype(np.float32)
    y = k.run([x, w, b], dict(attrs))[0]  # equal attributes, another mapping: ``_bind`` serves it
    assert len(calls) == 1
    np.testing.assert_allclose(y, _ort_conv(x, w, b, {"pads": [1, 1, 1, 1]}, 1), rtol=RTOL, atol=ATOL)


def test_a_node_that_fails_its_checks_binds_nothing() -> None:
    _, w, _ = _data((1, 1, 1, 1), (16, 8, 3, 3), False)
    short_bias = np.zeros(5, np.float32)
    _, node, _ = _node(w, short_bias, {"group": 1}, False)
    assert node.window is False and node.bind(node.attrs, np.zeros((1, 8, 6, 6), np.float32), None) is None


def _tracked() -> Counter[str]:
    gc.collect()
    return Counter(type(o).__name__ for o in gc.get_objects())


def test_a_bound_shape_leaves_few_objects() -> None:
    """Each new size of a six-conv model: its kernels and primitives, and no choice-cache entry,
    primitive descriptor or per-shape closure beyond the bound kernels' own (~24 GC-tracked objects
    a conv, was ~41: every full collection of the GC walks them)."""
    lm = _generic(_model())
    rng = np.random.default_rng(6)
    lm.run([rng.standard_normal((1, 3, 20, 20)).astype(np.float32)])
    cached = providers._static_choice.cache_info().currsize
    before = _tracked()
    sizes = [(48 + 16 * i, 40 + 8 * i) for i in range(8)]
    for h, w in sizes:
        lm.run([rng.standard_normal((1, 3, h, w)).astype(np.float32)])
    grown = _tracked() - before
    assert providers._static_choice.cache_info().currsize == cached
    for kind in ("ConvSpec", "PrimitiveDesc"):
        assert grown[kind] == 0, kind
    assert sum(grown.values()) <= 6 * 30 * len(sizes), grown.most_common(12)


def test_a_plan_keeps_no_descriptor_but_for_its_in_place_form() -> None:
    x, w, b = _data((1, 8, 12, 10), (8, 8, 3, 3), True)
    win = conv_window(x.shape, w.shape, {"pads": [1, 1, 1, 1]})
    shared = ConvDescs(w, True, 1, False, None, 8)
    plans = [onednn_conv_plan._Plan(x.shape, w, True, 1, win, win.out, False, None, False, shared=shared),
             onednn_conv_plan._Plan((1, 8, 7, 5), w, True, 1, conv_window((1, 8, 7, 5), w.shape, {"pads": [1, 1, 1, 1]}),
                          (7, 5), False, None, False, shared=shared)]
    for p in plans:
        assert p._descs is None and p.prim.pd is None and p.src.md is None and p.dst.md is None
    np.testing.assert_allclose(plans[0].run(x, b, None), _ort_conv(x, w, b, {"pads": [1, 1, 1, 1]}, 1),
                               rtol=RTOL, atol=ATOL)
    res = onednn_conv_plan._Plan(x.shape, w, True, 1, win, win.out, False, None, True, shared=shared)
    r = np.random.default_rng(2).standard_normal(res.y_shape).astype(np.float32)
    np.testing.assert_allclose(res.run(x, b, r), _ort_conv(x, w, b, {"pads": [1, 1, 1, 1]}, 1, residual=r),
                               rtol=RTOL, atol=ATOL)
    if res.mode == "binary":  # its descriptors made again for ``in_place``: the "sum" form over Y = R
        prim = res.in_place()
        if prim is not None:
            xc, y = onednn.empty_channels_last(x.shape), onednn.empty_channels_last(res.y_shape)
            xc[...], y[...] = x, r
            res.src.set(capi.ptr(xc))
            res.dst.set(capi.ptr(y))
            prim.execute()
            np.testing.assert_allclose(y, _ort_conv(x, w, b, {"pads": [1, 1, 1, 1]}, 1, residual=r),
                                       rtol=RTOL, atol=ATOL)
    other = np.ascontiguousarray(w[::-1])
    assert shared.serves(w, True, 1, False, None, 8) and not shared.serves(other, True, 1, False, None, 8)
    assert not shared.serves(w, False, 1, False, None, 8) and not shared.serves(w, True, 1, False, onednn.RELU, 8)


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 0, 2, 1]}, {"strides": [2, 3], "dilations": [2, 1]},
                                   {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, {"auto_pad": b"SAME_LOWER"},
                                   {"auto_pad": "VALID", "pads": [9, 9, 9, 9]}, {"pads": [3, 3, 3, 3]}])
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_window_of_is_plan_window(attrs: dict[str, Any], ceil_mode: bool) -> None:
    params = window_params(2, (3, 2), attrs)
    for size in [(1, 1), (2, 7), (5, 5), (16, 9)]:
        for truncate in (False, True):
            assert window_of(size, params, ceil_mode, truncate) == plan_window(size, (3, 2), attrs, ceil_mode, truncate)


def test_exec_args_are_filled_in_place() -> None:
    md = capi.MemoryDesc.strided((2, 3), (3, 1))
    mems = [capi.Memory(md, 0, keep_md=False), capi.Memory(md, 0)]
    arr = capi.exec_args([(capi.ARG_SRC, mems[0]), (capi.ARG_DST, mems[1])])
    assert arr._objects is None  # (no dict per array for the GC)
    assert [(e.arg, e.memory) for e in arr] == [(capi.ARG_SRC, mems[0].handle), (capi.ARG_DST, mems[1].handle)]


def test_impl_info_follows_next_impl() -> None:
    _, w, _ = _data((1, 1, 1, 1), (16, 8, 3, 3), False)
    d = ConvDescs(w, False, 1, False, None, 8)
    src, dst = capi.MemoryDesc.strided((1, 8, 9, 9), (648, 1, 72, 8)), capi.MemoryDesc.strided((1, 16, 9, 9),
                                                                                                (1296, 1, 144, 16))
    pd = capi_ops.convolution_pd(src, d.w_any, None, dst, (1, 1), (0, 0), (1, 1), (1, 1), d.attr(False))

    def asked() -> str:
        s = ctypes.c_char_p()
        capi.check(capi._lib.dnnl_primitive_desc_query(pd.handle, capi.QUERY_IMPL_INFO_STR, 0, ctypes.byref(s)), "q")
        return (s.value or b"").decode()

    for _ in range(4):
        assert pd.impl_info() == pd.impl_info() == asked()
        if not pd.next_impl():
            break


def test_a_choice_not_remembered_is_the_same_choice() -> None:
    xs, ws = (1, 8, 13, 17), (16, 8, 3, 3)
    win = conv_window(xs, ws, {"pads": [1, 1, 1, 1]})
    spec = providers.ConvSpec("Conv", xs, ws, 1, win, win.out, "float32")
    n = providers._static_choice.cache_info().currsize
    once = providers.resolve(None, lambda: spec, remember=False)
    assert providers._static_choice.cache_info().currsize == n
    assert once is providers.resolve(None, lambda: spec)


def test_sized_runners_share_their_bias_memory() -> None:
    x, w, b = _data((1, 6, 5, 7), (4, 6, 1, 1), True)
    k = pw.plan(w, True, None, False)
    assert k is not None
    runs = [k.sized(x.shape, b), k.sized((2, 6, 3, 3), b)]
    assert runs[0].bias is runs[1].bias
    np.testing.assert_allclose(runs[0](x, None), _ort_conv(x, w, b, {}, 1), rtol=RTOL, atol=ATOL)
    x2 = np.random.default_rng(3).standard_normal((2, 6, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(runs[1](x2, None), _ort_conv(x2, w, b, {}, 1), rtol=RTOL, atol=ATOL)


def test_plans_of_a_node_share_one_bias_memory() -> None:
    from pycann.errors import OperandError

    x, w, b = _data((1, 8, 12, 10), (8, 8, 3, 3), True)
    shared = ConvDescs(w, True, 1, False, None, 8)
    ks = [onednn.bound_conv_nhwc(w, b, 1, conv_window(s, w.shape, {"pads": [1, 1, 1, 1]}), s, None, False,
                                 shared=shared) for s in [x.shape, (2, 8, 5, 9)]]
    plans = [next(c.cell_contents for c in k.run.__closure__ if hasattr(c.cell_contents, "plan")).plan for k in ks]
    assert plans[0].bias is plans[1].bias and ks[0].keep is ks[1].keep
    x2 = np.random.default_rng(4).standard_normal((2, 8, 5, 9)).astype(np.float32)
    for k, xi in zip(ks, [x, x2]):
        np.testing.assert_allclose(k.run([xi, w, b], {})[0], _ort_conv(xi, w, b, {"pads": [1, 1, 1, 1]}, 1),
                                   rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(plans[0].run(x, b, None), _ort_conv(x, w, b, {"pads": [1, 1, 1, 1]}, 1),
                               rtol=RTOL, atol=ATOL)  # (its own bias again: fine)
    with pytest.raises(OperandError, match="another bias"):
        plans[0].run(x, b.copy(), None)  # (would re-point the memory the other plan reads)

"""TBE-style DSL lowered onto the Ascend C kit: values against numpy, and the twin's checks at DSL lines."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.ascendc.diagnostics import KernelCheckError, Rule
from pycann.tbe import TbeError, dsl, tvm

RNG = np.random.default_rng(0)


def _build(res, *ins, name="k"):
    with tvm.target.cce():
        sch = dsl.auto_schedule(res)
    return dsl.build(sch, {"name": name, "tensor_list": [*ins, res]})


@pytest.mark.parametrize("op,ref", [("vadd", np.add), ("vsub", np.subtract), ("vmul", np.multiply),
                                    ("vdiv", np.divide), ("vmax", np.maximum), ("vmin", np.minimum)])
def test_binary_float32_bit_exact(op, ref) -> None:
    a, b = tvm.placeholder((5000,), "a", "float32"), tvm.placeholder((5000,), "b", "float32")
    k = _build(getattr(dsl, op)(a, b), a, b)
    av, bv = RNG.uniform(0.5, 9, 5000).astype(np.float32), RNG.uniform(0.5, 9, 5000).astype(np.float32)
    np.testing.assert_array_equal(k(av, bv), ref(av, bv))
    assert k.pattern == "elewise" and not k.last_result.findings


@pytest.mark.parametrize("op,ref", [("vexp", np.exp), ("vlog", np.log), ("vabs", np.abs), ("vsqrt", np.sqrt),
                                    ("vrsqrt", lambda x: 1 / np.sqrt(x)), ("vrec", lambda x: 1 / x),
                                    ("vrelu", lambda x: np.maximum(x, 0))])
def test_unary_half(op, ref) -> None:
    x = tvm.placeholder((16, 96), "x", "float16")
    k = _build(getattr(dsl, op)(x), x)
    xv = RNG.uniform(0.1, 3, (16, 96)).astype(np.float16)
    want = ref(xv.astype(np.float32)).astype(np.float16)  # one rounding per instruction
    np.testing.assert_allclose(k(xv).astype(np.float32), want.astype(np.float32), rtol=1e-3)


def test_scalar_ops_and_cast_chain() -> None:
    x = tvm.placeholder((4, 1000), "x", "float16")
    y = dsl.cast_to(dsl.vmaxs(dsl.vadds(dsl.vmuls(dsl.cast_to(x, "float32"), 0.5), 1.0), 0.0), "float16")
    k = _build(y, x)
    xv = RNG.uniform(-8, 8, (4, 1000)).astype(np.float16)
    want = np.maximum(xv.astype(np.float32) * 0.5 + 1.0, 0).astype(np.float16)
    np.testing.assert_array_equal(k(xv), want)


def test_softmax_norm_pattern_unaligned_rows() -> None:
    x = tvm.placeholder((32, 200), "x", "float16")     # 400-byte rows: DataCopyPad with zero padding
    m = dsl.reduce_max(x, axis=-1, keepdims=True)
    e = dsl.vexp(dsl.vsub(x, dsl.broadcast(m, (32, 200))))
    res = dsl.vdiv(e, dsl.broadcast(dsl.reduce_sum(e, axis=-1, keepdims=True), (32, 200)))
    k = _build(res, x, name="softmax")
    xv = RNG.normal(0, 2, (32, 200)).astype(np.float16)
    ee = np.exp(xv.astype(np.float64) - xv.max(1, keepdims=True))
    np.testing.assert_allclose(k(xv), ee / ee.sum(1, keepdims=True), atol=1e-3)
    assert k.pattern == "norm"


def test_reduce_outputs_and_layernorm_with_shared_gamma() -> None:
    x = tvm.placeholder((24, 256), "x", "float32")
    g = tvm.placeholder((1, 256), "gamma", "float32")
    mean = dsl.vmuls(dsl.reduce_sum(x, axis=-1, keepdims=True), 1 / 256)
    xc = dsl.vsub(x, dsl.broadcast(mean, (24, 256)))
    var = dsl.vmuls(dsl.reduce_sum(dsl.vmul(xc, xc), axis=-1, keepdims=True), 1 / 256)
    rstd = dsl.vrsqrt(dsl.vadds(var, 1e-5))
    y = dsl.vmul(dsl.vmul(xc, dsl.broadcast(rstd, (24, 256))), dsl.broadcast(g, (24, 256)))
    k = _build(y, x, g)
    xv, gv = RNG.normal(1, 2, (24, 256)).astype(np.float32), RNG.normal(1, 0.1, (1, 256)).astype(np.float32)
    x64 = xv.astype(np.float64)
    want = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * gv
    np.testing.assert_allclose(k(xv, gv), want, rtol=1e-4, atol=1e-4)
    r = dsl.reduce_min(x, axis=1)
    np.testing.assert_array_equal(_build(r, x)(xv), xv.min(1))


def test_dsl_errors_name_the_op() -> None:
    a, b = tvm.placeholder((4, 8), "a"), tvm.placeholder((4, 9), "b")
    with pytest.raises(TbeError, match="vadd: shapes"):
        dsl.vadd(a, b)
    with pytest.raises(TbeError, match="last axis"):
        dsl.reduce_sum(a, axis=0)
    with pytest.raises(TbeError, match="dtype"):
        tvm.placeholder((4,), "c", "float64")
    k = _build(dsl.vabs(a), a)
    with pytest.raises(TbeError, match="expected float16"):
        k(np.zeros((4, 8), np.float32))
    with pytest.raises(TbeError, match="tensor_list"):
        dsl.build(dsl.auto_schedule(dsl.vadd(a, a)), {"name": "x", "tensor_list": [dsl.vabs(a)]})


def test_twin_checks_apply_at_the_dsl_line() -> None:
    x = tvm.placeholder((3, 100), "x", "float16"); line_x = _line()  # noqa: E702  (600 B: not 32-B aligned)
    res = dsl.vexp(x); line_exp = _line()  # noqa: E702
    k = _build(res, x)
    with pytest.raises(KernelCheckError) as ei:
        k(np.ones((3, 100), np.float16), soc_version="Ascend310P3")  # no DataCopyPad on 310P
    found = {(f.rule, f.where) for f in ei.value.findings}
    assert (Rule.ALIGN_LEN, f"{__file__}:{line_x}") in found
    assert (Rule.READ_UNINIT, f"{__file__}:{line_exp}") in found


def test_bigger_than_ub_is_a_capacity_finding() -> None:
    x = tvm.placeholder((2, 60000), "x", "float32")
    y = dsl.vexp(dsl.vexp(dsl.vexp(x)))
    with pytest.raises(KernelCheckError) as ei:
        _build(dsl.reduce_sum(y, axis=-1), x)(np.zeros((2, 60000), np.float32))
    assert Rule.CAPACITY in {f.rule for f in ei.value.findings}


def _line() -> int:
    import sys

    return sys._getframe(1).f_lineno


@pytest.mark.parametrize("shape", [(1000,), (1,), (37,), (3, 1000)])
@pytest.mark.parametrize("src,dst", [("float16", "float32"), ("float32", "float16"), ("float16", "int32")])
def test_cast_to_between_widths_on_unaligned_rows(shape, src, dst) -> None:
    """A row whose length is 32-byte aligned in one dtype and not the other (1000 halves, 1000
    floats): cast_to writes exactly its destination slot (it wrote 1008 floats into 1000 before)."""
    x = tvm.placeholder(shape, "x", src)
    k = _build(dsl.vadds(dsl.cast_to(x, dst), 1), x)
    xv = (RNG.standard_normal(shape) * 3).astype(src)
    conv = np.trunc(xv.astype(np.float32)).astype(dst) if dst == "int32" else xv.astype(dst)
    np.testing.assert_array_equal(k(xv), conv + np.asarray(1, dst))
    assert not k.last_result.findings

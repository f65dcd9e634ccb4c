"""bfloat16 -> float32 Cast as a oneDNN reorder (``kernels/providers/onednn_cast.py``) against
ml_dtypes' ``astype`` bit for bit: random values, subnormals, the largest values, +-inf and NaN;
any input and output layout; the arena view; the calls it leaves to numpy (float32 -> bfloat16
among them: oneDNN flushes subnormals there); and the static binder's use of it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pycann.dtypes import TensorDesc, bfloat16
from pycann.kernels.providers import onednn
from pycann.ops.cast import _k_cast

pytestmark = pytest.mark.skipif(not onednn.available(), reason="libdnnl.so.3 (onednn-cpu-gomp) not available")

from pycann.kernels.providers import onednn_cast  # noqa: E402

BF16 = np.dtype(bfloat16())
F32 = np.dtype(np.float32)
SHAPE = (1, 24, 40, 48)  # 46080 values: above MIN_ELEMENTS


def _values(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """float32 values with every hard case somewhere: ties at bfloat16's rounding point (odd and even
    mantissas), subnormals, bfloat16's max and past it, +-inf, NaN, +-0."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 6, shape)).astype(np.float32)
    flat = x.reshape(-1)
    bits = rng.integers(0, 2**32, 2000, dtype=np.uint64).astype(np.uint32)
    flat[:2000] = (bits & np.uint32(0xFFFF0000) | np.uint32(0x8000)).view(np.float32)  # exact ties
    flat[2000:2100] = np.float32(1e-40) * np.arange(100, dtype=np.float32)  # subnormals
    flat[2100:2110] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 3.3895314e38, 3.39e38, -3.4e38, 1.17549435e-38, -np.nan]
    rng.shuffle(flat)
    return x


def _bits(a: np.ndarray) -> np.ndarray:
    """Bit patterns with every NaN as one canonical quiet NaN (payloads are not part of Cast)."""
    u = np.ascontiguousarray(a).view(np.uint16 if a.dtype.itemsize == 2 else np.uint32).copy()
    nan = np.isnan(a.astype(np.float32))
    u[np.ascontiguousarray(nan)] = 0x7FC0 if a.dtype.itemsize == 2 else 0x7FC00000
    return u


def _cl(a: np.ndarray) -> np.ndarray:
    y = np.empty((a.shape[0], *a.shape[2:], a.shape[1]), a.dtype).transpose(0, 3, 1, 2)
    y[...] = a
    return y


def _kernel(src: np.dtype, dst: np.dtype, shape: tuple[int, ...] = SHAPE) -> Any:  # (bf16 -> f32)
    k = onednn_cast.bound_cast(shape, src, dst, _k_cast)
    assert k is not None and k.writes_out
    return k


@pytest.mark.parametrize("layout", ["nchw", "nhwc", "strided"])
def test_bf16_to_f32_is_exact(layout: str) -> None:
    x = _values(SHAPE, 1).astype(BF16)
    if layout == "nhwc":
        x = _cl(x)
    elif layout == "strided":  # a view every second column of a wider array
        wide = np.zeros(SHAPE[:3] + (2 * SHAPE[3],), BF16)
        wide[..., ::2] = x
        x = wide[..., ::2]
    y = _kernel(BF16, F32).run([x], {"to": 1})[0]
    assert y.dtype == F32 and y.shape == SHAPE
    if layout == "nhwc":
        assert y.strides[1] == 4  # laid out like its input, as astype
    assert (x.astype(F32) != 0).sum() > 0 and np.isnan(y).any() and np.isinf(y).any()
    np.testing.assert_array_equal(_bits(y), _bits(x.astype(F32)))


@pytest.mark.parametrize("shape", [(1, 3, 160, 120), (2, 8, 64, 72), (1, 96, 20, 20), (1, 7, 61, 83), (4, 65536)])
@pytest.mark.parametrize("to_cl", [False, True])
def test_bf16_to_f32_is_exact_for_other_shapes_and_layout_changes(shape: tuple[int, ...], to_cl: bool) -> None:
    """oneDNN picks its reorder kernel by shape and layouts: every one must widen exactly
    (subnormals included), also when the output is laid out differently from the input."""
    x = _values(shape, 6).astype(BF16)
    k = _kernel(BF16, F32, shape)
    out = _cl(np.zeros(shape, F32)) if to_cl and len(shape) == 4 else None
    y = k.run([x], {"to": 1}, None if out is None else [out])[0]
    np.testing.assert_array_equal(_bits(y), _bits(x.astype(F32)))
    assert (np.abs(y) < np.float32(1.1754944e-38)).sum() > (y == 0).sum()  # subnormals were there, kept


def test_writes_the_arena_view_in_its_own_layout() -> None:
    x = _values(SHAPE, 2).astype(BF16)
    view = _cl(np.zeros(SHAPE, F32))
    y = _kernel(BF16, F32).run([x], {"to": 1}, [view])[0]
    assert y is view
    np.testing.assert_array_equal(_bits(view), _bits(x.astype(F32)))


def test_other_calls_take_numpy() -> None:
    k = _kernel(BF16, F32)
    small = _values((1, 24, 40, 40), 3).astype(BF16)  # another shape than bound
    np.testing.assert_array_equal(_bits(k.run([small], {"to": 1})[0]), _bits(small.astype(F32)))
    f16 = _values(SHAPE, 4).astype(np.float16)  # another dtype
    np.testing.assert_array_equal(_bits(k.run([f16], {"to": 1})[0]), _bits(f16.astype(F32)))
    out = np.zeros(SHAPE, F32)
    assert k.run([f16], {"to": 1}, [out])[0] is out
    assert onednn_cast.bound_cast((4, 4), BF16, F32, _k_cast) is None  # below MIN_ELEMENTS: numpy's astype
    assert onednn_cast.bound_cast(SHAPE, F32, BF16, _k_cast) is None  # oneDNN would flush subnormals
    assert onednn_cast.bound_cast(SHAPE, np.dtype(np.float16), F32, _k_cast) is None


def test_the_static_binder_casts_with_it() -> None:
    from pycann.kernels.bind import PREPARE

    bk = PREPARE[("", "Cast")]({"to": 1}, [TensorDesc(16, SHAPE)], [None], [TensorDesc(1, SHAPE)])
    assert bk is not None and bk.impl == "onednn:reorder_cast"
    x = _values(SHAPE, 5).astype(BF16)
    np.testing.assert_array_equal(_bits(bk.run([x], {"to": 1})[0]), _bits(x.astype(F32)))
    back = PREPARE[("", "Cast")]({"to": 16}, [TensorDesc(1, SHAPE)], [None], [TensorDesc(16, SHAPE)])
    assert getattr(back, "impl", "") != "onednn:reorder_cast"


def test_a_held_lock_is_not_waited_for() -> None:
    """A thread of the parent inside the kernel at an os.fork leaves its lock taken in the child: the
    kernel must not wait for it (it converts on memories of its own instead)."""
    import threading

    k = _kernel(BF16, F32)
    x = _values(SHAPE, 7).astype(BF16)
    k.run([x], {"to": 1})  # the primitive made
    (prims,) = k.keep
    (reorder,) = prims.values()
    assert isinstance(reorder._lock, type(threading.Lock()))
    with reorder._lock:
        y = k.run([x], {"to": 1})[0]
    np.testing.assert_array_equal(_bits(y), _bits(x.astype(F32)))

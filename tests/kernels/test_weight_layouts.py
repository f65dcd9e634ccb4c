"""A shape-generic MatMul's weight layout following its row counts (``kernels/weight_layouts.py``):
packed at bind, B^T for oneDNN's gemv after ``GEMV_AFTER`` one-row calls (read back exactly from the
packed copy, the packing forgotten: bytes held go down), packed again at a call of ``REPACK_ROWS``
rows; values against float64 numpy in every layout (bias, residual, GELU post-op), from threads and
in a forked child."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pycann.kernels import bind_generic, providers, weight_layouts
from pycann.kernels.providers import choice_table, onednn_matmul, onednn_packed
from tests.forking import fork_while_held, run_script

pytestmark = [pytest.mark.usefixtures("default_providers"),
              pytest.mark.skipif(not (choice_table.has_avx512() and providers.available("onednn")),
                                 reason="packed generic GEMMs bind on AVX-512 CPUs with libdnnl only")]
RNG = np.random.default_rng(29)
K, N = 512, 1536


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.05).astype(np.float32)


def _fail(inputs: Any, attrs: Any) -> list[np.ndarray]:
    raise AssertionError("fallback called")


def _forms(kernel: Any) -> weight_layouts.AdaptiveMatmul:
    (forms,) = [k for k in kernel.keep if isinstance(k, weight_layouts.AdaptiveMatmul)]
    return forms


def _check(kernel: Any, b: np.ndarray, bias: np.ndarray, rows: int) -> None:
    x, r = _w(rows, K), _w(rows, N)
    y = kernel.run([x, b, bias, r], {})[0]
    np.testing.assert_allclose(y, x.astype(np.float64) @ b + bias + r, rtol=1e-4, atol=1e-5)


def test_one_row_calls_move_the_weight_to_the_gemv_layout_and_back() -> None:
    b, bias = _w(K, N), _w(N)
    k = bind_generic.packed_matmul(b, bias, None, True, _fail)
    assert k is not None
    forms = _forms(k)
    _check(k, b, bias, 32)  # a prompt
    held = onednn_packed.stats().bytes_held
    for _ in range(weight_layouts.GEMV_AFTER - 1):
        _check(k, b, bias, 1)
    assert forms.layout == "packed"
    _check(k, b, bias, 1)
    assert forms.layout == "gemv" and forms.switches == 1
    assert forms.bt is not None and np.array_equal(forms.bt, b.T)  # read back exactly from the packing
    assert onednn_packed.stats().bytes_held <= held - b.nbytes  # the packed copy is no longer held
    assert forms.kernel_for(1).impl == onednn_matmul.GEMV_IMPL  # type: ignore[union-attr]
    for rows in (1, 2, 3, 1):  # short calls stay on the gemv layout
        _check(k, b, bias, rows)
    assert forms.layout == "gemv"
    _check(k, b, bias, weight_layouts.REPACK_ROWS)
    assert forms.layout == "packed" and forms.bt is None and forms.switches == 2
    assert forms.kernel_for(1).impl.startswith("brg")  # type: ignore[union-attr]
    for rows in (1, 7, 64):
        _check(k, b, bias, rows)


def test_multi_row_calls_reset_the_count() -> None:
    b, bias = _w(K, N), _w(N)
    k = bind_generic.packed_matmul(b, bias, None, True, _fail)
    assert k is not None
    for _ in range(3):
        for _ in range(weight_layouts.GEMV_AFTER - 1):
            _check(k, b, bias, 1)
        _check(k, b, bias, 4)  # batch-4 steps in between: never GEMV_AFTER one-row calls in a row
    assert _forms(k).layout == "packed" and _forms(k).switches == 0


def test_gelu_post_op_in_both_layouts() -> None:
    from pycann.kernels.providers import onednn
    from pycann.ops.fused import apply_activation

    b = _w(K, N)
    unary = onednn.onednn_unary("GeluTanh", 0.0, 0.0)
    assert unary is not None
    k = bind_generic.packed_matmul(b, None, unary, False, _fail)
    assert k is not None
    x = _w(1, K)
    want = (x.astype(np.float64) @ b).astype(np.float32)
    apply_activation(want, "GeluTanh", 0.0, 0.0)
    for _ in range(weight_layouts.GEMV_AFTER + 2):
        np.testing.assert_allclose(k.run([x, b], {})[0], want, rtol=1e-4, atol=1e-5)
    assert _forms(k).layout == "gemv"


def test_threads_calling_across_switches_get_right_values() -> None:
    b, bias = _w(K, N), _w(N)
    k = bind_generic.packed_matmul(b, bias, None, True, _fail)
    assert k is not None
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(60):
                _check(k, b, bias, int(rng.choice([1, 1, 1, 1, 2, 5])))
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_a_forked_child_switches_though_a_parent_thread_held_the_switch_lock(tmp_path: Path) -> None:
    setup = """
import numpy as np
from pycann.kernels import bind_generic, weight_layouts
rng = np.random.default_rng(1)
b = (rng.standard_normal((512, 1536)) * 0.05).astype(np.float32)
k = bind_generic.packed_matmul(b, None, None, False, lambda i, a: 1 / 0)
forms = [f for f in k.keep if isinstance(f, weight_layouts.AdaptiveMatmul)][0]
x1, x8 = rng.standard_normal((1, 512)).astype(np.float32), rng.standard_normal((8, 512)).astype(np.float32)
for _ in range(weight_layouts.GEMV_AFTER):
    k.run([x1, b], {})
assert forms.layout == "gemv"
"""
    # (the executor runs a forked child's calls on a fresh thread: libgomp's pool of the forking one is stale)
    child = """
from pycann.kernels.providers import omp_fork
def check():
    ok = np.allclose(k.run([x8, b], {})[0], x8.astype(np.float64) @ b, rtol=1e-4, atol=1e-5)
    ok = ok and forms.layout == "packed"
    return ok and np.allclose(k.run([x1, b], {})[0], x1.astype(np.float64) @ b, rtol=1e-4, atol=1e-5)
os._exit(0 if omp_fork.run_fresh(check) else 3)
"""
    res = run_script(tmp_path, fork_while_held(setup, "forms._switch_lock", child))
    assert res.returncode == 0 and "child 0" in res.stdout, res.stdout + res.stderr


def _cycle(k: Any, b: np.ndarray, x1: np.ndarray, x4: np.ndarray) -> None:
    """One-row calls until the node moves to the gemv layout, then a 4-row call: packed again."""
    for _ in range(weight_layouts.GEMV_AFTER):
        np.testing.assert_allclose(k.run([x1, b], {})[0], x1.astype(np.float64) @ b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(k.run([x4, b], {})[0], x4.astype(np.float64) @ b, rtol=1e-4, atol=1e-5)


def test_switch_cycles_leave_no_finalizer_behind() -> None:
    """Each repack after a switch registered one more ``weakref.finalize`` on the weight (the
    forgotten key got a new one): ~0.5 KB more per switch cycle for the weight's lifetime."""
    import weakref

    b = _w(K, N)
    k = bind_generic.packed_matmul(b, None, None, False, _fail)
    assert k is not None
    x1, x4 = _w(1, K), _w(4, K)
    _cycle(k, b, x1, x4)
    before = len(weakref.finalize._registry)  # type: ignore[attr-defined]
    for _ in range(10):
        _cycle(k, b, x1, x4)
    assert _forms(k).switches == 22
    assert len(weakref.finalize._registry) <= before  # type: ignore[attr-defined]


def test_nodes_sharing_a_weight_share_its_transposed_copy() -> None:
    """Two MatMuls over one weight initializer shared one packing; in the gemv layout each held
    its own B^T (the weight's memory once per node)."""
    b = _w(K, N)
    k1 = bind_generic.packed_matmul(b, None, None, False, _fail)
    k2 = bind_generic.packed_matmul(b, None, None, False, _fail)
    assert k1 is not None and k2 is not None
    x1 = _w(1, K)
    for _ in range(weight_layouts.GEMV_AFTER):
        for k in (k1, k2):
            np.testing.assert_allclose(k.run([x1, b], {})[0], x1.astype(np.float64) @ b, rtol=1e-4, atol=1e-5)
    f1, f2 = _forms(k1), _forms(k2)
    assert f1.layout == f2.layout == "gemv"
    assert f1.bt is not None and f2.bt is not None and np.shares_memory(f1.bt, f2.bt)
    assert np.array_equal(f2.bt, b.T)


def _packing(kernel: Any) -> Any:
    """The packed weight memory a ``bound_matmul`` kernel's primitive reads."""
    return kernel.keep[-1].wei


def test_a_packing_another_plan_still_holds_is_shared_and_counted() -> None:
    """A static plan's kernel and the generic plan's node over one weight share one packing. The
    node's switch to the gemv layout forgets it, but the static kernel still holds it: it was dropped
    from the count (bytes held 0 while the copy lived) and the node's switch back packed a second copy
    of the same weight. Now it stays counted while bound, the switch back is served that same memory
    (no packing made), and the bytes go once its last holder does."""
    import gc

    gc.collect()  # (earlier tests' garbage freed now, not in the middle of the deltas below)
    gc.disable()
    try:
        b, bias = _w(K, N), _w(N)
        base = onednn_packed.stats()
        static = onednn_matmul.bound_matmul(b, bias, (8, K), None, True)  # a static plan's kernel
        assert static is not None
        mem = _packing(static)
        size = onednn_packed.stats().bytes_held - base.bytes_held
        assert size >= b.nbytes
        k = bind_generic.packed_matmul(b, bias, None, True, _fail)
        assert k is not None
        forms = _forms(k)
        assert forms.packed is not None and _packing(forms.packed[1]) is mem  # shared at bind

        for _ in range(weight_layouts.GEMV_AFTER):
            _check(k, b, bias, 1)
        assert forms.layout == "gemv"
        st = onednn_packed.stats()
        assert (st.bytes_held - base.bytes_held, st.packed - base.packed) == (size, 1)  # still bound: counted
        _check(static, b, bias, 8)

        _check(k, b, bias, weight_layouts.REPACK_ROWS)  # back to the packed layout
        assert forms.layout == "packed" and forms.packed is not None
        assert _packing(forms.packed[1]) is mem  # the same memory, not a second copy
        st = onednn_packed.stats()
        assert (st.bytes_held - base.bytes_held, st.packed - base.packed) == (size, 1)
        for rows in (1, 8):
            _check(k, b, bias, rows)

        del static, mem
        assert onednn_packed.stats().bytes_held - base.bytes_held == size  # the node holds it still
        for _ in range(weight_layouts.GEMV_AFTER):
            _check(k, b, bias, 1)
        assert forms.layout == "gemv"
        assert onednn_packed.stats().bytes_held == base.bytes_held  # its last holder let it go: freed
    finally:
        gc.enable()

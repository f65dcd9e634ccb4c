"""Adversarial checks of ``onednn_bound_conv.BoundConv`` (the bound static oneDNN conv's kernel, moved
out of ``onednn.bound_conv_nhwc``'s closures): against the closure implementation it replaced (the
old function's source, kept here as the golden kernel) and against ONNX Runtime / the numpy kernel.
"""

from __future__ import annotations

import gc
import os
from typing import Any

import numpy as np
import pytest

from pycann.errors import OperandError
from pycann.kernels import providers
from pycann.kernels.providers import onednn

pytestmark = [pytest.mark.usefixtures("default_providers"),
              pytest.mark.skipif(not providers.available("onednn"), reason="libdnnl missing")]

RNG = np.random.default_rng(2512)
TOL = dict(rtol=1e-5, atol=1e-5)


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


_OLD_SRC = '''
def _old_bound_conv_nhwc(w, b, group, win, x_shape, unary, residual, in_place=False):
    x_shape = tuple(int(d) for d in x_shape)
    bc = _bias(b)
    try:
        p = _Plan(tuple(x_shape), w, bc is not None, group, win, tuple(win.out), False, unary, residual, in_place)
    except capi.DnnlError:
        return None
    if bc is not None and p.bias is not None:
        p.bias.set(address("conv bias B", bc, (p.m,)))
    keep = (w, bc)
    y_shape = p.y_shape
    perm = (0, len(y_shape) - 1, *range(1, len(y_shape) - 1))
    cl_shape = (y_shape[0], *y_shape[2:], y_shape[1])
    xs, ys = p.x_strides, p.y_strides
    src_set, dst_set, res = p.src.set, p.dst.set, p.res
    execute, lock, run = p.prim.execute, p.lock, p.run

    def dest(out, *reads):
        if out is None:
            return None
        o = out[0]
        if o.strides != ys or o.dtype != np.float32 or o.shape != y_shape or any(np.may_share_memory(o, r) for r in reads):
            return None
        return o

    def finish(y, out):
        if out is not None and y is not out[0]:
            if out[0].shape != y.shape:
                raise OperandError(f"conv output Y: the kernel was bound for {list(y.shape)} but the output "
                                   f"given is {list(out[0].shape)}")
            out[0][...] = y
        return [y]

    res_set = res.set if res is not None else None
    verified = {}
    seen = {}

    def remember(key, prim):
        if len(verified) >= 64:
            verified.clear()
        verified[key] = prim

    def checked(x, o, r):
        if x.strides != xs or x.dtype != _F32 or o.strides != ys or o.dtype != _F32 or x.shape != x_shape \\
                or o.shape != y_shape or (r is not None and (r.strides != ys or r.dtype != _F32 or r.shape != y_shape)):
            return None
        key = (x.__array_interface__["data"][0], o.__array_interface__["data"][0],
               r.__array_interface__["data"][0] if r is not None else 0)
        prim = verified.get(key)
        if prim is None:
            return None
        if len(seen) >= 64:
            seen.clear()
        seen[(id(x), id(o), id(r))] = (prim, key, weakref.ref(x), weakref.ref(o),
                                       weakref.ref(r) if r is not None else None)
        return prim, key

    def kernel(inputs, attrs, out=None):
        x = inputs[0]
        r = inputs[3] if residual else None
        if out is not None:
            o = out[0]
            hit = seen.get((id(x), id(o), id(r)))
            known = (hit[0], hit[1]) if hit is not None and hit[2]() is x and hit[3]() is o \\
                and (r is None or hit[4]() is r) else checked(x, o, r)
            if known is not None:
                prim, key = known
                with lock:
                    if p.bound_key != key:
                        src_set(key[0])
                        dst_set(key[1])
                        if res_set is not None and r is not None:
                            res_set(key[2])
                        p.bound_key = key
                    prim.execute()
                return out
        if r is not None and out is not None and _same_buffer(out[0], r, ys) and x.strides == xs \\
                and x.dtype == np.float32 and x.shape == x_shape and r.shape == y_shape and not np.may_share_memory(x, r):
            prim = p.in_place()
            if prim is not None:
                with lock:
                    p.bound_key = None
                    src_set(x.__array_interface__["data"][0])
                    dst_set(r.__array_interface__["data"][0])
                    prim.execute()
                    remember((x.__array_interface__["data"][0], r.__array_interface__["data"][0],
                              r.__array_interface__["data"][0]), prim)
                return [out[0]]
        if x.strides != xs or x.dtype != np.float32 or x.shape != x_shape or (r is not None and (
                res_set is None or r.strides != ys or r.dtype != np.float32 or r.shape != y_shape)):
            return finish(run(x.astype(np.float32, copy=False), None, r, out[0] if out is not None else None), out)
        y = dest(out, x) if r is None else dest(out, x, r)
        if y is None:
            y = np.empty(cl_shape, np.float32).transpose(perm)
        xp, yp = address("conv input X", x, x_shape, strides=xs), address("conv output Y", y, y_shape, strides=ys)
        rp = address("conv residual", r, y_shape, strides=ys) if r is not None and res_set is not None else 0
        with lock:
            p.bound_key = None
            src_set(xp)
            dst_set(yp)
            if rp and res_set is not None:
                res_set(rp)
            execute()
            if out is not None and y is out[0]:
                remember((x.__array_interface__["data"][0], y.__array_interface__["data"][0],
                          r.__array_interface__["data"][0] if r is not None else 0), p.prim)
        return finish(y, out)

    return kernel, keep
'''


def _old_factory() -> Any:
    import weakref

    from pycann.kernels.providers.onednn_bound_conv import _same_buffer

    ns = dict(vars(onednn))
    ns.update(weakref=weakref, _same_buffer=_same_buffer, OperandError=OperandError)
    exec(compile(_OLD_SRC, "<old bound_conv_nhwc>", "exec"), ns)  # noqa: S102 - the golden kernel
    return ns["_old_bound_conv_nhwc"]


CASES = {
    # name: (C in, M out, k, group, attrs, spatial, residual, bias, activation)
    "3x3": (16, 16, 3, 1, {"pads": [1, 1, 1, 1]}, 12, False, True, "Relu"),
    "3x3_res": (16, 16, 3, 1, {"pads": [1, 1, 1, 1]}, 12, True, True, "Relu"),
    "1x1_res_nobias": (16, 32, 1, 1, {}, 10, True, False, None),
    "dw_s2": (16, 16, 3, 16, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, 13, False, True, "Clip"),
    "dil_group": (16, 24, 3, 4, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, 11, True, False, None),
    "stem": (3, 16, 3, 1, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, 16, False, True, "Relu"),
}


def _bind(name: str, in_place: bool = False) -> tuple[Any, Any, np.ndarray, np.ndarray | None, tuple[int, ...], Any]:
    from pycann.ops.nn.conv import conv_window

    c, m, k, g, attrs, s, res, bias, act = CASES[name]
    w = _f32(m, c // g, k, k, scale=0.2)
    b = _f32(m, scale=0.1) if bias else None
    shape = (1, c, s, s)
    win = conv_window(shape, w.shape, attrs)
    unary = onednn.onednn_unary(act, 0.0, 6.0) if act else None
    new = onednn.bound_conv_nhwc(w, b, g, win, shape, unary, res, in_place)
    old, _keep = _old_factory()(w, b, g, win, shape, unary, res, in_place)
    assert new is not None
    return new, old, w, b, shape, win


def _cl(a: np.ndarray) -> np.ndarray:
    y = onednn.empty_channels_last(a.shape)
    y[...] = a
    return y


def _y_shape(win: Any, shape: tuple[int, ...], w: np.ndarray) -> tuple[int, ...]:
    return (shape[0], w.shape[0], *win.out)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("in_place", [False, True])
def test_same_and_changing_buffers_match_the_old_kernel(name: str, in_place: bool) -> None:
    new, old, w, b, shape, win = _bind(name, in_place)
    res = CASES[name][6]
    ys = _y_shape(win, shape, w)
    arenas = [[_cl(_f32(*shape)) for _ in range(2)] for _ in range(2)]  # [new, old] x 2 buffers
    outs = [[onednn.empty_channels_last(ys) for _ in range(2)] for _ in range(2)]
    rs = [[onednn.empty_channels_last(ys) for _ in range(2)] for _ in range(2)]
    for step in range(10):
        xv, rv = _f32(*shape), _f32(*ys)
        got = []
        for j, k in enumerate((new, old)):
            x = arenas[j][step % 2]
            x[...] = xv
            r = rs[j][(step // 3) % 2]
            r[...] = rv
            mode = step % 4
            ins = [x, w, b, r] if res else [x, w, b]
            if mode == 0 and res:
                k(ins, {}, [r])  # in place over the residual
                got.append(r.copy())
            elif mode == 1:
                o = outs[j][step % 2]
                o[...] = np.nan
                k(ins, {}, [o])
                got.append(o.copy())
            elif mode == 2:
                y = k(ins, {})[0]
                got.append(np.array(y))
            else:  # NCHW input / residual views and float64
                xin = np.ascontiguousarray(xv).astype(np.float64)
                ins2 = [xin, w, b, np.ascontiguousarray(rv)] if res else [xin, w, b]
                o = outs[j][0]
                k(ins2, {}, [o])
                got.append(o.copy())
        np.testing.assert_allclose(got[0], got[1], err_msg=f"step {step}", **TOL)


def test_reused_ids_and_many_buffers() -> None:
    """New arrays every call (ids reused once the old die), more than 64 buffer triples."""
    new, old, w, b, shape, win = _bind("3x3_res")
    ys = _y_shape(win, shape, w)
    for step in range(150):
        xv, rv = _f32(*shape), _f32(*ys)
        got = []
        for k in (new, old):
            x, r, o = _cl(xv), _cl(rv), onednn.empty_channels_last(ys)
            if step % 2:
                k([x, w, b, r], {}, [r])
                got.append(r.copy())
            else:
                k([x, w, b, r], {}, [o])
                got.append(o.copy())
            del x, r, o
            gc.collect() if step % 37 == 0 else None
        np.testing.assert_allclose(got[0], got[1], err_msg=f"step {step}", **TOL)


def test_residual_overlapping_input_and_strided_views() -> None:
    new, old, w, b, shape, win = _bind("3x3_res")
    ys = _y_shape(win, shape, w)
    for _ in range(6):
        xv, bv = _f32(*shape), _f32(1, 16, 24, 24)
        got = []
        for k in (new, old):
            x = _cl(xv)
            # residual = the input itself (same shape here): overlaps x
            o = onednn.empty_channels_last(ys)
            k([x, w, b, x], {}, [o])
            a = o.copy()
            # out = residual = x: output over the input
            x2 = _cl(xv)
            k([x2, w, b, x2], {}, [x2])
            big = onednn.empty_channels_last((1, 16, 24, 24))
            big[...] = bv
            xv2 = big[:, :, ::2, ::2]  # strided view
            o2 = onednn.empty_channels_last(ys)
            k([xv2, w, b, np.asarray(xv2)], {}, [o2])
            got.append((a, x2.copy(), o2.copy()))
        for g0, g1 in zip(*got):
            np.testing.assert_allclose(g0, g1, **TOL)


def test_float16_input_and_wrong_output_shape() -> None:
    new, old, w, b, shape, win = _bind("3x3")
    ys = _y_shape(win, shape, w)
    xv = _f32(*shape)
    a = new([xv.astype(np.float16), w, b], {})[0]
    c = old([xv.astype(np.float16), w, b], {})[0]
    np.testing.assert_allclose(a, c, **TOL)
    bad = np.empty((1, ys[1], ys[2] + 1, ys[3]), np.float32)
    for k in (new, old):
        with pytest.raises(OperandError, match=r"bound for \[1, 16, 12, 12\].*given is \[1, 16, 13, 12\]"):
            k([_cl(xv), w, b], {}, [bad])
        with pytest.raises(OperandError, match=r"bound for \[1, 16, 12, 12\].*given is \[1, 16, 13, 12\]"):
            k([xv, w, b], {}, [bad])  # NCHW x: the run path


def test_missing_residual_fails_alike() -> None:
    new, old, w, b, shape, _ = _bind("3x3_res")
    x = _cl(_f32(*shape))
    errs = []
    for k in (new, old):
        with pytest.raises(Exception) as e:
            k([x, w, b], {})
        errs.append(type(e.value))
    assert errs[0] is errs[1]


def test_threads_share_one_kernel() -> None:
    from tests.adversarial.threads import run_threads

    new, old, w, b, shape, win = _bind("3x3_res")
    ys = _y_shape(win, shape, w)
    xvs = [_f32(*shape) for _ in range(4)]
    rvs = [_f32(*ys) for _ in range(4)]
    wants = []
    for i in range(4):
        o = onednn.empty_channels_last(ys)
        old([_cl(xvs[i]), w, b, _cl(rvs[i])], {}, [o])
        wants.append(o)
    bad: list[int] = []

    def work(i: int) -> None:
        x, r, o = _cl(xvs[i]), onednn.empty_channels_last(ys), onednn.empty_channels_last(ys)
        for step in range(60):
            r[...] = rvs[i]
            if step % 2:
                new([x, w, b, r], {}, [r])
                if not np.allclose(r, wants[i], **TOL):
                    bad.append(i)
            else:
                new([x, w, b, r], {}, [o])
                if not np.allclose(o, wants[i], **TOL):
                    bad.append(i)

    run_threads(work, 4, 60)
    assert not bad


_FORK_CHILD = r"""
import os, signal, sys, threading
import numpy as np
from pycann.kernels.providers import omp_fork, onednn
from pycann.ops.nn.conv import conv_window
rng = np.random.default_rng(1)
w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
b = rng.standard_normal(16).astype(np.float32)
shape = (1, 16, 12, 12)
win = conv_window(shape, w.shape, {"pads": [1, 1, 1, 1]})
k = onednn.bound_conv_nhwc(w, b, 1, win, shape, None, True)
x = onednn.empty_channels_last(shape); x[...] = rng.standard_normal(shape)
r = onednn.empty_channels_last(shape); r[...] = rng.standard_normal(shape)
o = onednn.empty_channels_last(shape)
k([x, w, b, r], {}, [o]); want = o.copy()
k([x, w, b, r], {}, [o])
x_nchw = np.ascontiguousarray(x)
p = [c.cell_contents.plan for c in k.run.__closure__ if type(c.cell_contents).__name__ == "BoundConv"][0]
held, go = threading.Event(), threading.Event()
def hold():
    with p.lock:  # another thread inside a run of this conv at the fork
        held.set(); go.wait()
t = threading.Thread(target=hold); t.start(); held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(30)
    outs = [onednn.empty_channels_last(shape) for _ in range(3)]
    rr = r.copy()
    def body():
        k([x, w, b, r], {}, [o])  # the fast path (buffers verified before the fork)
        k([x, w, b, r], {}, [outs[0]])  # the slow path
        k([x_nchw, w, b, r], {}, [outs[1]])  # NCHW input: Plan.run
        k([x, w, b, rr], {}, [rr])  # in place over the residual
        return [o, *outs[:2], rr]
    got = omp_fork.run_fresh(body) if omp_fork.stale() else body()
    os._exit(0 if all(np.allclose(g, want, rtol=1e-4, atol=1e-4) for g in got) else 3)
go.set(); t.join()
_, st = os.waitpid(pid, 0)
print("STATUS", st)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_forked_child_runs_a_conv_whose_lock_a_parent_thread_held(tmp_path: Any) -> None:
    """A thread of the parent inside a run of the bound conv (its plan's lock held) at an os.fork: that
    thread is not in the child, whose runs of the conv waited for the lock for ever."""
    import subprocess
    import sys

    script = tmp_path / "child.py"
    script.write_text(_FORK_CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert "STATUS 0" in out.stdout, (out.stdout, out.stderr[-2000:])


# ------------------------------------------------------------------ whole models vs ONNX Runtime


def _cnn(dynamic: bool, batch: int = 1) -> Any:
    """Stem (3 channels, stride 2), residual blocks (ReLU / Clip / HardSwish), depthwise, dilation,
    group conv, a 1x1 projection with its residual, biasless convs."""
    from onnx import TensorProto, helper, numpy_helper

    inits: list[Any] = []
    nodes: list[Any] = []
    n = [0]

    def name(p: str) -> str:
        n[0] += 1
        return f"{p}{n[0]}"

    def conv(x: str, cin: int, cout: int, k: int, group: int = 1, stride: int = 1, dil: int = 1,
             bias: bool = True) -> str:
        w, y = name("w"), name("c")
        inits.append(numpy_helper.from_array(_f32(cout, cin // group, k, k, scale=(2.0 / (cin // group * k * k)) ** 0.5), w))
        ins = [x, w]
        if bias:
            ins.append(name("b"))
            inits.append(numpy_helper.from_array(_f32(cout, scale=0.1), ins[-1]))
        pad = dil * (k - 1) // 2
        nodes.append(helper.make_node("Conv", ins, [y], group=group, strides=[stride, stride], dilations=[dil, dil],
                                      pads=[pad] * 4))
        return y

    def act(x: str, kind: str) -> str:
        y = name("a")
        if kind == "Clip":
            lo, hi = name("lo"), name("hi")
            inits.extend([numpy_helper.from_array(np.array(0, np.float32), lo),
                          numpy_helper.from_array(np.array(6, np.float32), hi)])
            nodes.append(helper.make_node("Clip", [x, lo, hi], [y]))
        else:
            nodes.append(helper.make_node(kind, [x], [y]))
        return y

    def add(a: str, b: str) -> str:
        y = name("s")
        nodes.append(helper.make_node("Add", [a, b], [y]))
        return y

    h = act(conv("x", 3, 16, 3, stride=2), "Relu")
    for kind, dil in (("Relu", 1), ("Clip", 2), ("HardSwish", 1)):
        t = act(conv(h, 16, 16, 3, dil=dil), kind)
        h = act(add(conv(t, 16, 16, 3, bias=kind != "Clip"), h), "Relu")
    d = act(conv(h, 16, 16, 3, group=16, stride=2), "Clip")  # depthwise, stride 2
    g = act(conv(d, 16, 32, 3, group=4), "HardSwish")  # group conv
    p = add(conv(g, 32, 32, 1, bias=False), conv(d, 16, 32, 1))  # projection shortcut
    y = act(p, "Relu")
    hw: list[Any] = ["H", "W"] if dynamic else [20, 24]
    x_vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, *hw])
    y_vi = helper.make_tensor_value_info(y, TensorProto.FLOAT, None)
    g_ = helper.make_graph(nodes, "cnn", [x_vi], [y_vi], inits)
    return helper.make_model(g_, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("dynamic", [False, True])
def test_small_cnn_repeated_and_interleaved_vs_ort(dynamic: bool) -> None:
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.run.model import LoadedModel
    from tests.ops.oracle import run_ort

    m = _cnn(dynamic)
    lm = LoadedModel.from_compiled(compile_model(m))
    shapes = [(20, 24), (17, 31), (20, 24), (32, 32), (17, 31)] if dynamic else [(20, 24)] * 4
    feeds = [_f32(1, 3, *s) for s in shapes]
    wants = [run_ort(m, {"x": x})[0] for x in feeds]
    for rnd in range(3):
        for i, (x, want) in enumerate(zip(feeds, wants)):
            xin = x if (rnd + i) % 2 else np.asfortranarray(x)  # another layout of the graph input
            got = lm.run_dict({"x": xin})[0]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"round {rnd} feed {i}")


def test_small_cnn_threads_vs_ort() -> None:
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.run.model import LoadedModel
    from tests.adversarial.threads import mismatches_from_threads

    m = _cnn(True)
    lm = LoadedModel.from_compiled(compile_model(m))
    feeds = [{"x": _f32(1, 3, *s)} for s in ((20, 24), (17, 31), (20, 24), (24, 16))]
    assert mismatches_from_threads(lm, m, feeds, threads=4, rounds=10) == [0, 0, 0, 0]


def _fork_beside_runs(setup: str, forks: int, alarm: int, atol: float) -> str:
    """A script: ``setup`` makes ``lm`` (a loaded model) and ``x``; a thread runs it in a loop while the
    process forks ``forks`` times; each child must run it right within ``alarm`` s; prints "BAD <n>"."""
    return setup + f"""
want = lm.run([x])[0]
stop = threading.Event()
def spin():
    while not stop.is_set():
        lm.run([x])
t = threading.Thread(target=spin); t.start()
bad = 0
for i in range({forks}):
    pid = os.fork()
    if pid == 0:
        signal.alarm({alarm})
        os._exit(0 if all(np.allclose(lm.run([x])[0], want, atol={atol}) for _ in range(3)) else 3)
    bad += os.waitpid(pid, 0)[1] != 0
stop.set(); t.join()
print("BAD", bad)
"""


_MODEL_FORK = _fork_beside_runs(r"""
import os, signal, sys, threading
import numpy as np
sys.path.insert(0, sys.argv[1])
from tests.adversarial.test_bound_conv_adversarial import _cnn, _f32
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
lm = LoadedModel.from_compiled(compile_model(_cnn(False)))
x = _f32(1, 3, 20, 24)
""", 8, 15, 1e-4)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_forked_children_of_a_process_running_the_model_in_a_thread(tmp_path: Any) -> None:
    """os.fork while another thread runs the model (as multiprocessing's fork start method does): the
    children ran the model's convs hung on the plan locks that thread held (most of 30 forks)."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "forks.py"
    script.write_text(_MODEL_FORK)
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, *sys.path]))
    out = subprocess.run([sys.executable, str(script), root], capture_output=True, text=True, timeout=300, env=env)
    assert "BAD 0" in out.stdout, (out.stdout, out.stderr[-2000:])


_POOL_MATMUL_FORK = _fork_beside_runs(r"""
import os, signal, sys, threading, numpy as np
from onnx import TensorProto, helper, numpy_helper
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
rng = np.random.default_rng(0)
W = numpy_helper.from_array(rng.standard_normal((256, 256)).astype(np.float32), "W")
nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
         helper.make_node("Reshape", ["p", "shp"], ["f"]),
         helper.make_node("MatMul", ["f", "W"], ["y"])]
shp = numpy_helper.from_array(np.array([-1, 256], np.int64), "shp")
g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 32, 32])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [W, shp])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
lm = LoadedModel.from_compiled(compile_model(m))
x = rng.standard_normal((1, 64, 32, 32)).astype(np.float32)
""", 4, 8, 1e-3)


_CHAIN_NORM_ATTENTION_FORK = _fork_beside_runs(r"""
import os, signal, sys, threading, numpy as np
from onnx import TensorProto, helper, numpy_helper
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
rng = np.random.default_rng(0)
init = [numpy_helper.from_array(rng.standard_normal((1, 64, 1, 1)).astype(np.float32), "c"),
        numpy_helper.from_array(rng.standard_normal((256,)).astype(np.float32), "g"),
        numpy_helper.from_array(rng.standard_normal((256,)).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([1, 8, 64, 256], np.int64), "shp"),
        numpy_helper.from_array(np.array(0.125, np.float32), "sc")]
nodes = [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Mul", ["a", "c"], ["m"]),
         helper.make_node("Relu", ["m"], ["r"]), helper.make_node("Concat", ["x", "r"], ["cat"], axis=1),
         helper.make_node("Reshape", ["cat", "shp"], ["q"]),
         helper.make_node("LayerNormalization", ["q", "g", "b"], ["ln"], axis=-1),
         helper.make_node("Transpose", ["ln"], ["kt"], perm=[0, 1, 3, 2]),
         helper.make_node("MatMul", ["ln", "kt"], ["s0"]), helper.make_node("Mul", ["s0", "sc"], ["s1"]),
         helper.make_node("Softmax", ["s1"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "ln"], ["y"])]
g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 32, 32])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], init)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
lm = LoadedModel.from_compiled(compile_model(m))
x = rng.standard_normal((1, 64, 32, 32)).astype(np.float32)
""", 6, 8, 1e-3)


def _run_fork_script(tmp_path: Any, text: str) -> None:
    import subprocess
    import sys

    script = tmp_path / "forks.py"
    script.write_text(text)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert "BAD 0" in out.stdout, (out.stdout, out.stderr[-2000:])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_forked_children_of_a_process_running_pool_and_matmul_in_a_thread(tmp_path: Any) -> None:
    """The same with MaxPool and MatMul: their plans' locks, held by the running thread at the fork,
    hung 6-8 of 8 children before the kernels' locks were ``omp_fork.fork_safe`` (released in the child)."""
    _run_fork_script(tmp_path, _POOL_MATMUL_FORK)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_forked_children_of_a_process_running_chain_norm_attention_in_a_thread(tmp_path: Any) -> None:
    """An elementwise chain, a concat, LayerNormalization and a fused attention (oneDNN's binary,
    layer-norm and matmul / softmax primitives, each with its lock) beside a fork: every child runs
    the model right (values as the parent's)."""
    _run_fork_script(tmp_path, _CHAIN_NORM_ATTENTION_FORK)

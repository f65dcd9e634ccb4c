"""Every native-backed kernel fed operands that do not fit what its primitive reads or writes
(issue 14 item 1): a clear pycann error (``OperandError``, a ``KernelError``) or a fallback to the
generic kernel, never a segfault, heap garbage or a raw numpy traceback.

The cases run in one child process (a segfault there fails the test instead of killing pytest);
each prints ``case<TAB>outcome<TAB>message``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pycann.kernels import providers

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import sys, traceback
import numpy as np
from pycann.errors import PycannError
from pycann.ops.nn.spatial import Window
from pycann.kernels.providers import onednn, onednn_matmul, onednn_norm, onednn_softmax, onednn_attention, onednn_pool
from pycann.kernels.providers import onednn_concat, onednn_binary

rng = np.random.default_rng(0)
f = lambda *s: rng.standard_normal(s).astype(np.float32)
win = Window((3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (8, 8))

def conv_bound(residual=False):
    return onednn.bound_conv_nhwc(f(64, 16, 3, 3), f(64), 1, win, (1, 16, 8, 8), None, residual)

def cl(*s):
    a = onednn.empty_channels_last(s); a[...] = rng.standard_normal(s); return a

CASES = {
    "conv_short_bias": lambda: onednn.conv_nhwc(f(1, 16, 8, 8), f(64, 16, 3, 3), f(1), 1, win),
    "conv_long_bias": lambda: onednn.conv_nhwc(f(1, 16, 8, 8), f(64, 16, 3, 3), f(65), 1, win),
    "conv_2d_bias": lambda: onednn.conv_nhwc(f(1, 16, 8, 8), f(64, 16, 3, 3), f(64, 1), 1, win),
    "deconv_short_bias": lambda: onednn.conv_transpose_nhwc(
        f(1, 16, 8, 8), f(16, 32, 2, 2), f(3), 1, Window((2, 2), (2, 2), (1, 1), (0, 0), (0, 0), (8, 8)), (16, 16)),
    "bound_conv_batch_2": lambda: conv_bound()([cl(2, 16, 8, 8), None, None], {}),
    "bound_conv_other_width": lambda: conv_bound()([cl(1, 16, 8, 9), None, None], {}),
    "bound_conv_residual_shape": lambda: conv_bound(True)([cl(1, 16, 8, 8), None, None, cl(1, 64, 4, 4)], {}),
    "bound_conv_out_shape": lambda: conv_bound()([cl(1, 16, 8, 8), None, None], {}, [cl(1, 32, 8, 8)]),
    "bound_matmul_rows": lambda: onednn_matmul.bound_matmul(f(256, 512), f(512), (64, 256), None)([f(63, 256)], {}),
    "bound_matmul_depth": lambda: onednn_matmul.bound_matmul(f(256, 512), None, (64, 256), None)([f(64, 255)], {}),
    "bound_layernorm": lambda: onednn_norm.bound_layer_norm((64, 768), 768, f(768), f(768), 1e-5)([f(64, 767)], {}),
    "bound_layernorm_scale": lambda: onednn_norm.bound_layer_norm((64, 768), 768, f(767), f(768), 1e-5),
    "bound_softmax": lambda: onednn_softmax.bound_softmax((64, 1024), None)([f(64, 1000)], {}),
    "bound_attention": lambda: onednn_attention.bound_attention(
        (2, 64, 32), (2, 32, 64), (2, 64, 32), None, 0.125)([f(2, 64, 31), f(2, 32, 64), f(2, 64, 32)], {}),
    "bound_attention_mask": lambda: onednn_attention.bound_attention(
        (2, 64, 32), (2, 32, 64), (2, 64, 32), (1, 64, 64), 0.125)(
        [f(2, 64, 32), f(2, 32, 64), f(2, 64, 32), f(1, 1, 64)], {}),
    "pool_run_wrong_input": lambda: onednn_pool.bound_pool(
        "max", (1, 16, 32, 32), (1, 16, 16, 16), False, (2, 2), (2, 2), (1, 1), (0, 0), (0, 0)).run(
        f(1, 16, 32, 31), f(1, 16, 16, 16)),
    "pool_wrong_input": lambda: onednn_pool.bound_pool(
        "max", (1, 16, 32, 32), (1, 16, 16, 16), False, (2, 2), (2, 2), (1, 1), (0, 0), (0, 0)).pool(f(1, 16, 32, 31)),
}
only = sys.argv[1:] or list(CASES)
for name in only:
    try:
        r = CASES[name]()
        if r is None or (isinstance(r, list) and r and r[0] is None):
            print(f"{name}\tfallback\t-", flush=True)
        else:
            print(f"{name}\tran\t{type(r).__name__}", flush=True)
    except PycannError as e:
        print(f"{name}\tpycann:{type(e).__name__}\t{str(e).splitlines()[0]}", flush=True)
    except Exception as e:
        print(f"{name}\traw:{type(e).__name__}\t{str(e).splitlines()[0] if str(e) else ''}", flush=True)
'''

# case -> what must come out: a pycann error whose message contains the text, or "fallback"
# (the bound kernel declines: the caller runs its generic kernel).
EXPECT = {
    "conv_short_bias": "conv bias B",
    "conv_long_bias": "conv bias B",
    "conv_2d_bias": "conv bias B",
    "deconv_short_bias": "ConvTranspose bias B",  # (kernel == stride: the patch GEMM, onednn_pointwise)
    "bound_conv_batch_2": "conv input X",
    "bound_conv_other_width": "conv input X",
    "bound_conv_residual_shape": "residual",
    "bound_conv_out_shape": "conv output Y",
    "bound_matmul_rows": "MatMul input A",
    "bound_matmul_depth": "MatMul input A",
    "bound_layernorm": "LayerNormalization input X",
    "bound_layernorm_scale": "fallback",  # constants of the wrong size: not bound (generic kernel)
    "bound_softmax": "Softmax input X",
    "bound_attention": "FusedAttention",
    "bound_attention_mask": "FusedAttention mask",
    "pool_run_wrong_input": "pooling input X",
    "pool_wrong_input": "fallback",
}


@pytest.fixture(scope="module")
def outcomes() -> dict[str, tuple[str, str]]:
    if not providers.available("onednn"):
        pytest.skip("the onednn provider is not available")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env,
                          cwd=str(ROOT))
    lines = [ln.split("\t") for ln in proc.stdout.splitlines() if ln.count("\t") == 2]
    got = {n: (o, m) for n, o, m in lines}
    assert proc.returncode == 0, (f"the child died (rc {proc.returncode}) after {list(got)[-1:]}: "
                                  f"{proc.stderr[-2000:]}")
    return got


@pytest.mark.parametrize("case", sorted(EXPECT))
def test_native_kernel_refuses_mismatched_operands(case: str, outcomes: dict[str, tuple[str, str]]) -> None:
    outcome, message = outcomes[case]
    want = EXPECT[case]
    if want == "fallback":
        assert outcome == "fallback", (outcome, message)
    else:
        assert outcome == "pycann:OperandError", (outcome, message)
        assert want in message, message
        assert "expected" in message or "does not broadcast" in message or "given is" in message \
            or "got" in message, message

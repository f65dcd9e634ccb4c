"""float32 models compute in float32 even when the process sets ``ONEDNN_DEFAULT_FPMATH_MODE``.

Intel advises ``ONEDNN_DEFAULT_FPMATH_MODE=BF16`` to let PyTorch use AMX for float32 work; oneDNN
reads it process-wide, and before ``onednn_capi.load`` pinned the strict mode, pycann's float32
convolutions and matmuls on an AMX CPU ran with bf16 operands (max error 1e-2 on a 768-deep
product, 0.1 on a batched MatMul, where ONNX Runtime's is ~3e-6)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pycann.kernels.providers import onednn_bf16

SCRIPT = textwrap.dedent("""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.compile.options import CompileOptions
    from pycann.ge.run.model import LoadedModel
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((768, 512)) / 28).astype(np.float32)
    k = (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["y"]), helper.make_node("Conv", ["x", "k"], ["z"], pads=[1] * 4),
         helper.make_node("MatMul", ["b", "c"], ["u"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [128, 768]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 28, 28]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [12, 128, 64]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, [12, 64, 128])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z", "u")],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(k, "k")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"a": rng.standard_normal((128, 768)).astype(np.float32),
             "x": rng.standard_normal((1, 64, 28, 28)).astype(np.float32),
             "b": rng.standard_normal((12, 128, 64)).astype(np.float32),
             "c": rng.standard_normal((12, 64, 128)).astype(np.float32)}
    y, z, u = LoadedModel.from_compiled(compile_model(m, CompileOptions(soc_version="CPU"))).run_dict(feeds)
    a64 = feeds["a"].astype(np.float64)
    xp = np.pad(feeds["x"][0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[:, i:i + 28, j:j + 28] for i in range(3) for j in range(3)], 1)  # (64, 9, 28, 28)
    z64 = np.einsum("mcij,cijhw->mhw", k.astype(np.float64).reshape(64, 64, 3, 3),
                    cols.reshape(64, 3, 3, 28, 28))
    errs = [np.abs(y - a64 @ w).max(), np.abs(z[0] - z64).max(),
            np.abs(u - feeds["b"].astype(np.float64) @ feeds["c"]).max()]
    print(" ".join(f"{e:.3g}" for e in errs))
""")


@pytest.mark.skipif(not onednn_bf16.native(), reason="oneDNN ignores the bf16 fpmath mode without bf16 hardware")
def test_float32_ignores_a_bf16_default_fpmath_mode() -> None:
    env = dict(os.environ, ONEDNN_DEFAULT_FPMATH_MODE="BF16")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=root, timeout=300)
    assert out.returncode == 0, out.stderr
    errs = [float(e) for e in out.stdout.split()]
    assert len(errs) == 3 and max(errs) < 1e-4, out.stdout

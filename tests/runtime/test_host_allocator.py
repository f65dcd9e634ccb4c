"""The CPU device's host allocator policy (pycann/runtime/host_allocator.py), in fresh processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent("""
    import ctypes, sys
    from pycann.runtime import host_allocator as h
    first = h.keep_freed_memory()
    print(first, h.keep_freed_memory())
""")


def _run(env_extra: dict[str, str]) -> str:
    env = {**os.environ, **env_extra}
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, check=True)
    return out.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_policy_applies_once_and_can_be_turned_off() -> None:
    assert _run({"PYCANN_KEEP_FREED_MEMORY": "1"}) == "True True"  # glibc accepts both settings; idempotent
    assert _run({"PYCANN_KEEP_FREED_MEMORY": "0"}) == "False False"


def test_loading_a_conv_model_with_onednn_does_not_import_torch(tmp_path: object) -> None:
    """With the oneDNN C-API provider present, convs never pull in torch (~180 MB of RSS)."""
    from pycann.kernels import providers

    providers.reset()
    if not providers.available("onednn"):
        pytest.skip("onednn-cpu-gomp not installed")
    script = textwrap.dedent("""
        import sys, numpy as np, onnx
        from onnx import helper, TensorProto, numpy_helper
        import pycann
        w = np.random.default_rng(0).standard_normal((32, 16, 3, 3)).astype(np.float32)
        w2 = np.random.default_rng(1).standard_normal((2, 32, 1, 1)).astype(np.float32)
        # a big conv (oneDNN) and a tiny one (numpy): the one-pool rule looks for alternatives,
        # which must not probe (import) torch
        g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                               helper.make_node("Conv", ["c", "w2"], ["y"], strides=[8, 8])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2, "w2")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        from pycann.ge.compile.compiler import compile_model
        from pycann.ge.run.model import LoadedModel
        cm = compile_model(m)
        algos = [str(n.attrs.get("_algo")) for n in cm.graph.nodes]
        LoadedModel.from_compiled(cm).run([np.ones((1, 16, 32, 32), np.float32)])
        print(algos, "torch" in sys.modules)
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYCANN_PROVIDERS"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "['onednn:conv_nhwc', 'onednn:conv_nhwc'] False", out.stdout + out.stderr

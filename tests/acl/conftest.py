"""Fixtures for the pyACL facade tests: compiled models (.om) and an initialised acl."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pycann
import pycann.acl as acl
from pycann.acl import _state

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

W = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)


def small_onnx(batch: str | int = 2) -> onnx.ModelProto:
    """y = relu(x @ W) [N,3], z = y * 2 [N,3]; x float32 [N,4]."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"]),
             helper.make_node("Mul", ["y", "two"], ["z"])]
    g = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, 3])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def small_ref(x: np.ndarray) -> list[np.ndarray]:
    y = np.maximum(x @ W, 0)
    return [y, y * 2]


@pytest.fixture(scope="session")
def small_om(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Static model: x [2,4] -> y, z [2,3]."""
    p = tmp_path_factory.mktemp("om") / "small.om"
    pycann.compile_model(small_onnx(2)).save(p)
    return p


@pytest.fixture(scope="session")
def dyn_om(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dynamic batch 1~8: x [-1,4] -> y, z [-1,3]."""
    p = tmp_path_factory.mktemp("om") / "dyn.om"
    pycann.compile_model(small_onnx("N"), pycann.CompileOptions(input_shape={"x": [(1, 8), 4]})).save(p)
    return p


@pytest.fixture(scope="session")
def cls_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(onnx, om) of the real PP-OCR mobile v2 direction classifier, static x [1,3,48,192]."""
    from scripts.model_zoo import MODELS

    spec = MODELS["rapidocr_ppocr_mobile_v2_cls"]
    try:
        src = spec.path if spec.path.exists() else spec.ensure()
    except Exception as e:  # noqa: BLE001 - offline machine
        pytest.skip(f"model not available: {e}")
    om = tmp_path_factory.mktemp("om") / "cls.om"
    pycann.compile_model(str(src), pycann.CompileOptions(input_shape={"x": [1, 3, 48, 192]})).save(om)
    return Path(src), om


def force_finalize() -> None:
    if _state.initialized:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            acl.finalize()


@pytest.fixture()
def acl_ready() -> Iterator[int]:
    """acl.init + set_device(0) + create_context; yields the context. Teardown finalizes."""
    force_finalize()
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    ctx, ret = acl.rt.create_context(0)
    assert ret == 0
    yield ctx
    force_finalize()


@pytest.fixture()
def no_acl() -> Iterator[None]:
    """A test that must start (and end) without acl initialised."""
    force_finalize()
    yield
    force_finalize()

"""Misleading or silent results of the pyACL facade and InferSession, each now a documented code
or a message that names the real problem (issue 14)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import pycann
import pycann.acl as acl
from pycann.acl import constants as C
from pycann.errors import InputError
from tests.acl.conftest import small_ref


def test_malloc_size_zero_logs_the_reason(acl_ready: int, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="pycann.acl"):
        assert acl.rt.malloc(0, C.ACL_MEM_MALLOC_HUGE_FIRST) == (0, C.ACL_ERROR_INVALID_PARAM)
    rec = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert rec and "acl.rt.malloc" in rec[-1].getMessage() and "size must be > 0, not 0" in rec[-1].getMessage()


def test_memory_calls_in_a_thread_without_context(acl_ready: int) -> None:
    ptr, ret = acl.rt.malloc(64, C.ACL_MEM_MALLOC_HUGE_FIRST)
    host, ret2 = acl.rt.malloc_host(64)
    assert ret == ret2 == 0
    got: dict[str, Any] = {}

    def worker() -> None:
        got["memcpy"] = acl.rt.memcpy(ptr, 64, host, 64, C.ACL_MEMCPY_HOST_TO_DEVICE)
        got["free"] = acl.rt.free(ptr)
        got["set"] = acl.rt.set_context(acl_ready)
        got["memcpy_after"] = acl.rt.memcpy(ptr, 64, host, 64, C.ACL_MEMCPY_HOST_TO_DEVICE)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert got == {"memcpy": C.ACL_ERROR_RT_CONTEXT_NULL, "free": C.ACL_ERROR_RT_CONTEXT_NULL, "set": 0,
                   "memcpy_after": 0}
    assert acl.rt.free(ptr) == 0  # the failed free in the thread freed nothing
    assert acl.rt.free_host(host) == 0


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "g",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "ab"],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    p = tmp_path_factory.mktemp("om") / "two.om"
    pycann.compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])).save(p)
    return p


def test_session_feeds(small_om: Path, two_inputs: Path) -> None:
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    sess = pycann.InferSession(0, str(small_om))
    want = small_ref(x)
    for got in (sess.infer(x), sess.run({"x": x}), sess.run(None, {"x": x}), sess.infer([x])):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)
    two = pycann.InferSession(0, str(two_inputs))
    a = np.ones((2, 3), np.float32)
    with pytest.raises(InputError, match=r"a single array was given, but the model has 2 inputs \(a, b\)"):
        two.infer(a)
    np.testing.assert_array_equal(two.run({"a": a, "b": a})[0], 2 * a)
    # None was "'NoneType' object is not iterable" (a TypeError from list()), a str fed its characters
    for bad in (None, "ab", 3):
        for call in (two.infer, two.run, lambda f: two.infer(f, mode="dymshape")):
            with pytest.raises(InputError, match=r"feeds must be a list of arrays in input order \(a, b\) or a dict by "
                                                 f"name, not {type(bad).__name__}"):
                call(bad)
    np.testing.assert_array_equal(two.infer((a, 3 * a))[0], 4 * a)


def test_infer_bare_array_rank_message_unchanged_for_lists(small_om: Path) -> None:
    sess = pycann.InferSession(0, str(small_om))
    with pytest.raises(InputError, match=r"rank 1, expected 2"):
        sess.infer([np.ones(4, np.float32)])


def test_infer_session_on_a_missing_model_file_says_what_to_give(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong path is the usual first mistake: the error keeps open()'s exception types and names the
    path, the working folder, and that atc's --output=NAME wrote NAME.om."""
    from pycann.acl.session import InferSession

    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"model file not found \(working folder .*; give the path of the "
                                                r"\.om atc wrote, --output=NAME writes NAME\.om, or of an \.onnx\): "
                                                r"'nope\.om'") as e:
        InferSession(0, "nope.om")
    assert e.value.filename == "nope.om"
    with pytest.raises(IsADirectoryError, match=r"model file is a folder"):
        InferSession(0, str(tmp_path))
    with pytest.raises(OSError, match=r"model file is not a regular file"):
        InferSession(0, "/dev/null")



def test_infer_session_device_id_is_checked_by_type_and_against_the_device_count(
        small_om: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """InferSession("0", ...) said "device 0 does not exist: pycann's CPU device is device 0"; a str is
    a TypeError now, and ids are checked against PYCANN_DEVICE_COUNT as acl.rt and torch.npu check them."""
    from pycann.acl.session import InferSession

    monkeypatch.delenv("PYCANN_DEVICE_COUNT", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    with pytest.raises(TypeError, match=r"device_id must be an int .*not str '0'"):
        InferSession("0", str(small_om))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"device 1 does not exist: there are 1 device\(s\), ids 0\.\.0 "
                                         r"\(PYCANN_DEVICE_COUNT sets how many\)"):
        InferSession(1, str(small_om))
    x = np.ones((2, 4), np.float32)
    monkeypatch.setenv("PYCANN_DEVICE_COUNT", "2")
    for dev in (0, np.int64(1)):
        np.testing.assert_allclose(InferSession(dev, str(small_om)).infer([x])[0], small_ref(x)[0], rtol=1e-6)


def test_lazy_packages_keep_their_submodules_as_attributes() -> None:
    """``pycann.acl`` and ``pycann.runtime`` load on first access (a fresh process's import): their
    submodules, public and internal, are still attributes right after the import (docs reach
    ``pycann.acl._state.config``), and an unknown name is an AttributeError naming the package."""
    import subprocess
    import sys

    code = (
        "import sys, pycann.acl as acl, pycann.runtime as rt\n"
        "loaded = 'pycann.acl.mdl' in sys.modules\n"
        "mods = [acl._state, acl.errors, acl.base, acl.session, acl.mdl, rt.device, rt.errors, rt.memory]\n"
        "print(loaded, [m.__name__ for m in mods], acl.init.__module__, rt.Runtime.__module__)\n"
        "try:\n"
        "    acl.nope\n"
        "except AttributeError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    first, err = out.stdout.splitlines()
    assert first == ("False ['pycann.acl._state', 'pycann.acl.errors', 'pycann.acl.base', 'pycann.acl.session', "
                     "'pycann.acl.mdl', 'pycann.runtime.device', 'pycann.runtime.errors', 'pycann.runtime.memory'] "
                     "pycann.acl.base pycann.runtime.device"), out.stdout + out.stderr
    assert err == "module 'pycann.acl' has no attribute 'nope'"
    # the lazy tables and the exported names agree (both are written out: the linters read __all__)
    assert set(acl.__all__) == set(acl._BASE) | set(acl.SUBMODULES)
    assert all(callable(getattr(acl, n)) for n in acl._BASE)


@pytest.mark.parametrize("dt", ["V4", [("a", "<f4")]])
def test_a_feed_of_a_dtype_onnx_lacks_is_an_input_error(dt: object, tmp_path: Path) -> None:
    """A void or structured array (no ONNX type): the input check's InputError, not from_numpy's TypeError."""
    from pycann.errors import InputError
    from pycann.ge.run.model import LoadedModel

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    lm = LoadedModel.from_compiled(pycann.compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])))
    with pytest.raises(InputError, match=r"input 'x': expected dtype float32, received"):
        lm.run([np.zeros((2, 3), dt)])  # type: ignore[call-overload]

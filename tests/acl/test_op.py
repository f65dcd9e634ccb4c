"""acl.op: single-operator execution through pycann's op table."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import pycann.acl as acl
from pycann.acl import constants as C

from .helpers import from_device, to_device


def _desc(dtype: int, dims: list[int]) -> int:
    return acl.create_tensor_desc(dtype, dims, C.ACL_FORMAT_ND)


def _buf(arr: np.ndarray) -> int:
    return acl.create_data_buffer(to_device(arr), arr.nbytes)


def _out(nbytes: int) -> tuple[int, int]:
    dev, _ = acl.rt.malloc(nbytes, 0)
    return dev, acl.create_data_buffer(dev, nbytes)


def test_add_and_attrs(acl_ready: int) -> None:
    s, _ = acl.rt.create_stream()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones((2, 3), np.float32)
    d = _desc(C.ACL_FLOAT, [2, 3])
    dev, ob = _out(24)
    assert acl.op.execute_v2("Add", [d, d], [_buf(a), _buf(b)], [d], [ob], 0, s) == 0
    assert acl.rt.synchronize_stream(s) == 0
    np.testing.assert_array_equal(from_device(dev, (2, 3)), a + b)
    # an attribute: LeakyRelu alpha; execute (the older name) on the default stream
    attr = acl.op.create_attr()
    assert acl.op.set_attr_float(attr, "alpha", 0.5) == 0
    x = np.array([[-2, 2, -4], [4, -6, 6]], np.float32)
    dev2, ob2 = _out(24)
    assert acl.op.execute("LeakyRelu", [d], [_buf(x)], [d], [ob2], attr, 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    np.testing.assert_array_equal(from_device(dev2, (2, 3)), np.where(x > 0, x, 0.5 * x))
    assert acl.op.destroy_attr(attr) is None


def test_set_attr_variants(acl_ready: int) -> None:
    attr = acl.op.create_attr()
    assert acl.op.set_attr_bool(attr, "b", True) == 0
    assert acl.op.set_attr_int(attr, "i", 3) == 0
    assert acl.op.set_attr_string(attr, "s", "x") == 0
    assert acl.op.set_attr_list_bool(attr, "lb", [True, False]) == 0
    assert acl.op.set_attr_list_int(attr, "li", 2, [1, 2]) == 0  # C's (num, values) form
    assert acl.op.set_attr_list_int(attr, "li", 3, [1, 2]) == C.ACL_ERROR_INVALID_PARAM
    assert acl.op.set_attr_list_float(attr, "lf", [0.5]) == 0
    assert acl.op.set_attr_list_string(attr, "ls", ["a"]) == 0
    assert acl.op.set_attr_list_list_int(attr, "lli", [[1, 2], [3]]) == 0
    assert acl.op.set_attr_data_type(attr, "to", C.ACL_FLOAT16) == 0
    assert acl.op.set_attr_list_data_type(attr, "tl", [C.ACL_INT32]) == 0
    assert acl.op.set_attr_data_type(attr, "to", 999) == C.ACL_ERROR_UNSUPPORTED_DATA_TYPE
    assert acl.op.set_attr_int(4242, "i", 1) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    with pytest.raises(TypeError):
        acl.op.set_attr_int(attr, 5, 1)  # type: ignore[arg-type]
    # values that do not parse raise TypeError as pyACL's parser does (these were ACL_ERROR_INTERNAL_ERROR,
    # 500000: an IndexError for no values, float()'s ValueError, iterating an int); the attr keeps its values
    for call in (lambda: acl.op.set_attr_list_int(attr, "li"), lambda: acl.op.set_attr_list_float(attr, "lf", 1, 2, [3]),
                 lambda: acl.op.set_attr_float(attr, "alpha", "x"), lambda: acl.op.set_attr_list_float(attr, "lf", ["a"]),
                 lambda: acl.op.set_attr_list_list_int(attr, "lli", [[1], 2])):
        with pytest.raises(TypeError):
            call()
    values = acl.op._attr(attr).values
    assert values["li"] == [1, 2] and values["lf"] == [0.5] and values["lli"] == [[1, 2], [3]]
    assert acl.op.set_attr_float(attr, "alpha", np.float32(0.25)) == 0 and values["alpha"] == 0.25
    assert acl.op.set_attr_list_float(attr, "lf", 2, [1, np.float64(2.5)]) == 0 and values["lf"] == [1.0, 2.5]


def test_cast_reduce_and_handles(acl_ready: int, tmp_path: Path) -> None:
    assert acl.op.set_model_dir(str(tmp_path)) == 0
    assert acl.op.set_model_dir(str(tmp_path / "nope")) == C.ACL_ERROR_INVALID_FILE
    assert acl.op.load(0, 0) == 0
    x = np.array([1.5, -2.25, 3.0], np.float32)
    dev, ob = _out(6)
    assert acl.op.cast(_desc(C.ACL_FLOAT, [3]), _buf(x), _desc(C.ACL_FLOAT16, [3]), ob, 0, 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    np.testing.assert_array_equal(from_device(dev, (3,), np.float16), x.astype(np.float16))
    # ReduceSum takes axes as an input (latest ONNX semantics); keepdims via an attribute
    m = np.arange(6, dtype=np.float32).reshape(2, 3)
    attr = acl.op.create_attr()
    acl.op.set_attr_int(attr, "keepdims", 0)
    din, dax, dout = _desc(C.ACL_FLOAT, [2, 3]), _desc(C.ACL_INT64, [1]), _desc(C.ACL_FLOAT, [2])
    h, ret = acl.op.create_handle("ReduceSum", [din, dax], [dout], attr)
    assert ret == 0
    dev2, ob2 = _out(8)
    assert acl.op.execute_with_handle(h, [_buf(m), _buf(np.array([1], np.int64))], [ob2], 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    np.testing.assert_array_equal(from_device(dev2, (2,)), m.sum(1))
    assert acl.op.destroy_handle(h) is None
    assert acl.op.execute_with_handle(h, [], [], 0) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.op.create_handle("NoSuchOp", [], [], 0) == (0, C.ACL_ERROR_OP_NOT_FOUND)


def test_op_errors(acl_ready: int) -> None:
    d = _desc(C.ACL_FLOAT, [2, 3])
    a = _buf(np.zeros((2, 3), np.float32))
    _, ob = _out(24)
    assert acl.op.execute_v2("NoSuchOp", [d], [a], [d], [ob], 0, 0) == C.ACL_ERROR_OP_NOT_FOUND
    assert acl.op.execute_v2("If", [d], [a], [d], [ob], 0, 0) == C.ACL_ERROR_OP_NOT_FOUND
    assert acl.op.execute_v2("Add", [d, d], [a], [d], [ob], 0, 0) == C.ACL_ERROR_INVALID_PARAM
    # wrong output desc: found when the op runs, reported by synchronize
    wrong = _desc(C.ACL_INT32, [2, 3])
    assert acl.op.execute_v2("Add", [d, d], [a, a], [wrong], [ob], 0, 0) == 0
    assert acl.rt.synchronize_stream(0) == C.ACL_ERROR_OP_OUTPUT_NOT_MATCH
    mismatch = _desc(C.ACL_FLOAT, [3, 3])
    assert acl.op.execute_v2("Add", [d, mismatch], [a, _buf(np.zeros((3, 3), np.float32))], [d], [ob], 0, 0) == 0
    assert acl.rt.synchronize_stream(0) == C.ACL_ERROR_OP_INPUT_NOT_MATCH
    # buffers are checked at the call, as every asynchronous call checks its arguments (docs/acl.md);
    # these returned 0 and failed at the next synchronize_stream
    host = acl.create_data_buffer(acl.util.numpy_to_ptr(np.zeros((2, 3), np.float32)), 24)
    assert acl.op.execute_v2("Relu", [d], [host], [d], [ob], 0, 0) == C.ACL_ERROR_INVALID_PARAM  # host, not device
    assert "expected device memory" in acl.get_recent_err_msg()
    assert acl.rt.synchronize_stream(0) == 0  # nothing was queued
    hd = _desc(C.ACL_FLOAT, [2, 3])
    assert acl.set_tensor_place_ment(hd, C.ACL_MEMTYPE_HOST) == 0
    assert acl.op.execute_v2("Relu", [hd], [host], [d], [ob], 0, 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    small = acl.create_data_buffer(acl.rt.malloc(8, 0)[0], 8)
    assert acl.op.execute_v2("Relu", [d], [small], [d], [ob], 0, 0) == C.ACL_ERROR_INVALID_PARAM
    assert "buffer of 8 bytes, desc needs 24" in acl.get_recent_err_msg()
    assert acl.op.execute_v2("Relu", [d], [a], [d], [small], 0, 0) == C.ACL_ERROR_INVALID_PARAM  # the output's too
    assert acl.rt.synchronize_stream(0) == 0
    with pytest.raises(TypeError):
        acl.op.execute_v2("Relu", d, [a], [d], [ob], 0, 0)  # type: ignore[arg-type]


def test_a_wrong_input_count_names_the_op_and_the_counts(acl_ready: int) -> None:
    """`execute_v2("Add", [d], [a], ...)`: ACL_ERROR_OP_INPUT_NOT_MATCH at synchronize with "takes 2
    input(s), 1 given" (the kernel's "IndexError: list index out of range" before); a variadic op's
    minimum and an optional input given as too many are named the same way."""
    d = _desc(C.ACL_FLOAT, [2, 3])
    a = _buf(np.ones((2, 3), np.float32))
    dev, ob = _out(24)
    for op, n, takes in (("Add", 1, "takes 2 input(s), 1 given"), ("Gather", 1, "takes 2 input(s), 1 given"),
                         ("Relu", 2, "takes 1 input(s), 2 given"), ("Clip", 4, "takes 1 to 3 input(s), 4 given"),
                         ("Sum", 0, "takes 1 or more input(s), 0 given")):
        assert acl.op.execute_v2(op, [d] * n, [a] * n, [d], [ob], 0, 0) == 0
        assert acl.rt.synchronize_stream(0) == C.ACL_ERROR_OP_INPUT_NOT_MATCH, op
        assert f"{op} (opset" in acl.get_recent_err_msg() and takes in acl.get_recent_err_msg(), acl.get_recent_err_msg()
    assert acl.op.execute_v2("Sum", [d] * 3, [a] * 3, [d], [ob], 0, 0) == 0  # variadic: any count from 1
    assert acl.rt.synchronize_stream(0) == 0
    np.testing.assert_array_equal(from_device(dev, (2, 3)), np.full((2, 3), 3, np.float32))


def test_queued_op_buffers_are_checked_at_the_call(acl_ready: int) -> None:
    """A freed input or output, an output in host memory, a buffer smaller than its desc: the call
    returns the code and nothing runs (they returned 0 and failed at the next synchronize_stream). A
    buffer freed after the call is still reported by synchronize_stream; a valid call gives numpy's values."""
    d = _desc(C.ACL_FLOAT, [2, 3])
    x = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], np.float32)
    a = _buf(x)
    dev, ob = _out(24)
    gone, ret = acl.rt.malloc(24, 0)
    assert ret == 0 and acl.rt.free(gone) == 0
    freed = acl.create_data_buffer(gone, 24)
    for ins, outs in (([freed], [ob]), ([a], [freed])):
        assert acl.op.execute_v2("Relu", [d], ins, [d], outs, 0, 0) == C.ACL_ERROR_INVALID_PARAM
        assert "freed memory" in acl.get_recent_err_msg()
    host_out = acl.create_data_buffer(acl.util.numpy_to_ptr(np.zeros((2, 3), np.float32)), 24)
    assert acl.op.execute_v2("Relu", [d], [a], [d], [host_out], 0, 0) == C.ACL_ERROR_INVALID_PARAM
    h, ret = acl.op.create_handle("Relu", [d], [d], 0)
    assert ret == 0
    assert acl.op.execute_with_handle(h, [freed], [ob], 0) == C.ACL_ERROR_INVALID_PARAM
    assert acl.op.cast(d, freed, d, ob, 0, 0) == C.ACL_ERROR_INVALID_PARAM
    assert acl.rt.synchronize_stream(0) == 0  # nothing was queued
    assert acl.op.execute_with_handle(h, [a], [ob], 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    np.testing.assert_array_equal(from_device(dev, (2, 3)), np.maximum(x, 0))
    # freed between the call and the stream's run: found when it runs
    s, _ = acl.rt.create_stream()
    gate = threading.Event()
    assert acl.rt.launch_callback(lambda _: gate.wait(30), None, C.ACL_CALLBACK_BLOCK, s) == 0
    later, _ = acl.rt.malloc(24, 0)
    assert acl.op.execute_v2("Relu", [d], [a], [d], [acl.create_data_buffer(later, 24)], 0, s) == 0
    assert acl.rt.free(later) == 0
    gate.set()
    assert acl.rt.synchronize_stream(s) == C.ACL_ERROR_INVALID_PARAM
    acl.op.destroy_handle(h)
    assert acl.rt.destroy_stream(s) == 0

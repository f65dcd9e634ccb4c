"""acl.mdl: the canonical pyACL flow on a real model vs ONNX Runtime, every model/dataset call
and its error codes."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import pycann.acl as acl
from pycann.acl import constants as C
from tests.ops.oracle import run_ort

from .conftest import small_ref
from .helpers import dataset_of, from_device, to_device


def canonical_app(om: str, x: np.ndarray) -> list[np.ndarray]:
    """cann-interfaces.md §1.10, exactly as the samples write it."""
    ret = acl.init()
    assert ret == 0
    ret = acl.rt.set_device(0)
    context, ret = acl.rt.create_context(0)
    stream, ret = acl.rt.create_stream()
    model_id, ret = acl.mdl.load_from_file(om)
    assert ret == 0
    model_desc = acl.mdl.create_desc()
    ret = acl.mdl.get_desc(model_desc, model_id)
    input_dataset = acl.mdl.create_dataset()
    in_ptrs = []
    for i in range(acl.mdl.get_num_inputs(model_desc)):
        size = acl.mdl.get_input_size_by_index(model_desc, i)
        assert size == x.nbytes
        dev, ret = acl.rt.malloc(size, C.ACL_MEM_MALLOC_HUGE_FIRST)
        bytes_data = x.tobytes()
        ptr = acl.util.bytes_to_ptr(bytes_data)
        ret = acl.rt.memcpy(dev, size, ptr, len(bytes_data), C.ACL_MEMCPY_HOST_TO_DEVICE)
        buf = acl.create_data_buffer(dev, size)
        _, ret = acl.mdl.add_dataset_buffer(input_dataset, buf)
        in_ptrs.append((dev, buf))
    output_dataset = acl.mdl.create_dataset()
    out_ptrs = []
    for i in range(acl.mdl.get_num_outputs(model_desc)):
        size = acl.mdl.get_output_size_by_index(model_desc, i)
        dev, ret = acl.rt.malloc(size, C.ACL_MEM_MALLOC_HUGE_FIRST)
        buf = acl.create_data_buffer(dev, size)
        _, ret = acl.mdl.add_dataset_buffer(output_dataset, buf)
        out_ptrs.append((dev, buf, size))
    ret = acl.mdl.execute(model_id, input_dataset, output_dataset)
    assert ret == 0, acl.get_recent_err_msg()
    results = []
    for i, (dev, _, size) in enumerate(out_ptrs):
        dims, ret = acl.mdl.get_cur_output_dims(model_desc, i)
        host, ret = acl.rt.malloc_host(size)
        ret = acl.rt.memcpy(host, size, dev, size, C.ACL_MEMCPY_DEVICE_TO_HOST)
        data = acl.util.ptr_to_bytes(host, size)
        results.append(np.frombuffer(data, dtype=np.float32).reshape(dims["dims"]).copy())
        acl.rt.free_host(host)
    for dev, buf in in_ptrs:
        acl.destroy_data_buffer(buf)
        acl.rt.free(dev)
    for dev, buf, _ in out_ptrs:
        acl.destroy_data_buffer(buf)
        acl.rt.free(dev)
    acl.mdl.destroy_dataset(input_dataset)
    acl.mdl.destroy_dataset(output_dataset)
    assert acl.mdl.unload(model_id) == 0
    assert acl.mdl.destroy_desc(model_desc) == 0
    assert acl.rt.destroy_stream(stream) == 0
    assert acl.rt.destroy_context(context) == 0
    assert acl.rt.reset_device(0) == 0
    assert acl.finalize() == 0
    return results


def test_canonical_app_matches_onnxruntime(no_acl: None, cls_model: tuple[Path, Path]) -> None:
    src, om = cls_model
    x = np.random.default_rng(0).standard_normal((1, 3, 48, 192)).astype(np.float32)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean teardown: no leak warning
        got = canonical_app(str(om), x)
    want = run_ort(onnx.load(str(src)), {"x": x})
    assert got[0].shape == (1, 2)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-3, atol=1e-5)


def test_model_desc_queries(acl_ready: int, small_om: Path) -> None:
    mid, ret = acl.mdl.load_from_file(str(small_om))
    assert ret == 0
    d = acl.mdl.create_desc()
    assert acl.mdl.get_num_inputs(d) == 0  # not filled yet
    assert acl.mdl.get_desc(d, mid) == 0
    assert (acl.mdl.get_num_inputs(d), acl.mdl.get_num_outputs(d)) == (1, 2)
    assert acl.mdl.get_input_size_by_index(d, 0) == 32 and acl.mdl.get_output_size_by_index(d, 1) == 24
    assert acl.mdl.get_input_size_by_index(d, 3) == 0 and acl.mdl.get_output_size_by_index(d, 2) == 0
    assert acl.mdl.get_input_dims(d, 0) == ({"name": "x", "dimCount": 2, "dims": [2, 4]}, 0)
    assert acl.mdl.get_input_dims_v2(d, 0)[0]["dims"] == [2, 4]
    assert acl.mdl.get_output_dims(d, 1) == ({"name": "z", "dimCount": 2, "dims": [2, 3]}, 0)
    assert acl.mdl.get_output_dims(d, 5)[1] == C.ACL_ERROR_INVALID_PARAM
    assert acl.mdl.get_cur_output_dims(d, 0) == ({"name": "y", "dimCount": 2, "dims": [2, 3]}, 0)
    assert acl.mdl.get_input_dims(d, -1)[1] == C.ACL_ERROR_INVALID_PARAM
    assert acl.mdl.get_cur_output_dims(d, 9)[1] == C.ACL_ERROR_INVALID_PARAM
    assert acl.mdl.get_output_index_by_name(d, "x") == (-1, C.ACL_ERROR_INVALID_PARAM)
    assert acl.mdl.get_input_name_by_index(d, 0) == "x" and acl.mdl.get_output_name_by_index(d, 1) == "z"
    assert acl.mdl.get_input_name_by_index(d, 1) == ""
    assert acl.mdl.get_input_data_type(d, 0) == C.ACL_FLOAT == acl.mdl.get_output_data_type(d, 0)
    assert acl.mdl.get_output_data_type(d, 9) == C.ACL_DT_UNDEFINED
    assert acl.mdl.get_input_format(d, 0) == C.ACL_FORMAT_ND == acl.mdl.get_output_format(d, 0)
    assert acl.mdl.get_input_format(d, 4) == C.ACL_FORMAT_UNDEFINED
    assert acl.mdl.get_input_index_by_name(d, "x") == (0, 0)
    assert acl.mdl.get_output_index_by_name(d, "z") == (1, 0)
    assert acl.mdl.get_input_index_by_name(d, "nope") == (-1, C.ACL_ERROR_INVALID_PARAM)
    assert acl.mdl.get_input_index_by_name(d, C.ACL_DYNAMIC_TENSOR_NAME)[1] == C.ACL_ERROR_INVALID_PARAM
    assert acl.mdl.get_dynamic_batch(d) == ({"batchCount": 0, "batch": []}, 0)
    assert acl.mdl.get_desc(d, 999) == C.ACL_ERROR_INVALID_MODEL_ID
    assert acl.mdl.destroy_desc(d) == 0
    assert acl.mdl.destroy_desc(d) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.mdl.get_num_inputs(d) == 0
    assert acl.mdl.get_dynamic_batch(d)[1] == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.mdl.get_dynamic_hw(d, 0)[1] == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.mdl.unload(mid) == 0
    assert acl.mdl.unload(mid) == C.ACL_ERROR_INVALID_MODEL_ID


def test_cls_input_format(acl_ready: int, cls_model: tuple[Path, Path]) -> None:
    mid, _ = acl.mdl.load_from_file(str(cls_model[1]))
    d = acl.mdl.create_desc()
    acl.mdl.get_desc(d, mid)
    assert acl.mdl.get_input_format(d, 0) == C.ACL_FORMAT_NCHW
    assert acl.mdl.get_input_size_by_index(d, 0) == 3 * 48 * 192 * 4


def _run_small(mid: int, x: np.ndarray) -> list[np.ndarray]:
    dx = to_device(x)
    outs = [acl.rt.malloc(24, 0)[0] for _ in range(2)]
    ind, _ = dataset_of([(dx, 32)])
    outd, _ = dataset_of([(o, 24) for o in outs])
    assert acl.mdl.execute(mid, ind, outd) == 0, acl.get_recent_err_msg()
    return [from_device(o, (2, 3)) for o in outs]


def test_load_variants(acl_ready: int, small_om: Path, tmp_path: Path) -> None:
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    data = small_om.read_bytes()
    mid1, ret = acl.mdl.load_from_mem(acl.util.bytes_to_ptr(data), len(data))
    assert ret == 0
    dev = to_device(np.frombuffer(data, np.uint8))
    mid2, ret = acl.mdl.load_from_mem(dev, len(data))  # from device memory too
    assert ret == 0
    work, weight, ret = acl.mdl.query_size(str(small_om))
    assert ret == 0 and work >= 0 and weight >= W_BYTES
    assert acl.mdl.query_size_from_mem(acl.util.bytes_to_ptr(data), len(data)) == (work, weight, 0)
    assert acl.mdl.query_size_from_mem(acl.util.bytes_to_ptr(data), 0)[2] == C.ACL_ERROR_INVALID_PARAM
    wp, _ = acl.rt.malloc(max(work, 1), 0)
    wt, _ = acl.rt.malloc(weight, 0)
    mid3, ret = acl.mdl.load_from_file_with_mem(str(small_om), wp, max(work, 1), wt, weight)
    assert ret == 0
    mid4, ret = acl.mdl.load_from_mem_with_mem(acl.util.bytes_to_ptr(data), len(data), 0, 0, 0, 0)
    assert ret == 0
    for mid in (mid1, mid2, mid3, mid4):
        got = _run_small(mid, x)
        for g, w in zip(got, small_ref(x)):
            np.testing.assert_allclose(g, w, rtol=1e-6)
    # errors
    assert acl.mdl.load_from_file(str(tmp_path / "missing.om")) == (0, C.ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID)
    bad = tmp_path / "bad.om"
    bad.write_bytes(data[:200])
    assert acl.mdl.load_from_file(str(bad)) == (0, C.ACL_ERROR_DESERIALIZE_MODEL)
    assert acl.mdl.load_from_mem(acl.util.bytes_to_ptr(data), len(data) + 10) == (0, C.ACL_ERROR_INVALID_PARAM)
    assert acl.mdl.load_from_mem(0, 10) == (0, C.ACL_ERROR_INVALID_PARAM)
    host = acl.util.numpy_to_ptr(np.zeros(64, np.uint8))
    assert acl.mdl.load_from_file_with_mem(str(small_om), host, 64, 0, 0)[1] == C.ACL_ERROR_INVALID_PARAM
    assert acl.mdl.query_size(str(tmp_path / "missing.om")) == (0, 0, C.ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID)
    with pytest.raises(TypeError):
        acl.mdl.load_from_file(123)  # type: ignore[arg-type]


W_BYTES = 4 * 3 * 4


def test_datasets(acl_ready: int) -> None:
    ds = acl.mdl.create_dataset()
    b1, b2 = acl.create_data_buffer(0, 0), acl.create_data_buffer(0, 0)
    assert acl.mdl.add_dataset_buffer(ds, b1) == (ds, 0)
    assert acl.mdl.add_dataset_buffer(ds, b2) == (ds, 0)
    assert acl.mdl.add_dataset_buffer(ds, 777)[1] == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.mdl.add_dataset_buffer(888, b1)[1] == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.mdl.get_dataset_num_buffers(ds) == 2
    assert acl.mdl.get_dataset_buffer(ds, 1) == b2
    assert acl.mdl.get_dataset_buffer(ds, 2) == 0
    assert acl.mdl.get_dataset_tensor_desc(ds, 0) == 0
    td = acl.create_tensor_desc(C.ACL_FLOAT, [1, 4], C.ACL_FORMAT_ND)
    assert acl.mdl.set_dataset_tensor_desc(ds, td, 0) == (ds, 0)
    got = acl.mdl.get_dataset_tensor_desc(ds, 0)  # the dataset's own copy (CANN copies the desc)
    assert acl.get_tensor_desc_num_dims(got) == 2 and acl.get_tensor_desc_dim(got, 1) == 4
    assert acl.mdl.set_dataset_tensor_desc(ds, 555, 0)[1] == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.mdl.destroy_dataset(ds) == 0
    assert acl.mdl.destroy_dataset(ds) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    assert acl.mdl.get_dataset_num_buffers(ds) == 0
    assert acl.get_data_buffer_size(b1) == 0 and acl.destroy_data_buffer(b1) == 0  # buffers survive


def test_execute_errors(acl_ready: int, small_om: Path) -> None:
    mid, _ = acl.mdl.load_from_file(str(small_om))
    x = np.ones((2, 4), np.float32)
    dx = to_device(x)
    o1, o2 = acl.rt.malloc(24, 0)[0], acl.rt.malloc(24, 0)[0]
    outd, _ = dataset_of([(o1, 24), (o2, 24)])
    ind, _ = dataset_of([(dx, 32)])
    assert acl.mdl.execute(999, ind, outd) == C.ACL_ERROR_INVALID_MODEL_ID
    assert acl.mdl.execute(mid, 999, outd) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    short, _ = dataset_of([(dx, 16)])
    assert acl.mdl.execute(mid, short, outd) == C.ACL_ERROR_GE_EXEC_MODEL_DATA_SIZE_INVALID
    empty = acl.mdl.create_dataset()
    assert acl.mdl.execute(mid, empty, outd) == C.ACL_ERROR_INVALID_PARAM
    host_in, _ = dataset_of([(acl.util.numpy_to_ptr(x), 32)])
    assert acl.mdl.execute(mid, host_in, outd) == C.ACL_ERROR_GE_EXEC_MODEL_ADDR_INVALID
    small_out, _ = dataset_of([(o1, 24), (o2, 8)])
    assert acl.mdl.execute(mid, ind, small_out) == C.ACL_ERROR_GE_EXEC_MODEL_DATA_SIZE_INVALID
    lying, _ = dataset_of([(o1, 24), (o2 + 16, 24)])  # claims 24 bytes, only 8 remain in the allocation
    assert acl.mdl.execute(mid, ind, lying) == C.ACL_ERROR_INVALID_PARAM
    acl.rt.free(dx)
    assert acl.mdl.execute(mid, ind, outd) == C.ACL_ERROR_INVALID_PARAM  # freed input
    assert "freed" in acl.get_recent_err_msg()
    # execute_async: argument errors at once, run-time errors from synchronize_stream
    s, _ = acl.rt.create_stream()
    assert acl.mdl.execute_async(mid, short, outd, s) == C.ACL_ERROR_GE_EXEC_MODEL_DATA_SIZE_INVALID
    assert acl.mdl.execute_async(mid, ind, outd, s) == C.ACL_ERROR_INVALID_PARAM  # freed input
    gate = threading.Event()
    acl.rt.launch_callback(lambda _: gate.wait(), None, C.ACL_CALLBACK_BLOCK, s)
    dx2 = to_device(x)
    ind2, _ = dataset_of([(dx2, 32)])
    assert acl.mdl.execute_async(mid, ind2, outd, s) == 0
    acl.rt.free(dx2)  # freed before the stream gets to it
    gate.set()
    assert acl.rt.synchronize_stream(s) == C.ACL_ERROR_INVALID_PARAM
    assert acl.mdl.execute_async(mid, ind, outd, 4242) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    acl.rt.set_context(acl_ready)


def test_execute_async_matches_sync(acl_ready: int, small_om: Path) -> None:
    mid, _ = acl.mdl.load_from_file(str(small_om))
    x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    dx = to_device(x)
    outs = [acl.rt.malloc(24, 0)[0] for _ in range(2)]
    ind, _ = dataset_of([(dx, 32)])
    outd, _ = dataset_of([(o, 24) for o in outs])
    assert acl.mdl.execute_async(mid, ind, outd, 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    for o, w in zip(outs, small_ref(x)):
        np.testing.assert_allclose(from_device(o, (2, 3)), w, rtol=1e-6)


def test_dynamic_batch(acl_ready: int, dyn_om: Path, small_om: Path) -> None:
    mid, _ = acl.mdl.load_from_file(str(dyn_om))
    d = acl.mdl.create_desc()
    acl.mdl.get_desc(d, mid)
    assert acl.mdl.get_input_dims(d, 0)[0]["dims"] == [-1, 4]
    assert acl.mdl.get_input_size_by_index(d, 0) == 8 * 4 * 4  # the range's upper bound
    assert acl.mdl.get_output_size_by_index(d, 0) == 0  # dynamic output: caller sizes it
    info, ret = acl.mdl.get_dynamic_batch(d)
    assert ret == 0 and info["batch"] == list(range(1, 9)) and info["batchCount"] == 8
    assert acl.mdl.get_dynamic_hw(d, 0) == ({"hwCount": 0, "hw": []}, 0)
    assert acl.mdl.get_input_dynamic_gear_count(d, -1) == (0, 0)
    assert acl.mdl.get_input_dynamic_dims(d, -1, 0) == ([], 0)
    idx, ret = acl.mdl.get_input_index_by_name(d, C.ACL_DYNAMIC_TENSOR_NAME)
    assert (idx, ret) == (1, 0)
    assert acl.mdl.get_input_size_by_index(d, idx) > 0
    # the virtual input's name by its index, as get_input_index_by_name gave the index (it was an error)
    assert acl.mdl.get_input_name_by_index(d, idx) == C.ACL_DYNAMIC_TENSOR_NAME
    assert acl.mdl.get_input_name_by_index(d, idx + 1) == ""
    x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    dx = to_device(x, 8 * 16)
    outs = [acl.rt.malloc(8 * 12, 0)[0] for _ in range(2)]
    ind, _ = dataset_of([(dx, 8 * 16)])
    outd, _ = dataset_of([(o, 8 * 12) for o in outs])
    assert acl.mdl.execute(mid, ind, outd) == C.ACL_ERROR_GE_SHAPE_INVALID  # batch not set
    assert "dynamic dims" in acl.get_recent_err_msg()
    assert acl.mdl.set_dynamic_batch_size(mid, ind, idx, 9) == C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID
    assert acl.mdl.set_dynamic_batch_size(mid, ind, 0, 3) == C.ACL_ERROR_INVALID_PARAM
    assert acl.mdl.set_dynamic_batch_size(mid, ind, idx, 3) == 0
    assert acl.mdl.execute(mid, ind, outd) == 0, acl.get_recent_err_msg()
    want = small_ref(x)
    np.testing.assert_allclose(from_device(outs[1], (3, 3)), want[1], rtol=1e-6)
    assert acl.mdl.get_cur_output_dims(d, 0)[0]["dims"] == [3, 3]
    od = acl.mdl.get_dataset_tensor_desc(outd, 1)
    assert [acl.get_tensor_desc_dim(od, i) for i in range(2)] == [3, 3]
    # set_input_dynamic_dims: every -1 in order
    ind2, _ = dataset_of([(dx, 8 * 16)])
    assert acl.mdl.set_input_dynamic_dims(mid, ind2, idx, {"dimCount": 1, "dims": [2]}) == 0
    assert acl.mdl.set_input_dynamic_dims(mid, ind2, idx, {"dimCount": 2, "dims": [2, 2]}) == \
        C.ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID  # (docs/acl.md's table, as on gear models)
    assert acl.mdl.execute(mid, ind2, outd) == 0
    assert acl.mdl.get_cur_output_dims(d, 1)[0]["dims"] == [2, 3]
    # set_dataset_tensor_desc (dymshape)
    ind3, _ = dataset_of([(dx, 8 * 16)])
    td = acl.create_tensor_desc(C.ACL_FLOAT, [1, 4], C.ACL_FORMAT_ND)
    assert acl.mdl.set_dataset_tensor_desc(ind3, td, 0) == (ind3, 0)
    assert acl.mdl.execute(mid, ind3, outd) == 0
    np.testing.assert_allclose(from_device(outs[0], (1, 3)), want[0][:1], rtol=1e-6)
    bad = acl.create_tensor_desc(C.ACL_FLOAT, [1, 5], C.ACL_FORMAT_ND)
    acl.mdl.set_dataset_tensor_desc(ind3, bad, 0)
    assert acl.mdl.execute(mid, ind3, outd) == C.ACL_ERROR_GE_SHAPE_INVALID
    # hw on a model without 4-D inputs, and dynamic calls on a static model
    assert acl.mdl.set_dynamic_hw_size(mid, ind, idx, 4, 4) == C.ACL_ERROR_MODEL_NOT_DYNAMIC
    sid, _ = acl.mdl.load_from_file(str(small_om))
    assert acl.mdl.set_dynamic_batch_size(sid, ind, 1, 2) == C.ACL_ERROR_MODEL_NOT_DYNAMIC


def _relu_hw(tmp_path: Path, options: Any = None) -> tuple[int, np.ndarray, Any, Any, int]:
    """A loaded Relu model over img [1, 1, H, W] (``options``: its CompileOptions), an input x of
    1x1x3x4, and (input dataset, output dataset, output device buffer) for it."""
    from onnx import TensorProto, helper

    import pycann

    g = helper.make_graph([helper.make_node("Relu", ["img"], ["out"])], "hw",
                          [helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 1, "H", "W"])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 1, "H", "W"])])
    om = tmp_path / "hw.om"
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    (pycann.compile_model(model, options) if options is not None else pycann.compile_model(model)).save(om)
    mid, _ = acl.mdl.load_from_file(str(om))
    x = np.arange(-6, 6, dtype=np.float32).reshape(1, 1, 3, 4)
    dx, do = to_device(x), acl.rt.malloc(48, 0)[0]
    ind, _ = dataset_of([(dx, 48)])
    outd, _ = dataset_of([(do, 48)])
    return mid, x, ind, outd, do


def test_set_dataset_tensor_desc_as_pyacl(acl_ready: int, dyn_om: Path) -> None:
    """pyACL: ``dataset, ret = set_dataset_tensor_desc(...)``; as aclmdlSetDatasetTensorDesc the
    dataset keeps a copy (the app may destroy its desc before executing), index must name a buffer
    and desc 0 removes the one set."""
    mid, _ = acl.mdl.load_from_file(str(dyn_om))
    x = np.random.default_rng(5).standard_normal((2, 4)).astype(np.float32)
    dx = to_device(x, 8 * 16)
    outs = [acl.rt.malloc(8 * 12, 0)[0] for _ in range(2)]
    ind, _ = dataset_of([(dx, 8 * 16)])
    outd, _ = dataset_of([(o, 8 * 12) for o in outs])
    td = acl.create_tensor_desc(C.ACL_FLOAT, [2, 4], C.ACL_FORMAT_ND)
    dataset, ret = acl.mdl.set_dataset_tensor_desc(ind, td, 0)
    assert (dataset, ret) == (ind, 0)
    acl.destroy_tensor_desc(td)  # the samples do this right away
    assert acl.mdl.execute(mid, ind, outd) == 0, acl.get_recent_err_msg()
    np.testing.assert_allclose(from_device(outs[1], (2, 3)), small_ref(x)[1], rtol=1e-6)
    od = acl.mdl.get_dataset_tensor_desc(outd, 1)
    assert [acl.get_tensor_desc_dim(od, i) for i in range(2)] == [2, 3]
    td = acl.create_tensor_desc(C.ACL_FLOAT, [2, 4], C.ACL_FORMAT_ND)
    assert acl.mdl.set_dataset_tensor_desc(ind, td, 1) == (0, C.ACL_ERROR_INVALID_PARAM)  # 1 buffer only
    assert "out of range" in acl.get_recent_err_msg()
    assert acl.mdl.set_dataset_tensor_desc(ind, 0, 0) == (ind, 0)  # removes it
    assert acl.mdl.get_dataset_tensor_desc(ind, 0) == 0
    assert acl.mdl.execute(mid, ind, outd) == C.ACL_ERROR_GE_SHAPE_INVALID  # no shape any more
    acl.destroy_tensor_desc(td)
    assert acl.mdl.destroy_dataset(ind) == 0


def test_dynamic_hw(acl_ready: int, tmp_path: Path) -> None:
    mid, x, ind, outd, do = _relu_hw(tmp_path)
    # a zero H or W is outside every range: 145013, as a batch of 0 (cann-interfaces.md §1.4: the
    # code CANN returns for an unsupported dynamic size), not ACL_ERROR_INVALID_PARAM (100000)
    assert acl.mdl.set_dynamic_hw_size(mid, ind, 1, 0, 4) == C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID == 145013
    assert acl.mdl.set_dynamic_hw_size(mid, ind, 1, 3, 0) == C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID
    assert "height 0" in acl.get_recent_err_msg() or "width 0" in acl.get_recent_err_msg()
    assert acl.mdl.set_dynamic_hw_size(mid, ind, 1, 3, 4) == 0
    assert acl.mdl.execute(mid, ind, outd) == 0
    np.testing.assert_array_equal(from_device(do, (1, 1, 3, 4)), np.maximum(x, 0))


def test_dynamic_hw_checks_the_static_dims_and_ranges(acl_ready: int, tmp_path: Path) -> None:
    """set_dynamic_hw_size on a range model took any value: a height for an input whose H is static
    was dropped (the run used the static H; a rec model [-1,3,48,-1] asked for 50x200 ran 48x200)
    and a width outside the --input_shape range failed only at execute. Checked as
    set_dynamic_batch_size checks the batch (ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID)."""
    import pycann

    mid, x, ind, outd, do = _relu_hw(tmp_path, pycann.CompileOptions(input_shape={"img": [1, 1, 3, (2, 6)]}))
    assert acl.mdl.set_dynamic_hw_size(mid, ind, 1, 4, 4) == C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID
    assert "no input has a dynamic height (img's is 3)" in acl.get_recent_err_msg()
    assert acl.mdl.set_dynamic_hw_size(mid, ind, 1, 3, 7) == C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID
    assert "width 7 is outside img's range 2~6" in acl.get_recent_err_msg()
    assert acl.mdl.set_dynamic_hw_size(mid, ind, 1, 3, 4) == 0
    assert acl.mdl.execute(mid, ind, outd) == 0, acl.get_recent_err_msg()
    np.testing.assert_array_equal(from_device(do, (1, 1, 3, 4)), np.maximum(x, 0))


def test_dynamic_hw_two_inputs_of_different_static_heights(acl_ready: int, tmp_path: Path) -> None:
    """Two 4-D inputs whose H is static but differs (2 and 3) and whose W is dynamic: the static-dim
    check refused every height (2 was not b's, 3 was not a's), so set_dynamic_hw_size could not be
    used at all on a model it ran before. A height that is one of the static ones is taken."""
    from onnx import TensorProto, helper

    import pycann

    g = helper.make_graph([helper.make_node("Relu", ["a"], ["ya"]), helper.make_node("Relu", ["b"], ["yb"])], "hw2",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 1, "H", "W"]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 1, "H2", "W"])],
                          [helper.make_tensor_value_info("ya", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("yb", TensorProto.FLOAT, None)])
    om = tmp_path / "hw_two.om"
    pycann.compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
                         pycann.CompileOptions(input_shape={"a": [1, 1, 2, (2, 6)], "b": [1, 1, 3, (2, 6)]})).save(om)
    mid, _ = acl.mdl.load_from_file(str(om))
    xa = np.arange(-4, 4, dtype=np.float32).reshape(1, 1, 2, 4)
    xb = np.arange(-6, 6, dtype=np.float32).reshape(1, 1, 3, 4)
    ind, _ = dataset_of([(to_device(xa), 32), (to_device(xb), 48)])
    oa, ob = acl.rt.malloc(32, 0)[0], acl.rt.malloc(48, 0)[0]
    outd, _ = dataset_of([(oa, 32), (ob, 48)])
    assert acl.mdl.set_dynamic_hw_size(mid, ind, 2, 5, 4) == C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID
    assert acl.mdl.set_dynamic_hw_size(mid, ind, 2, 2, 4) == 0, acl.get_recent_err_msg()
    assert acl.mdl.execute(mid, ind, outd) == 0, acl.get_recent_err_msg()
    np.testing.assert_array_equal(from_device(oa, (1, 1, 2, 4)), np.maximum(xa, 0))
    np.testing.assert_array_equal(from_device(ob, (1, 1, 3, 4)), np.maximum(xb, 0))


def test_a_bad_environment_knob_is_an_invalid_param_naming_it(acl_ready: int, small_om: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``PYCANN_`` knob pycann cannot use fails the load with ACL_ERROR_INVALID_PARAM (it was 500000,
    "internal error"), and the recent error message names the knob."""
    monkeypatch.setenv("PYCANN_PROVIDERS", "onedn")
    mid, ret = acl.mdl.load_from_file(str(small_om))
    assert ret == C.ACL_ERROR_INVALID_PARAM
    assert "PYCANN_PROVIDERS='onedn'" in acl.get_recent_err_msg()
    monkeypatch.delenv("PYCANN_PROVIDERS")
    mid, ret = acl.mdl.load_from_file(str(small_om))
    assert ret == 0 and acl.mdl.unload(mid) == 0

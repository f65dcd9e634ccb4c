"""acl.mdl on atc-compiled gear models (--dynamic_batch_size / --dynamic_dims / --dynamic_image_size)
and dynamic AIPP (create_aipp / set_aipp_* / set_input_aipp), InferSession's and the bench CLI's
dynamic modes on gear models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pycann
import pycann.acl as acl
from pycann.acl import constants as C
from pycann.acl.session import InferSession
from pycann.ge.run.model import LoadedModel
from pycann.tools import bench
from tests.ge.test_aipp import JPEG, identity_model, ref_aipp, src_image
from tests.ge.test_gears import conv_model, nd_model

from .conftest import small_onnx, small_ref
from .helpers import dataset_of, from_device, to_device


@pytest.fixture(scope="module")
def batch_om(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """small_onnx with batch gears 2 and 4: x [-1,4] -> y, z [-1,3]."""
    p = tmp_path_factory.mktemp("gears") / "batch.om"
    opts = pycann.CompileOptions(input_shape={"x": [-1, 4]}, dynamic_batch_size=[2, 4])
    pycann.compile_model(small_onnx("N"), opts).save(p)
    return p


@pytest.fixture(scope="module")
def aipp_om(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Identity on x [2,3,6,4] float32 behind dynamic AIPP (max_src_image_size 200)."""
    d = tmp_path_factory.mktemp("aipp")
    (d / "aipp.cfg").write_text("aipp_op {\n aipp_mode: dynamic\n max_src_image_size: 200\n}\n")
    pycann.compile_model(identity_model([2, 3, 6, 4]), pycann.CompileOptions(insert_op_conf=str(d / "aipp.cfg"))
                         ).save(d / "aipp.om")
    return d / "aipp.om"


def _load(path: Path) -> tuple[int, int]:
    mid, ret = acl.mdl.load_from_file(str(path))
    assert ret == 0, acl.get_recent_err_msg()
    desc = acl.mdl.create_desc()
    assert acl.mdl.get_desc(desc, mid) == 0
    return mid, desc


def _io(mid: int, desc: int, arrays: list[np.ndarray], dyn: bool = True) -> tuple[int, int, list[int]]:
    """Input dataset (buffers of get_input_size_by_index bytes, plus the dynamic tensor) and an
    output dataset of get_output_size_by_index buffers; returns (in, out, output pointers)."""
    n_in = acl.mdl.get_num_inputs(desc)
    sizes = [acl.mdl.get_input_size_by_index(desc, i) for i in range(n_in + (1 if dyn else 0))]
    ins = [(to_device(a, sizes[i]), sizes[i]) for i, a in enumerate(arrays)]
    ins += [(acl.rt.malloc(s, 0)[0], s) for s in sizes[len(arrays):]]
    outs = [acl.mdl.get_output_size_by_index(desc, j) for j in range(acl.mdl.get_num_outputs(desc))]
    ptrs = [acl.rt.malloc(s, 0)[0] for s in outs]
    ind, _ = dataset_of(ins)
    outd, _ = dataset_of(list(zip(ptrs, outs)))
    return ind, outd, ptrs


def test_batch_gears_match_static_models(acl_ready: int, batch_om: Path) -> None:
    mid, desc = _load(batch_om)
    assert acl.mdl.get_dynamic_batch(desc) == ({"batchCount": 2, "batch": [2, 4]}, 0)
    assert acl.mdl.get_dynamic_hw(desc, -1) == ({"hwCount": 0, "hw": []}, 0)
    assert acl.mdl.get_input_dynamic_gear_count(desc, -1) == (0, 0)
    assert acl.mdl.get_input_dims(desc, 0)[0]["dims"] == [-1, 4]
    assert acl.mdl.get_input_size_by_index(desc, 0) == 4 * 4 * 4  # the largest gear
    assert acl.mdl.get_output_size_by_index(desc, 1) == 4 * 3 * 4
    idx, ret = acl.mdl.get_input_index_by_name(desc, C.ACL_DYNAMIC_TENSOR_NAME)
    assert (idx, ret) == (1, 0)
    rng = np.random.default_rng(7)
    xs = {b: rng.standard_normal((b, 4)).astype(np.float32) for b in (2, 4)}
    sets = {b: _io(mid, desc, [xs[b]]) for b in (2, 4)}
    assert acl.mdl.execute(mid, sets[2][0], sets[2][1]) == C.ACL_ERROR_GE_SHAPE_INVALID  # no gear selected
    assert acl.mdl.set_dynamic_batch_size(mid, sets[2][0], idx, 3) == C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID
    assert "the gears are: batch 2 (x:[2,4]); batch 4 (x:[4,4])" in acl.get_recent_err_msg()
    assert acl.mdl.set_dynamic_hw_size(mid, sets[2][0], idx, 2, 2) == C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID
    for b in (2, 4):  # each dataset its own gear
        assert acl.mdl.set_dynamic_batch_size(mid, sets[b][0], idx, b) == 0
    streams = [acl.rt.create_stream()[0] for _ in range(2)]
    for s, b in zip(streams, (4, 2)):  # both gears queued at once on two streams
        assert acl.mdl.execute_async(mid, sets[b][0], sets[b][1], s) == 0
    for s in streams:
        assert acl.rt.synchronize_stream(s) == 0, acl.get_recent_err_msg()
    for b in (2, 4):
        static = LoadedModel.from_compiled(pycann.compile_model(small_onnx(b))).run([xs[b]])
        for ptr, want in zip(sets[b][2], static):
            np.testing.assert_allclose(from_device(ptr, (b, 3)), want, rtol=1e-6)
        np.testing.assert_allclose(static[0], small_ref(xs[b])[0], rtol=1e-6)
    # set_input_dynamic_dims: the gear as all dims of the inputs
    ind = sets[4][0]
    assert acl.mdl.set_input_dynamic_dims(mid, ind, idx, {"dimCount": 2, "dims": [2, 5]}) == \
        C.ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID
    assert acl.mdl.set_input_dynamic_dims(mid, ind, idx, {"dimCount": 1, "dims": [2]}) == \
        C.ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID
    assert acl.mdl.set_input_dynamic_dims(mid, ind, idx, {"dimCount": 2, "dims": [3, 4]}) == \
        C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID
    assert acl.mdl.set_input_dynamic_dims(mid, ind, idx, {"dimCount": 2, "dims": [2, 4]}) == 0
    assert acl.mdl.execute(mid, ind, sets[4][1]) == 0
    assert acl.mdl.get_cur_output_dims(desc, 0)[0]["dims"] == [2, 3]
    # a tensor desc's shape must be a gear too
    td = acl.create_tensor_desc(C.ACL_FLOAT, [3, 4], C.ACL_FORMAT_ND)
    assert acl.mdl.set_dataset_tensor_desc(ind, td, 0) == (ind, 0)
    assert acl.mdl.execute(mid, ind, sets[4][1]) == C.ACL_ERROR_GE_SHAPE_INVALID
    assert "match no gear" in acl.get_recent_err_msg()


def test_dims_and_hw_gears(acl_ready: int, tmp_path: Path) -> None:
    opts = pycann.CompileOptions(input_shape={"a": [-1, -1], "m": [-1]}, dynamic_dims=[[1, 4, 4], [2, 8, 8]],
                                 input_format="ND")
    pycann.compile_model(nd_model(), opts).save(tmp_path / "dims.om")
    mid, desc = _load(tmp_path / "dims.om")
    assert acl.mdl.get_input_dynamic_gear_count(desc, -1) == (2, 0)
    dims, ret = acl.mdl.get_input_dynamic_dims(desc, -1, 2)
    assert ret == 0 and [g["dims"] for g in dims] == [[1, 4, 4], [2, 8, 8]] and dims[1]["dimCount"] == 3
    assert acl.mdl.get_input_dynamic_dims(desc, -1, 1)[1] == C.ACL_ERROR_INVALID_PARAM
    assert acl.mdl.get_dynamic_batch(desc) == ({"batchCount": 0, "batch": []}, 0)
    a, m = np.arange(16, dtype=np.float32).reshape(2, 8), np.linspace(0, 1, 8, dtype=np.float32)
    ind, outd, (out,) = _io(mid, desc, [a, m])
    assert acl.mdl.set_input_dynamic_dims(mid, ind, 2, dims[1]) == 0
    assert acl.mdl.execute(mid, ind, outd) == 0, acl.get_recent_err_msg()
    np.testing.assert_allclose(from_device(out, (2,)), (a * m).sum(1), rtol=1e-6)
    # image-size gears
    opts = pycann.CompileOptions(input_shape={"x": [1, 3, -1, -1]}, dynamic_image_size=[[8, 8], [6, 10]])
    pycann.compile_model(conv_model(), opts).save(tmp_path / "hw.om")
    mid, desc = _load(tmp_path / "hw.om")
    assert acl.mdl.get_dynamic_hw(desc, -1) == ({"hwCount": 2, "hw": [[8, 8], [6, 10]]}, 0)
    assert acl.mdl.get_input_format(desc, 0) == C.ACL_FORMAT_NCHW
    x = np.random.default_rng(3).standard_normal((1, 3, 6, 10)).astype(np.float32)
    ind, outd, (out,) = _io(mid, desc, [x])
    assert acl.mdl.set_dynamic_hw_size(mid, ind, 1, 10, 6) == C.ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID
    assert acl.mdl.set_dynamic_hw_size(mid, ind, 1, 6, 10) == 0
    assert acl.mdl.execute(mid, ind, outd) == 0, acl.get_recent_err_msg()
    static = LoadedModel.from_compiled(pycann.compile_model(conv_model(), pycann.CompileOptions(
        input_shape={"x": [1, 3, 6, 10]}))).run([x])[0]
    np.testing.assert_allclose(from_device(out, (1, 4)), static, rtol=1e-6)


def _aipp_set(batch: int, crops: list[int]) -> tuple[int, list[dict[str, Any]]]:
    """An aclmdlAIPP for NV12 6x8 images with JPEG CSC and one crop origin per image, and the
    same parameters as config dicts for the numpy golden."""
    s = acl.mdl.create_aipp(batch)
    assert s and acl.mdl.set_aipp_input_format(s, C.ACL_YUV420SP_U8) == 0
    assert acl.mdl.set_aipp_src_image_size(s, 6, 8) == 0
    matrix = [JPEG[f"matrix_r{r}c{c}"] for r in range(3) for c in range(3)]
    assert acl.mdl.set_aipp_csc_params(s, 1, *matrix, 0, 0, 0, 0, 128, 128) == 0
    golden = []
    for b, x0 in enumerate(crops):
        assert acl.mdl.set_aipp_crop_params(s, 1, x0, 2, 4, 6, b) == 0
        assert acl.mdl.set_aipp_dtc_pixel_mean(s, 0, 4 + b, 0, 0, b) == 0
        assert acl.mdl.set_aipp_dtc_pixel_min(s, 16.0, 0.0, 0.5, 0.0, b) == 0
        assert acl.mdl.set_aipp_pixel_var_reci(s, 0.5, 1.0, 0.25, 1.0, b) == 0
        golden.append(dict(input_format="YUV420SP_U8", src_image_size_w=6, src_image_size_h=8, csc_switch=True,
                           crop=True, load_start_pos_w=x0, load_start_pos_h=2, crop_size_w=4, crop_size_h=6,
                           mean_chn_1=4 + b, min_chn_0=16.0, min_chn_2=0.5, var_reci_chn_0=0.5,
                           var_reci_chn_2=0.25, **JPEG))
    return s, golden


def test_dynamic_aipp_matches_numpy_golden(acl_ready: int, aipp_om: Path) -> None:
    mid, desc = _load(aipp_om)
    ai, ret = acl.mdl.get_input_index_by_name(desc, C.ACL_DYNAMIC_AIPP_NAME)
    assert (ai, ret) == (1, 0)
    assert acl.mdl.get_aipp_type(mid, 0) == (C.ACL_DATA_WITH_DYNAMIC_AIPP, 1, 0)
    assert acl.mdl.get_aipp_type(mid, 1) == (C.ACL_DYNAMIC_AIPP_NODE, C.ACL_INVALID_NODE_INDEX, 0)
    assert acl.mdl.get_aipp_data_size(2) == (acl.mdl.get_input_size_by_index(desc, ai), 0)
    info, ret = acl.mdl.get_first_aipp_info(mid, 0)
    assert ret == 0 and info["shapeCount"] == 1 and info["srcFormat"] == C.ACL_FORMAT_NCHW
    assert info["srcDatatype"] == C.ACL_FLOAT and info["outDims"][0]["srcDims"]["dims"] == [2, 3, 6, 4]
    assert acl.mdl.get_first_aipp_info(mid, 1) == (None, C.ACL_ERROR_GE_AIPP_NOT_EXIST)
    img = src_image("YUV420SP_U8", 2, 8, 6)
    runs = []
    for crops in ([2, 0], [0, 2]):  # two datasets, different parameters, executed after both are set
        s, golden = _aipp_set(2, crops)
        ind, outd, (out,) = _io(mid, desc, [img.reshape(-1)], dyn=False)
        assert acl.mdl.set_input_aipp(mid, ind, ai, s) == 0, acl.get_recent_err_msg()
        assert acl.mdl.destroy_aipp(s) == 0
        runs.append((ind, outd, out, golden))
    for ind, outd, out, golden in runs:
        assert acl.mdl.execute(mid, ind, outd) == 0, acl.get_recent_err_msg()
        got = from_device(out, (2, 3, 6, 4))
        for b in range(2):
            np.testing.assert_allclose(got[b], ref_aipp(img[b:b + 1], golden[b])[0], rtol=1e-6, atol=1e-5)
    # by the image input's index
    s, golden = _aipp_set(2, [1, 1])
    ind, outd, out = runs[0][:3]
    assert acl.mdl.set_aipp_by_input_index(mid, ind, 0, s) == 0
    assert acl.mdl.execute(mid, ind, outd) == 0
    np.testing.assert_allclose(from_device(out, (2, 3, 6, 4))[1], ref_aipp(img[1:], golden[1])[0], rtol=1e-6, atol=1e-5)


def test_aipp_errors(acl_ready: int, aipp_om: Path, small_om: Path) -> None:
    mid, desc = _load(aipp_om)
    s, _ = _aipp_set(2, [0, 0])
    assert acl.mdl.create_aipp(0) == 0
    assert acl.mdl.set_aipp_input_format(s, C.ACL_YUYV_U8) == C.ACL_ERROR_FEATURE_UNSUPPORTED
    assert acl.mdl.set_aipp_input_format(s, 99) == C.ACL_ERROR_INVALID_PARAM
    assert acl.mdl.set_aipp_scf_params(s, 1, 16, 16, 16, 16, 0) == C.ACL_ERROR_FEATURE_UNSUPPORTED
    assert acl.mdl.set_aipp_scf_params(s, 0, 0, 0, 0, 0, 0) == 0
    assert acl.mdl.set_aipp_crop_params(s, 1, 0, 0, 4, 6, 2) == C.ACL_ERROR_INVALID_PARAM  # batch_index
    assert acl.mdl.set_aipp_padding_params(s, 1, 33, 0, 0, 0, 0) == C.ACL_ERROR_INVALID_PARAM
    assert "[0, 32]" in acl.get_recent_err_msg()
    assert acl.mdl.set_aipp_dtc_pixel_mean(s, 256, 0, 0, 0, 0) == C.ACL_ERROR_INVALID_PARAM
    assert acl.mdl.set_aipp_csc_params(s, 2, *[0] * 15) == C.ACL_ERROR_INVALID_PARAM
    assert acl.mdl.set_aipp_src_image_size(s, 1, 8) == C.ACL_ERROR_INVALID_PARAM
    img = np.zeros(200, np.uint8)
    ind, outd, _ = _io(mid, desc, [img], dyn=False)
    assert acl.mdl.set_input_aipp(mid, ind, 0, s) == C.ACL_ERROR_INVALID_PARAM  # the image input, not the data
    assert acl.mdl.set_input_aipp(mid, ind, 1, 4242) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    one, _ = _aipp_set(1, [0])
    assert acl.mdl.set_input_aipp(mid, ind, 1, one) == C.ACL_ERROR_INVALID_PARAM
    assert "batchSize[1]" in acl.get_recent_err_msg()
    assert acl.mdl.set_aipp_crop_params(s, 1, 4, 2, 4, 6, 0) == 0  # inside [0, 4096] but outside the image
    assert acl.mdl.set_input_aipp(mid, ind, 1, s) == C.ACL_ERROR_INVALID_PARAM
    assert "E10001" in acl.get_recent_err_msg()
    small_ds, _ = dataset_of([(acl.rt.malloc(200, 0)[0], 200), (acl.rt.malloc(64, 0)[0], 64)])
    good, _ = _aipp_set(2, [0, 0])
    assert acl.mdl.set_input_aipp(mid, small_ds, 1, good) == C.ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID
    sid, _ = acl.mdl.load_from_file(str(small_om))
    assert acl.mdl.get_aipp_type(sid, 0) == (C.ACL_DATA_WITHOUT_AIPP, C.ACL_INVALID_NODE_INDEX, 0)
    assert acl.mdl.get_aipp_type(sid, 5)[-1] == C.ACL_ERROR_INVALID_PARAM
    assert acl.mdl.set_aipp_by_input_index(sid, ind, 0, good) == C.ACL_ERROR_FAILURE
    assert acl.mdl.destroy_aipp(s) == 0 and acl.mdl.destroy_aipp(s) == C.ACL_ERROR_INVALID_RESOURCE_HANDLE
    # a huge batch made a list of that many per-image dicts at create_aipp (2**31: every byte of memory);
    # the parameter set is now made per image as one is set, and set_input_aipp refuses the batch
    huge = acl.mdl.create_aipp(2**40)
    assert huge != 0
    assert acl.mdl.set_aipp_input_format(huge, C.ACL_YUV420SP_U8) == 0
    assert acl.mdl.set_aipp_dtc_pixel_mean(huge, 1, 2, 3, 0, 2**40 - 1) == 0  # (the last image)
    assert acl.mdl.set_aipp_dtc_pixel_mean(huge, 1, 2, 3, 0, 2**40) == C.ACL_ERROR_INVALID_PARAM
    assert acl.mdl.set_input_aipp(mid, ind, 1, huge) == C.ACL_ERROR_INVALID_PARAM
    assert f"batchSize[{2**40}]" in acl.get_recent_err_msg()
    assert acl.mdl.get_aipp_data_size(2**40)[1] == 0
    assert acl.mdl.destroy_aipp(huge) == 0
    # a list or None where a number goes is a parse failure (TypeError), as pyACL raises; it was
    # ACL_ERROR_INTERNAL_ERROR (500000: float([1]))
    good, _ = _aipp_set(2, [0, 0])
    for call in (lambda: acl.mdl.set_aipp_dtc_pixel_min(good, 0.0, [1], 0.0, 0.0, 0),
                 lambda: acl.mdl.set_aipp_pixel_var_reci(good, None, 1.0, 1.0, 1.0, 0),
                 lambda: acl.mdl.set_aipp_dtc_pixel_mean(good, (1,), 0, 0, 0, 0)):
        with pytest.raises(TypeError):
            call()
    assert acl.mdl.set_aipp_dtc_pixel_min(good, 0.5, 1.0, 2.0, 0.0, 1) == 0


def test_static_aipp_with_batch_gears_info(acl_ready: int, tmp_path: Path) -> None:
    cfg = tmp_path / "aipp.cfg"
    cfg.write_text("aipp_op {\n aipp_mode: static\n input_format: RGB888_U8\n rbuv_swap_switch: true\n"
                   " min_chn_0: 1.5\n var_reci_chn_2: 0.5\n}\n")
    opts = pycann.CompileOptions(input_shape={"x": [-1, 3, 6, 4]}, dynamic_batch_size=[1, 2], insert_op_conf=str(cfg))
    pycann.compile_model(identity_model([1, 3, 6, 4]), opts).save(tmp_path / "s.om")
    mid, desc = _load(tmp_path / "s.om")
    assert acl.mdl.get_aipp_type(mid, 0) == (C.ACL_DATA_WITH_STATIC_AIPP, C.ACL_INVALID_NODE_INDEX, 0)
    assert acl.mdl.get_input_format(desc, 0) == C.ACL_FORMAT_NHWC  # the uint8 RGB source
    info, ret = acl.mdl.get_first_aipp_info(mid, 0)
    assert ret == 0 and info["inputFormat"] == C.ACL_RGB888_U8 and info["rbuvSwapSwitch"] == 1
    assert (info["minChn0"], info["varReciChn2"], info["srcImageSizeW"]) == (1.5, 0.5, 4)
    assert info["shapeCount"] == 2 and [d["srcDims"]["dims"][0] for d in info["outDims"]] == [1, 2]


def test_infer_session_and_bench_use_gears(batch_om: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sess = InferSession(0, batch_om)
    assert sess.get_max_dym_batchsize() == 4
    x = np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32)
    np.testing.assert_allclose(sess.infer([x], mode="dymbatch")[0], small_ref(x)[0], rtol=1e-6)
    with pytest.raises(RuntimeError, match=r"batch 3 matches no gear .*batch 2 \(x:\[2,4\]\); batch 4"):
        sess.infer([x[:3]], mode="dymbatch")
    with pytest.raises(RuntimeError, match="compiled with --dynamic_batch_size, not --dynamic_image_size"):
        sess.set_dynamic_hw(4, 4)
    sess.set_dynamic_dims("x:2,4")
    assert sess.input_shapes() == [[2, 4]]
    with pytest.raises(RuntimeError, match="dims x:3,4 matches no gear"):
        sess.set_dynamic_dims("x:3,4")
    assert bench.main(["--model", str(batch_om), "--dymBatch", "4", "--loop", "2", "--warmup_count", "0"]) == 0
    assert "throughput 1000*batchsize.mean(4)" in capsys.readouterr().out
    assert bench.main(["--model", str(batch_om), "--dymBatch", "3"]) == 1
    assert "batch 3 matches no gear" in capsys.readouterr().err
    assert bench.main(["--model", str(batch_om), "--dymDims", "x:2,4", "--warmup_count", "0"]) == 0
    assert "throughput 1000*batchsize.mean(2)" in capsys.readouterr().out

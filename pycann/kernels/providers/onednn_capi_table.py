"""oneDNN v3 C API constants, structs and function signatures for ``onednn_capi`` (ctypes).

Enum values used (oneDNN v3.2, ``include/oneapi/dnnl/``; checked against the loaded library
at run time by ``self_check`` and by the provider's numeric tests):

=============================================  =========  ===================================
name                                           value      header
=============================================  =========  ===================================
dnnl_success / dnnl_last_impl_reached          0 / 4      dnnl_common_types.h dnnl_status_t
dnnl_f32                                       3          dnnl_common_types.h dnnl_data_type_t
dnnl_cpu                                       1          dnnl_common_types.h dnnl_engine_kind_t
dnnl_stream_default_flags (in order)           1          dnnl_common_types.h
dnnl_format_tag_any                            1          dnnl_types.h dnnl_format_tag_t
dnnl_forward_inference                         96         dnnl_types.h dnnl_prop_kind_t
dnnl_convolution_direct / deconvolution_direct 0x1 / 0xa  dnnl_types.h dnnl_alg_kind_t
dnnl_eltwise_relu .. hardswish                 0x20..     dnnl_types.h dnnl_alg_kind_t (ELTWISE)
dnnl_binary_add                                0x1fff0    dnnl_types.h dnnl_alg_kind_t
dnnl_query_impl_info_str                       8          dnnl_types.h dnnl_query_t
dnnl_query_weights_md / dst_md                 131 / 133  dnnl_types.h (some_md = 128, ...)
dnnl_query_ndims_s32 / dims / data_type        256..258   dnnl_types.h (exec_arg_md = 255, ...)
DNNL_ARG_SRC / DST / WEIGHTS / BIAS            1/17/33/41 dnnl_types.h
DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | SRC_1      32768*(i+1) | 2
DNNL_ARG_SCALE / SHIFT                         51 / 52    dnnl_types.h
dnnl_use_scale / dnnl_use_shift                0x2 / 0x4  dnnl_types.h dnnl_normalization_flags_t
dnnl_pooling_max / avg_include / avg_exclude   0x1ff/0x2ff/0x3ff  dnnl_types.h dnnl_alg_kind_t
DNNL_MEMORY_ALLOCATE                           (void*)-1  dnnl_types.h
dnnl_fpmath_mode_strict                        0          dnnl_common_types.h dnnl_fpmath_mode_t
=============================================  =========  ===================================
"""

from __future__ import annotations

import ctypes
from typing import Any

SUCCESS = 0
LAST_IMPL_REACHED = 4
F16, BF16, F32 = 1, 2, 3  # dnnl_data_type_t (dnnl_common_types.h)
ENGINE_CPU = 1
STREAM_DEFAULT = 1
FPMATH_STRICT = 0  # dnnl_fpmath_mode_t: float32 ops computed in float32
FORMAT_ANY = 1
FORWARD_INFERENCE = 96
CONVOLUTION_DIRECT = 0x1
DECONVOLUTION_DIRECT = 0xA
BINARY_ADD = 0x1FFF0
ELTWISE = {
    "relu": 0x20, "tanh": 0x21, "elu": 0x22, "square": 0x23, "abs": 0x24, "sqrt": 0x25, "linear": 0x26,
    "soft_relu": 0x27, "hardsigmoid": 0x28, "logistic": 0x29, "exp": 0x2A, "gelu_tanh": 0x2B, "swish": 0x2C,
    "log": 0x2D, "clip": 0x2E, "clip_v2": 0x2F, "pow": 0x30, "gelu_erf": 0x31, "round": 0x32, "mish": 0x33,
    "hardswish": 0x34,
}
QUERY_IMPL_INFO_STR = 8
QUERY_WEIGHTS_MD = 131
QUERY_DST_MD = 133
QUERY_NDIMS_S32 = 256
QUERY_DIMS = 257
QUERY_DATA_TYPE = 258
ARG_SRC, ARG_DST, ARG_WEIGHTS, ARG_BIAS = 1, 17, 33, 41
ARG_FROM, ARG_TO = ARG_SRC, ARG_DST
ARG_SCALE, ARG_SHIFT = 51, 52
USE_SCALE, USE_SHIFT = 0x2, 0x4
POOLING = {"max": 0x1FF, "avg_include_padding": 0x2FF, "avg_exclude_padding": 0x3FF}
MEMORY_ALLOCATE = ctypes.c_void_p(2**64 - 1)
MAX_NDIMS = 12

Dims = ctypes.c_int64 * MAX_NDIMS


def arg_post_op_src1(index: int) -> int:
    """``DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1``: a binary post-op's operand."""
    return 32768 * (index + 1) | 2


class ExecArg(ctypes.Structure):
    """``dnnl_exec_arg_t``."""

    _fields_ = [("arg", ctypes.c_int), ("memory", ctypes.c_void_p)]


class Version(ctypes.Structure):
    """``dnnl_version_t``."""

    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint), ("gpu_runtime", ctypes.c_uint)]


class DnnlError(RuntimeError):
    """A oneDNN C API call returned a status other than ``dnnl_success``."""

    STATUS = {1: "out_of_memory", 2: "invalid_arguments", 3: "unimplemented", 4: "last_impl_reached",
              5: "runtime_error", 6: "not_required"}

    def __init__(self, call: str, status: int) -> None:
        super().__init__(f"{call} failed: dnnl_status_t {status} ({self.STATUS.get(status, '?')})")
        self.call, self.status = call, status


_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_I = ctypes.c_int
# name -> argtypes (all return dnnl_status_t unless listed in RESTYPES)
SIGNATURES: dict[str, tuple[Any, ...]] = {
    "dnnl_engine_create": (_PP, _I, ctypes.c_size_t),
    "dnnl_stream_create": (_PP, _P, ctypes.c_uint),
    "dnnl_stream_wait": (_P,),
    "dnnl_memory_desc_create_with_strides": (_PP, _I, Dims, _I, Dims),
    "dnnl_memory_desc_create_with_tag": (_PP, _I, Dims, _I, _I),
    "dnnl_memory_desc_clone": (_PP, _P),
    "dnnl_memory_desc_query": (_P, _I, _P),
    "dnnl_memory_desc_destroy": (_P,),
    "dnnl_memory_desc_equal": (_P, _P),
    "dnnl_memory_desc_get_size": (_P,),
    "dnnl_memory_create": (_PP, _P, _P, _P),
    "dnnl_memory_set_data_handle": (_P, _P),
    "dnnl_memory_destroy": (_P,),
    "dnnl_primitive_attr_create": (_PP,),
    "dnnl_primitive_attr_destroy": (_P,),
    "dnnl_primitive_attr_set_post_ops": (_P, _P),
    "dnnl_post_ops_create": (_PP,),
    "dnnl_post_ops_destroy": (_P,),
    "dnnl_post_ops_append_eltwise": (_P, _I, ctypes.c_float, ctypes.c_float),
    "dnnl_post_ops_append_sum": (_P, ctypes.c_float, ctypes.c_int32, _I),
    "dnnl_post_ops_append_binary": (_P, _I, _P),
    "dnnl_convolution_forward_primitive_desc_create": (_PP, _P, _I, _I, _P, _P, _P, _P, Dims, Dims, Dims, Dims, _P),
    "dnnl_deconvolution_forward_primitive_desc_create": (_PP, _P, _I, _I, _P, _P, _P, _P, Dims, Dims, Dims, Dims,
                                                         _P),
    "dnnl_matmul_primitive_desc_create": (_PP, _P, _P, _P, _P, _P, _P),
    "dnnl_reorder_primitive_desc_create": (_PP, _P, _P, _P, _P, _P),
    "dnnl_softmax_forward_primitive_desc_create": (_PP, _P, _I, _I, _P, _P, _I, _P),
    "dnnl_layer_normalization_forward_primitive_desc_create": (_PP, _P, _I, _P, _P, _P, ctypes.c_float,
                                                               ctypes.c_uint, _P),
    "dnnl_pooling_forward_primitive_desc_create": (_PP, _P, _I, _I, _P, _P, Dims, Dims, Dims, Dims, Dims, _P),
    "dnnl_binary_primitive_desc_create": (_PP, _P, _I, _P, _P, _P, _P),
    "dnnl_resampling_forward_primitive_desc_create": (_PP, _P, _I, _I, _P, _P, _P, _P),
    "dnnl_concat_primitive_desc_create": (_PP, _P, _P, _I, _I, _PP, _P),
    "dnnl_primitive_desc_query": (_P, _I, _I, _P),
    "dnnl_primitive_desc_query_md": (_P, _I, _I),
    "dnnl_primitive_desc_next_impl": (_P,),
    "dnnl_primitive_desc_destroy": (_P,),
    "dnnl_primitive_create": (_PP, _P),
    "dnnl_primitive_execute": (_P, _P, _I, ctypes.POINTER(ExecArg)),
    "dnnl_primitive_destroy": (_P,),
    "dnnl_version": (),
    "dnnl_set_default_fpmath_mode": (_I,),
}
RESTYPES: dict[str, Any] = {"dnnl_memory_desc_equal": _I, "dnnl_memory_desc_get_size": ctypes.c_size_t,
                             "dnnl_primitive_desc_query_md": _P, "dnnl_version": ctypes.POINTER(Version)}


"""HCCL's C-style API on acl device buffers and streams: python capi.py (rootinfo DIR | ranktable FILE)."""

import os
import sys
import time

import numpy as np

import pycann.acl as acl
from pycann.hccl import api as H
from pycann.hccl.constants import HcclDataType as D
from pycann.hccl.constants import HcclReduceOp as O
from pycann.hccl.constants import HcclResult as R

r, w = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
mode, arg = sys.argv[1], sys.argv[2]
assert acl.init() == 0 and acl.rt.set_device(0) == 0
if mode == "rootinfo":
    path = os.path.join(arg, "root_info")
    if r == 0:
        info, ret = H.HcclGetRootInfo()
        assert ret == R.HCCL_SUCCESS and len(info) == 4108, ret
        with open(path + ".tmp", "wb") as f:
            f.write(info)
        os.replace(path + ".tmp", path)
    while not os.path.exists(path):
        time.sleep(0.02)
    with open(path, "rb") as f:
        info = f.read()
    comm, ret = H.HcclCommInitRootInfo(w, info, r)
else:
    comm, ret = H.HcclCommInitClusterInfo(arg, r)
assert ret == R.HCCL_SUCCESS, (ret, H.last_error())
assert H.HcclGetRankSize(comm) == (w, 0) and H.HcclGetRankId(comm) == (r, 0)
stream, ret = acl.rt.create_stream()


def dev(a: np.ndarray) -> int:
    p, ret = acl.rt.malloc(max(a.nbytes, 1), 0)
    assert ret == 0
    if a.nbytes:
        assert acl.rt.memcpy(p, a.nbytes, acl.util.numpy_to_ptr(a), a.nbytes, 1) == 0
    return p


def host(p: int, n: int, dtype: str) -> np.ndarray:
    out = np.empty(n, dtype=dtype)
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), out.nbytes, p, out.nbytes, 2) == 0
    return out


n = 6
s = dev(np.full(n, r + 1, np.float32))
d = dev(np.zeros(n, np.float32))
# asynchronous: queued now, run by the stream
assert H.HcclAllReduce(s, d, n, D.HCCL_DATA_TYPE_FP32, O.HCCL_REDUCE_SUM, comm, stream) == 0
g = dev(np.zeros(n * w, np.int16))
gs = dev(np.arange(n, dtype=np.int16) + 100 * r)
assert H.HcclAllGather(gs, g, n, D.HCCL_DATA_TYPE_INT16, comm, stream) == 0
rs = dev(np.zeros(2, np.int32))
assert H.HcclReduceScatter(dev(np.arange(2 * w, dtype=np.int32)), rs, 2, D.HCCL_DATA_TYPE_INT32,
                           O.HCCL_REDUCE_MAX, comm, stream) == 0
b = dev(np.full(3, r, np.int64))
assert H.HcclBroadcast(b, 3, D.HCCL_DATA_TYPE_INT64, w - 1, comm, stream) == 0
red = dev(np.zeros(2, np.float32))
assert H.HcclReduce(dev(np.full(2, r + 1, np.float32)), red, 2, D.HCCL_DATA_TYPE_FP32, O.HCCL_REDUCE_PROD,
                    0, comm, stream) == 0
a2a = dev(np.zeros(w, np.uint16))
assert H.HcclAlltoAll(dev(np.arange(w, dtype=np.uint16) + 10 * r), 1, D.HCCL_DATA_TYPE_UINT16, a2a, 1,
                      D.HCCL_DATA_TYPE_UINT16, comm, stream) == 0
# all-to-all-v: rank r sends j+1 elements to rank j, at displacement offsets with a gap of 1
sc = [j + 1 for j in range(w)]
sd = [sum(sc[:j]) + j for j in range(w)]
rc = [r + 1] * w
rd = [i * (r + 1) for i in range(w)]
src = np.full(sd[-1] + sc[-1], -1, np.float32)
for j in range(w):
    src[sd[j] : sd[j] + sc[j]] = 100 * r + j
av = dev(np.zeros(w * (r + 1), np.float32))
assert H.HcclAlltoAllV(dev(src), sc, sd, D.HCCL_DATA_TYPE_FP32, av, rc, rd, D.HCCL_DATA_TYPE_FP32,
                       comm, stream) == 0
p2p = dev(np.zeros(4, np.float32))
if r == 0:
    assert H.HcclSend(dev(np.arange(4, dtype=np.float32)), 4, D.HCCL_DATA_TYPE_FP32, 1, comm, stream) == 0
elif r == 1:
    assert H.HcclRecv(p2p, 4, D.HCCL_DATA_TYPE_FP32, 0, comm, stream) == 0
assert H.HcclBarrier(comm, stream) == 0
assert acl.rt.synchronize_stream(stream) == 0, acl.get_recent_err_msg()

assert host(d, n, "float32").tolist() == [w * (w + 1) / 2] * n
assert host(g, n * w, "int16").tolist() == [100 * i + k for i in range(w) for k in range(n)]
assert host(rs, 2, "int32").tolist() == [2 * r, 2 * r + 1]
assert host(b, 3, "int64").tolist() == [w - 1] * 3
if r == 0:
    import math
    assert host(red, 2, "float32").tolist() == [float(math.factorial(w))] * 2
assert host(a2a, w, "uint16").tolist() == [10 * i + r for i in range(w)]
assert host(av, w * (r + 1), "float32").tolist() == [100.0 * i + r for i in range(w) for _ in range(r + 1)]
if r == 1:
    assert host(p2p, 4, "float32").tolist() == [0.0, 1.0, 2.0, 3.0]

# bad arguments: codes at the call, nothing queued
assert H.HcclAllReduce(s, d, n, 99, O.HCCL_REDUCE_SUM, comm, stream) == R.HCCL_E_PARA
assert H.HcclAllReduce(s, d, n, D.HCCL_DATA_TYPE_FP32, 7, comm, stream) == R.HCCL_E_PARA
assert H.HcclAllReduce(s, d, n * 100, D.HCCL_DATA_TYPE_FP32, 0, comm, stream) == R.HCCL_E_PTR
assert "run past the end" in H.last_error(), H.last_error()
assert H.HcclAllReduce(acl.util.numpy_to_ptr(np.zeros(n, np.float32)), d, n, D.HCCL_DATA_TYPE_FP32, 0, comm,
                       stream) == R.HCCL_E_PTR  # host memory is not a device buffer
assert H.HcclAllReduce(s, d, n, D.HCCL_DATA_TYPE_FP32, 0, 12345, stream) == R.HCCL_E_PARA
assert H.HcclBroadcast(b, 3, D.HCCL_DATA_TYPE_INT64, w, comm, stream) == R.HCCL_E_PARA
assert H.HcclSend(s, 1, D.HCCL_DATA_TYPE_FP32, r, comm, stream) == R.HCCL_E_PARA
assert H.HcclCommInitRootInfo(2, b"garbage", 0) == (0, R.HCCL_E_PARA)
assert H.HcclCommInitClusterInfo("/nonexistent/hccl.json", 0) == (0, R.HCCL_E_OPEN_FILE_FAILURE)
# an unsupported dtype fails at the stream (as HCCL reports at execution) and is kept for the comm
assert H.HcclAllReduce(s, d, 1, D.HCCL_DATA_TYPE_FP64, 0, comm, stream) == 0
assert acl.rt.synchronize_stream(stream) != 0
assert H.HcclGetCommAsyncError(comm) == (R.HCCL_E_NOT_SUPPORT, 0)
assert H.HcclCommDestroy(comm) == 0
assert H.HcclCommDestroy(comm) == R.HCCL_E_PARA
print(f"rank {r}: capi ok", flush=True)
os._exit(0)

"""pycann .om container: exact round-trips, memory-mapped weights and every refusal path.

The round-trip graphs here are synthetic (ops pycann does not define, no descs): they load with
``validate=False``, which skips ``om_check`` (tests/ge/test_om_check.py covers that)."""

from __future__ import annotations

import json
import math
import mmap
import struct
import zlib
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from pycann.dtypes import DType, Format, TensorDesc, to_numpy
from pycann.errors import OmFormatError
from pycann.ge import om
from pycann.ge.ir.graph import Graph, Node, verify
from pycann.ge.om import dumps_om, load_om, loads_om, peek_header, save_om
from pycann.ge.om.serialize import MalformedManifest, decode_attr

MANIFEST = {"soc_version": "Ascend310P3", "created": "2024-01-01T00:00:00+00:00"}


# ------------------------------------------------------------------------------ helpers
def assert_value_equal(a: Any, b: Any, where: str = "") -> None:
    """Exact equality including Python types, dtypes and bit patterns (NaN-safe)."""
    assert type(a) is type(b), f"{where}: {type(a)} vs {type(b)}"
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        if a.dtype.kind in "OU":
            assert a.tolist() == b.tolist(), where
        else:
            assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes(), where
    elif isinstance(a, np.generic):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), where
    elif isinstance(a, Graph):
        assert_graph_equal(a, b, where)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_value_equal(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_value_equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, float):
        assert struct.pack("<d", a) == struct.pack("<d", b), f"{where}: {a} vs {b}"
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def assert_graph_equal(a: Graph, b: Graph, where: str = "graph") -> None:
    for f in ("name", "inputs", "outputs", "opsets", "metadata", "descs"):
        assert getattr(a, f) == getattr(b, f), f"{where}.{f}"
    assert_value_equal(a.initializers, b.initializers, f"{where}.initializers")
    assert len(a.nodes) == len(b.nodes)
    for x, y in zip(a.nodes, b.nodes):
        for f in ("op_type", "inputs", "outputs", "name", "domain", "opset", "origin"):
            assert getattr(x, f) == getattr(y, f), f"{where}/{x.name}.{f}"
        assert_value_equal(x.attrs, y.attrs, f"{where}/{x.name}.attrs")


def mapped_base(arr: np.ndarray) -> Any:
    """The object at the bottom of ``arr``'s base chain (through memoryviews)."""
    base: Any = arr
    while True:
        if isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        elif isinstance(base, memoryview):
            base = base.obj
        else:
            return base


def branch(tag: str, inner: Graph | None = None) -> Graph:
    """A tiny If branch with its own initializer; optionally nests another If."""
    nodes = [Node("Add", ["x", f"{tag}_c"], [f"{tag}_y"], name=f"{tag}_add", opset=17)]
    if inner is not None:
        nodes.append(Node("If", ["cond"], [f"{tag}_out"], name=f"{tag}_if", opset=17,
                          attrs={"then_branch": inner, "else_branch": branch(f"{tag}_e")}))
        outputs = [f"{tag}_out"]
    else:
        outputs = [f"{tag}_y"]
    return Graph(nodes=nodes, outputs=outputs, name=tag,
                 initializers={f"{tag}_c": np.full((2,), len(tag), np.float32)})


def sample_graph() -> Graph:
    attrs: dict[str, Any] = {
        "i": 7, "neg": -(2**62), "big": 2**70, "f": 1.0, "f_neg0": -0.0, "f_nan": math.nan,
        "f_inf": -math.inf, "s": "héllo ✓", "empty_s": "", "b": b"\x00\xffraw", "bool": True,
        "none": None, "ints": [1, -2, 3], "floats": [0.5, 1.0, math.inf], "mixed_nums": [1, 2.0],
        "empty": [], "strs": ["a", "β"], "bytes_list": [b"x", b""], "nested": [[1], [2.5], []],
        "tup": (1, "a"), "dict": {"k": [1.0], "n": {"x": 2}},
        "np_f32": np.float32(0.1), "np_i64": np.int64(-5), "np_bool": np.bool_(True),
        "t_f32": np.arange(6, dtype=np.float32).reshape(2, 3), "t_0d": np.array(3, np.int64),
        "t_empty": np.zeros((0, 4), np.float16), "t_str": np.array([b"ab", "c"], dtype=object),
        "t_list": [np.ones(2, np.int8), np.zeros(3, np.uint16)],
        "graphs": [branch("g0"), branch("g1")],
    }
    nodes = [
        Node("Custom", ["x", "w", ""], ["a"], attrs=attrs, name="n0", domain="com.pycann", opset=1,
             origin=["orig0", "orig1"]),
        Node("If", ["cond"], ["y"], name="if0", opset=17,
             attrs={"then_branch": branch("then", inner=branch("inner")), "else_branch": branch("else")}),
    ]
    return Graph(
        nodes=nodes, inputs=["x", "cond"], outputs=["a", "y"],
        initializers={"w": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
                      "scalar": np.array(2.5, np.float64), "none0": np.zeros((3, 0), np.int32)},
        descs={"x": TensorDesc(1, ("batch", None, 3), Format.NCHW), "cond": TensorDesc(9, ()),
               "a": TensorDesc(1, None), "y": TensorDesc(10, ("batch", 2))},
        name="main_graph", opsets={"": 17, "com.pycann": 1}, metadata={"producer": "тест"},
    )


def every_dtype_array(dtype_id: DType) -> np.ndarray:
    dt = to_numpy(dtype_id)
    if dtype_id == DType.STRING:
        return np.array([["x", b"\x01y"], ["", "ζ"]], dtype=object)
    if dtype_id == DType.BOOL:
        return np.array([[True, False, True]])
    vals = np.array([[0, 1, -1], [2, 3, 4]], dtype=np.float64)
    if dt.kind == "u" or dtype_id in (DType.UINT4, DType.UINT2, DType.FLOAT8E8M0):
        vals = np.abs(vals)
    return vals.astype(dt)


@pytest.fixture
def om_path(tmp_path: Path) -> Path:
    p = tmp_path / "model.om"
    save_om(p, sample_graph(), MANIFEST)
    return p


def rewrite(data: bytes, *, manifest: Any = None, weights: bytes | None = None) -> bytes:
    """Re-assemble a file with a replaced manifest/weights and valid checksums (a foreign writer)."""
    f = list(om._HEAD.unpack_from(data))
    mo, ml, wo = f[6], f[7], f[8]
    if manifest is None:
        mbytes = data[mo:mo + ml]
    else:
        mbytes = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    wbytes = data[wo:] if weights is None else weights
    new_wo = om._align(om.HEADER_SIZE + len(mbytes))
    f[5], f[7], f[8], f[9], f[10], f[11] = (zlib.crc32(mbytes), len(mbytes), new_wo, len(wbytes),
                                            new_wo + len(wbytes), zlib.crc32(wbytes))
    head = om._HEAD.pack(*f)
    body = mbytes + bytes(new_wo - om.HEADER_SIZE - len(mbytes)) + wbytes
    return head + om._CRC.pack(zlib.crc32(head)) + body


# --------------------------------------------------------------------------- round trips
def test_round_trip_every_attr_kind_and_nested_if(om_path: Path) -> None:
    g = sample_graph()
    m = load_om(om_path, validate=False)
    assert_graph_equal(g, m.graph)
    verify(m.graph)
    assert m.path == om_path
    assert m.manifest["soc_version"] == "Ascend310P3"
    assert m.manifest["format_version"] == "1.0" and m.manifest["pycann_version"]
    assert m.manifest["created"] == MANIFEST["created"]  # a pinned timestamp is kept
    inner = m.graph.nodes[1].attrs["then_branch"].nodes[1].attrs["then_branch"]
    assert inner.initializers["inner_c"].tolist() == [5.0, 5.0]
    assert mapped_base(inner.initializers["inner_c"]).__class__ is mmap.mmap  # subgraph weights too


@pytest.mark.parametrize("dtype_id", [d for d in DType if d != DType.UNDEFINED], ids=lambda d: d.name)
def test_every_dtype_round_trips(dtype_id: DType) -> None:
    arr = every_dtype_array(dtype_id)
    g = Graph(initializers={"t": arr, "t0": arr.reshape(-1)[:1].reshape(()), "te": arr[:0]},
              nodes=[Node("Constant", [], ["c"], attrs={"value": arr})], outputs=["c"])
    m = loads_om(dumps_om(g, {}), validate=False)
    assert_graph_equal(g, m.graph)


def test_str_array_and_big_endian_and_non_contiguous() -> None:
    g = Graph(initializers={
        "u": np.array(["ab", "ć"]),
        "be": np.arange(4, dtype=">i4"),
        "strided": np.arange(20, dtype=np.float32).reshape(4, 5)[:, ::2],
        "fortran": np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)),
    })
    m = loads_om(dumps_om(g, {}), validate=False)
    init = m.graph.initializers
    assert init["u"].dtype.kind == "U" and init["u"].tolist() == ["ab", "ć"]
    assert init["be"].dtype == np.dtype("<i4") and init["be"].tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(init["strided"], g.initializers["strided"])
    np.testing.assert_array_equal(init["fortran"], g.initializers["fortran"])


def test_weights_are_read_only_memory_maps_64_aligned(om_path: Path) -> None:
    m = load_om(om_path, validate=False)
    arrays = [*m.graph.initializers.values(), m.graph.nodes[0].attrs["t_f32"]]
    for a in arrays:
        assert not a.flags.writeable
        if a.size:
            assert isinstance(mapped_base(a), mmap.mmap)
            assert a.ctypes.data % om.ALIGN == 0
    with pytest.raises(ValueError):
        arrays[0][...] = 0
    raw = om_path.read_bytes()
    w = m.graph.initializers["w"]
    off = raw.index(w.tobytes())
    assert off % om.ALIGN == 0 and off >= peek_header(om_path)["weights_offset"]


def test_shared_array_stored_once() -> None:
    big = np.ones(1000, np.float64)
    one = dumps_om(Graph(initializers={"a": big}), {})
    two = dumps_om(Graph(initializers={"a": big, "b": big}), {})
    assert loads_om(two, validate=False).weights_bytes == loads_om(one, validate=False).weights_bytes == 8000
    m = loads_om(two, validate=False)
    assert np.shares_memory(m.graph.initializers["a"], m.graph.initializers["b"])


def test_unicode_manifest_and_save_equals_dumps(tmp_path: Path) -> None:
    man = {"note": "模型 ✓ 𝄞", "opts": {"ключ": [1, 2.5, None, True]}, "created": "2000-01-01T00:00:00"}
    p = tmp_path / "u.om"
    n = save_om(p, sample_graph(), man)
    assert n == p.stat().st_size
    assert p.read_bytes() == dumps_om(sample_graph(), man)
    got = load_om(p, validate=False).manifest
    assert {k: got[k] for k in man} == man
    assert not list(tmp_path.glob(".*.tmp"))  # no temp file left behind


def test_created_is_added(tmp_path: Path) -> None:
    m = loads_om(dumps_om(Graph(), {"a": 1}), validate=False)
    assert m.manifest["a"] == 1 and m.manifest["created"][:2] == "20"


def test_peek_header(om_path: Path) -> None:
    info = peek_header(om_path)
    assert info["format_version"] == "1.0"
    assert info["file_bytes"] == om_path.stat().st_size
    assert info["weights_offset"] % om.ALIGN == 0
    assert info["manifest"]["soc_version"] == "Ascend310P3" and "graph" not in info["manifest"]
    assert info["graph"]["num_nodes"] == 2 and info["graph"]["inputs"] == ["x", "cond"]
    assert info["graph"]["descs"]["x"]["shape"] == ["batch", None, 3]
    assert "manifest" not in peek_header(om_path, manifest=False)


def test_unstorable_values_are_rejected() -> None:
    g = Graph(nodes=[Node("X", [], ["y"], name="bad", attrs={"obj": object()})])
    with pytest.raises(TypeError, match="bad.*'obj'"):
        dumps_om(g, {})
    with pytest.raises(ValueError, match="reserved"):
        dumps_om(Graph(), {"graph": 1})
    with pytest.raises(TypeError, match="JSON"):
        dumps_om(Graph(), {"x": {1, 2}})


# ------------------------------------------------------------------------------- refusals
def test_truncated(om_path: Path, tmp_path: Path) -> None:
    data = om_path.read_bytes()
    for cut in (len(data) - 1, om.HEADER_SIZE + 3, 40, 5):
        p = tmp_path / f"cut{cut}.om"
        p.write_bytes(data[:cut])
        with pytest.raises(OmFormatError, match="truncated") as e:
            load_om(p)
        assert str(p) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("where", ["header", "manifest", "weights"])
def test_corrupted(om_path: Path, where: str) -> None:
    data = bytearray(om_path.read_bytes())
    info = peek_header(om_path)
    pos = {"header": 30, "manifest": om.HEADER_SIZE + 5, "weights": len(data) - 1}[where]
    data[pos] ^= 0x10
    with pytest.raises(OmFormatError, match=f"corrupted.*{where}.*rebuild"):
        loads_om(bytes(data))
    if where == "weights":  # verify=False trusts the weights and maps them as they are
        assert loads_om(bytes(data), verify=False, validate=False).weights_bytes == info["weights_bytes"]


def test_trailing_bytes(om_path: Path) -> None:
    with pytest.raises(OmFormatError, match="corrupted"):
        loads_om(om_path.read_bytes() + b"\0")


@pytest.mark.parametrize("data", [b"", b"\x08\x07\x12\x04onnx", b"PK\x03\x04" + bytes(200), b"PYCANNOX" + bytes(200)],
                         ids=["empty", "onnx", "zip", "near-magic"])
def test_not_an_om(tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "x.om"
    p.write_bytes(data)
    with pytest.raises(OmFormatError, match="empty|not a pycann .om"):
        load_om(p)
    with pytest.raises(OmFormatError):
        peek_header(p)


@pytest.mark.parametrize("magic", [b"IMOD", b"DOMI", struct.pack("<I", 0x444F4D49), struct.pack(">I", 0x444F4D49)])
def test_huawei_om_refused(tmp_path: Path, magic: bytes) -> None:
    p = tmp_path / "huawei.om"
    p.write_bytes(magic + struct.pack("<I", 256) + bytes(1000))
    for fn in (load_om, peek_header):
        with pytest.raises(OmFormatError, match="Huawei CANN .om built by the real ATC.*pycann's atc"):
            fn(p)


def test_version_compatibility(om_path: Path) -> None:
    data = bytearray(om_path.read_bytes())

    def with_version(major: int, minor: int) -> bytes:
        d = bytearray(data)
        struct.pack_into("<HH", d, 8, major, minor)
        struct.pack_into("<I", d, om._HEAD.size, zlib.crc32(bytes(d[: om._HEAD.size])))
        return bytes(d)

    for major in (0, 2):
        with pytest.raises(OmFormatError, match=rf"format {major}\.0.*rebuild it with this pycann's atc"):
            loads_om(with_version(major, 0))
    newer_minor = loads_om(with_version(1, 9), validate=False)  # minor bumps only add things: still readable
    assert_graph_equal(sample_graph(), newer_minor.graph)


def test_malformed_manifest_from_a_foreign_writer(om_path: Path) -> None:
    data = om_path.read_bytes()
    man = json.loads(data[om.HEADER_SIZE:om.HEADER_SIZE + peek_header(om_path)["manifest_bytes"]])
    man["graph"]["initializers"][0]["offset"] = 10**9  # points past the weights
    with pytest.raises(OmFormatError, match="malformed manifest.*outside"):
        loads_om(rewrite(data, manifest=man))
    man["graph"]["initializers"] = [{"name": "x", "dtype": 1, "shape": [2], "offset": 0, "nbytes": 4}]
    with pytest.raises(OmFormatError, match="malformed manifest.*nbytes"):
        loads_om(rewrite(data, manifest=man))
    with pytest.raises(OmFormatError, match="no graph"):
        loads_om(rewrite(data, manifest={"x": 1}))
    with pytest.raises(OmFormatError, match="not valid JSON"):
        loads_om(rewrite(data, manifest=b'{"graph": '))


def test_decode_attr_rejects_unknown_kinds() -> None:
    for obj in ({"t": "pickle", "v": "x"}, {"t": "int", "v": 1.5}, 3, {"t": "ints", "v": [True]}):
        with pytest.raises(MalformedManifest):
            decode_attr(obj, lambda *a: np.zeros(0))


def test_ml_dtypes_sanity() -> None:
    # int4 arrays keep one byte per element in the weights section
    g = Graph(initializers={"q": np.array([-8, 7, 0], dtype=ml_dtypes.int4)})
    m = loads_om(dumps_om(g, {}), validate=False)
    assert m.weights_bytes == 3 and m.graph.initializers["q"].tolist() == [-8, 7, 0]


def _resident_kib() -> int:
    """This process's resident set in KiB (Linux)."""
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])


@pytest.mark.skipif(not hasattr(mmap, "MADV_DONTNEED") or not Path("/proc/self/status").exists(),
                    reason="needs madvise and /proc")
def test_release_pages_drops_weights_from_rss_and_keeps_values(tmp_path: Path) -> None:
    """load_om releases the pages the CRC pass touched; ``release_pages`` drops them again after
    use; the values read back afterwards are unchanged (re-faulted from the page cache)."""
    big = np.arange(16 << 20, dtype=np.float32).reshape(4096, 4096)  # 64 MiB
    g = Graph(nodes=[Node("Identity", ["w"], ["y"])], inputs=[], outputs=["y"], initializers={"w": big})
    path = tmp_path / "big.om"
    save_om(path, g, {})
    m = load_om(path, validate=False)
    assert m.release_pages is not None
    w = m.graph.initializers["w"]
    before = _resident_kib()
    total = float(w.sum(dtype=np.float64))  # touches every page
    touched = _resident_kib()
    m.release_pages()
    after = _resident_kib()
    assert touched - before > 48 << 10 and touched - after > 48 << 10, (before, touched, after)
    assert float(w.sum(dtype=np.float64)) == total == float(big.sum(dtype=np.float64))
    assert loads_om(path.read_bytes(), validate=False).release_pages is None


def test_running_an_om_does_not_import_onnx(tmp_path: Path) -> None:
    """onnx and protobuf (~20 MB of RSS) load only to compile; an .om runs without them."""
    import subprocess
    import sys

    g = Graph(nodes=[Node("Relu", ["x"], ["y"], opset=14)], inputs=["x"], outputs=["y"], opsets={"": 14})
    g.descs["x"] = TensorDesc(DType.FLOAT, (2, 3))
    g.descs["y"] = TensorDesc(DType.FLOAT, (2, 3))
    path = tmp_path / "relu.om"
    save_om(path, g, {})
    code = ("import sys, numpy as np\nfrom pycann.acl.session import InferSession\n"
            f"s = InferSession(0, {str(path)!r})\n"
            "y = s.infer([np.array([[-1, 2, -3], [4, -5, 6]], np.float32)])[0]\n"
            "print(y.tolist(), 'onnx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[[0.0, 2.0, 0.0], [4.0, 0.0, 6.0]] False", out.stdout + out.stderr


def test_background_crc_refuses_a_corrupted_weight_at_load(tmp_path: Path) -> None:
    """``load_om(verify="background")`` checks the weights on a thread while the caller builds:
    ``wait_verified`` raises for a flipped weight byte; ``LoadedModel.from_file`` (which uses it)
    and ``InferSession`` refuse the file with the same one-line error; an intact file loads."""
    from onnx import TensorProto, helper, numpy_helper

    from pycann.acl.session import InferSession
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.run.model import LoadedModel

    w = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8) / 64, "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    good = tmp_path / "good.om"
    compile_model(m).save(good)
    x = np.ones((2, 8), np.float32)
    np.testing.assert_allclose(LoadedModel.from_file(good).run([x])[0], x @ (np.arange(64).reshape(8, 8) / 64),
                               rtol=1e-6)
    intact = load_om(good, verify="background")
    intact.wait_verified()
    intact.wait_verified()  # (a second wait is a no-op)
    data = bytearray(good.read_bytes())
    data[-1] ^= 0x10
    bad = tmp_path / "bad.om"
    bad.write_bytes(bytes(data))
    pending = load_om(bad, verify="background")  # the header and manifest were fine: no error yet
    with pytest.raises(OmFormatError, match="weights checksum mismatch"):
        pending.wait_verified()
    for load in (lambda: LoadedModel.from_file(bad), lambda: InferSession(0, str(bad))):
        with pytest.raises(OmFormatError, match="corrupted .weights checksum mismatch.*rebuild") as e:
            load()
        assert "\n" not in str(e.value)

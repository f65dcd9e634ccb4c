"""Caffe's ``NetParameter`` messages, from the vendored ``proto/caffe.proto`` (BVLC Caffe's spec).

No maintained PyPI package ships a ``caffe_pb2`` that loads with protobuf 4+ (x2paddle's and
caffe-onnx's are old-style generated code that today's protobuf refuses), so pycann keeps BVLC's
``caffe.proto`` text (BSD-2-Clause) and compiles it with protoc from ``grpcio-tools`` (PyPI) into
a ``FileDescriptorSet``, cached under ``~/.cache/pycann/proto`` by the file's hash. Message
classes come from protobuf's ``message_factory`` in a private descriptor pool: no generated
Python code, so no gencode/runtime version coupling.

Forks' extra fields: unknown fields of a binary ``.caffemodel`` are skipped by protobuf itself;
a ``.prototxt`` is parsed with ``allow_unknown_field`` (each skipped field is reported).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from pycann import config
from pycann.errors import ModelError

PROTO = Path(__file__).with_name("proto") / "caffe.proto"
_HINT = "pip install grpcio-tools (protoc for the vendored caffe.proto; Caffe itself is not needed)"


def _cache_dir() -> Path:
    return config.proto_cache_dir()


def _descriptor_set() -> bytes:
    text = PROTO.read_bytes()
    digest = hashlib.sha256(text).hexdigest()[:16]
    cached = _cache_dir() / f"caffe-{digest}.desc"
    if cached.is_file() and cached.stat().st_size > 0:
        return cached.read_bytes()
    try:
        import grpc_tools  # noqa: F401 - only to test that protoc is there
    except ImportError:
        raise ModelError(f"reading Caffe models needs protoc to compile caffe.proto: {_HINT}", code="E19999") from None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "caffe.desc"
        r = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO.parent}",
                            f"--descriptor_set_out={out}", PROTO.name], capture_output=True, text=True)
        if r.returncode != 0 or not out.is_file():
            raise ModelError(f"protoc failed on {PROTO}: {r.stderr.strip()[:500]}", code="E19999")
        data = out.read_bytes()
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp_path = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp_path.write_bytes(data)
        tmp_path.replace(cached)
    except OSError:
        pass  # a read-only home still works, it compiles each time
    return data


@lru_cache(maxsize=1)
def net_parameter_class() -> Any:
    """The ``caffe.NetParameter`` message class (compiled once per process)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fds = descriptor_pb2.FileDescriptorSet.FromString(_descriptor_set())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("caffe.NetParameter"))


def read_prototxt(path: str | os.PathLike[str], warn: Any = None) -> Any:
    """Parse a ``.prototxt`` network (text format). Unknown fields (forks) are skipped.

    Raises ``ModelError`` (E10001 missing file; E19999 bad text with the line and column)."""
    from google.protobuf import text_format

    p = Path(path)
    if not p.is_file():
        raise ModelError(f"model file '{path}' does not exist", code="E10001")
    net = net_parameter_class()()
    text = p.read_text(encoding="utf-8", errors="replace")
    try:
        text_format.Parse(text, net, allow_unknown_field=True, allow_unknown_extension=True)
    except text_format.ParseError as e:
        raise ModelError(f"cannot parse '{path}' as a Caffe prototxt: {e}") from None
    except RecursionError:  # protobuf's text parser recurses per nested message: a damaged file crashed it
        raise ModelError(f"cannot parse '{path}' as a Caffe prototxt: its messages nest deeper than Python's "
                         "recursion limit (a deploy prototxt nests a few levels)") from None
    return net


def read_caffemodel(path: str | os.PathLike[str]) -> Any:
    """Parse a binary ``.caffemodel`` (a ``NetParameter`` with blobs). Raises ``ModelError``."""
    p = Path(path)
    if not p.is_file():
        raise ModelError(f"weight file '{path}' does not exist", code="E10001")
    data = p.read_bytes()
    if not data:
        raise ModelError(f"weight file '{path}' is empty (0 bytes)", code="E10001")
    net = net_parameter_class()()
    try:
        net.ParseFromString(data)
    except Exception as e:  # protobuf DecodeError
        raise ModelError(f"cannot parse '{path}' as a .caffemodel (binary NetParameter): {e}") from None
    return net

"""pycann's offline model file (``.om``): write, read (memory-mapped) and peek.

The file is pycann's own container, not Huawei's (whose 256-byte ``ModelFileHeader`` starts with
"DOMI" 0x444F4D49, cann-interfaces.md §2.3); such files are recognised and refused with a hint.
Everything is little-endian::

    offset  size  field
         0     8  magic b"PYCANNOM"
         8     2  format major (uint16)   } bytes 0-11 never move, so any reader can tell
        10     2  format minor (uint16)   } which format version wrote a file
        12     4  header size (uint32; 128 in format 1.x)
        16     4  flags (uint32; 0, reserved)
        20     4  manifest CRC-32
        24     8  manifest offset (uint64; = header size)
        32     8  manifest length
        40     8  weights offset (uint64; multiple of 64)
        48     8  weights length
        56     8  total file length
        64     4  weights CRC-32 (over the whole weights section, padding included)
        68     4  reserved (0)
        72    24  pycann version that wrote the file (ASCII, NUL-padded)
        96    28  reserved (0)
       124     4  header CRC-32 (over bytes 0-123)
       128     -  manifest: UTF-8 JSON ``{"format_version", "pycann_version", "created",
                  <caller keys>..., "graph": <pycann.ge.om.serialize.encode_graph>}``
                  zero padding up to the weights offset
                  weights: raw tensor bytes, each tensor at a 64-byte aligned offset
                  (relative to the weights offset, which is itself 64-aligned)

Compatibility: a different major version is refused ("rebuild it"); a newer minor is read,
ignoring header bytes and JSON keys it does not know.

Checksums are CRC-32 (``zlib.crc32``): they catch truncation and bit rot, which is all a
checksum here is for — the file is not a trust boundary, safety comes from loading only JSON and
raw numeric bytes (no pickle, no eval, nothing executed). Measured over 440 MB on the dev box
(page cache warm): crc32 0.06 s, sha256 0.22 s, blake2b 0.33 s; a verified ``load_om`` of a
440 MB model takes 0.08 s, with ``verify=False`` (skips the weights CRC) under 1 ms.

Loading maps the file read-only (``mmap``) and returns ``np.frombuffer`` views, so weights are
neither read nor copied until used. ``save_om`` writes a temporary file and renames it over the
target, so a process that has the old file mapped keeps seeing intact data.
"""

from __future__ import annotations

import io
import json
import mmap
import os
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from pycann import __version__
from pycann.errors import OmFormatError, OmInvalidModelError
from pycann.ge.ir.graph import Graph
from pycann.ge.om.check import OmInvalid, check_graph, check_manifest
from pycann.ge.om.serialize import MalformedManifest, decode_graph, encode_graph

MAGIC = b"PYCANNOM"
FORMAT_VERSION = (1, 0)
HEADER_SIZE = 128
ALIGN = 64
# Huawei ModelFileHeader magic 0x444F4D49, as written little-endian ("IMOD") or big-endian ("DOMI").
HUAWEI_MAGICS = (b"IMOD", b"DOMI")

_HEAD = struct.Struct("<8sHHIIIQQQQQII24s28x")  # bytes 0-123; the header CRC follows
_CRC = struct.Struct("<I")
assert _HEAD.size + _CRC.size == HEADER_SIZE

_REBUILD = "rebuild it with this pycann's atc"


@dataclass
class OmModel:
    """A loaded .om: the graph (weights are read-only views of the mapped file), the manifest
    (the caller's keys plus ``format_version``, ``pycann_version``, ``created``), the size of the
    weights section and the file it came from (``None`` for ``loads_om``)."""

    graph: Graph
    manifest: dict[str, Any]
    weights_bytes: int
    path: Path | None = None
    # Drops the mapped weight pages from this process's resident memory (they are re-read from
    # the page cache on next use): after the CRC pass and once kernels have packed their
    # weights. None for ``loads_om``.
    release_pages: Callable[[], None] | None = None
    # ``load_om(..., verify="background")``: the weights' CRC still running on a thread
    _verifying: Callable[[], None] | None = None

    def wait_verified(self) -> None:
        """Wait for a background CRC of the weights (``load_om(verify="background")``); raises
        ``OmFormatError`` when it does not match. A no-op once checked, or when none runs."""
        check, self._verifying = self._verifying, None
        if check is not None:
            check()


@dataclass(frozen=True)
class _Header:
    major: int
    minor: int
    header_size: int
    manifest_crc: int
    manifest_offset: int
    manifest_length: int
    weights_offset: int
    weights_length: int
    file_length: int
    weights_crc: int
    pycann_version: str


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


# -------------------------------------------------------------------------------- writing
class _Packer:
    """Lays out the weights section: 64-aligned offsets, one copy per distinct array object."""

    def __init__(self) -> None:
        self.chunks: list[tuple[int, np.ndarray]] = []
        self.size = 0
        self._seen: dict[int, tuple[int, int]] = {}

    def put(self, arr: np.ndarray) -> tuple[int, int]:
        if id(arr) in self._seen:  # e.g. one initializer shared by several subgraphs
            return self._seen[id(arr)]
        offset = _align(self.size)
        self.chunks.append((offset, arr))  # holding arr keeps its id() unique
        self.size = offset + arr.nbytes
        self._seen[id(arr)] = (offset, arr.nbytes)
        return offset, arr.nbytes


def _manifest_bytes(graph: Graph, manifest: dict[str, Any], packer: _Packer) -> bytes:
    if "graph" in manifest:
        raise ValueError("manifest key 'graph' is reserved for the serialized graph")
    body: dict[str, Any] = dict(manifest)
    body["format_version"] = f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}"
    body["pycann_version"] = __version__
    # a caller may pin "created" (reproducible builds); otherwise it is the save time
    from datetime import datetime, timezone  # (writing only: a loader never imports them)

    body.setdefault("created", datetime.now(timezone.utc).isoformat(timespec="seconds"))
    body["graph"] = encode_graph(graph, packer.put)
    try:
        text = json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise TypeError(f"the .om manifest must be plain JSON data (str/int/float/bool/list/dict): {e}") from None
    return text.encode("utf-8")


def _write(f: IO[bytes], graph: Graph, manifest: dict[str, Any]) -> int:
    """Write a whole .om to the seekable binary stream ``f``; returns the byte count."""
    packer = _Packer()
    mbytes = _manifest_bytes(graph, manifest, packer)
    weights_offset = _align(HEADER_SIZE + len(mbytes))
    file_length = weights_offset + packer.size
    f.write(bytes(HEADER_SIZE))  # placeholder: the weights CRC is known only after writing
    f.write(mbytes)
    f.write(bytes(weights_offset - HEADER_SIZE - len(mbytes)))
    crc, pos = 0, 0
    for offset, arr in packer.chunks:
        if offset > pos:
            pad = bytes(offset - pos)
            crc = zlib.crc32(pad, crc)
            f.write(pad)
        if arr.nbytes:
            raw = memoryview(arr.reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # uint8: ml_dtypes have no buffer format
            crc = zlib.crc32(raw, crc)
            f.write(raw)
        pos = offset + arr.nbytes
    head = _HEAD.pack(
        MAGIC, FORMAT_VERSION[0], FORMAT_VERSION[1], HEADER_SIZE, 0, zlib.crc32(mbytes),
        HEADER_SIZE, len(mbytes), weights_offset, packer.size, file_length, crc, 0,
        __version__.encode("ascii", "replace")[:24],
    )
    f.seek(0)
    f.write(head + _CRC.pack(zlib.crc32(head)))
    return file_length


def save_om(path: str | os.PathLike[str], graph: Graph, manifest: dict[str, Any]) -> int:
    """Write ``graph`` and ``manifest`` to ``path`` as a pycann .om; returns the bytes written.

    Raises ``TypeError`` for attribute/initializer values or manifest entries that cannot be
    stored (the message names the node and attribute).
    """
    path = Path(path)
    # a unique sibling (same file system, so the rename is atomic; created with the umask's mode)
    import uuid

    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "xb") as f:
            n = _write(f, graph, manifest)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return n


def dumps_om(graph: Graph, manifest: dict[str, Any]) -> bytes:
    """The bytes ``save_om`` would write."""
    buf = io.BytesIO()
    _write(buf, graph, manifest)
    return buf.getvalue()


# -------------------------------------------------------------------------------- reading
def _parse_header(head: bytes, size: int, what: str) -> _Header:
    """Validate the fixed header (``head`` = the first bytes of the file, ``size`` = its length)."""
    if head[:4] in HUAWEI_MAGICS:
        raise OmFormatError(
            f"{what} is a Huawei CANN .om built by the real ATC; pycann cannot run it — "
            "compile the original ONNX model with pycann's atc"
        )
    if size == 0:
        raise OmFormatError(f"{what} is empty, not a pycann .om model; {_REBUILD}")
    if head[: len(MAGIC)] != MAGIC[: len(head)]:
        raise OmFormatError(
            f"{what} is not a pycann .om model (it starts with {bytes(head[:8])!r}); "
            "compile the ONNX model with pycann's atc and load the .om it writes"
        )
    if size < HEADER_SIZE:
        raise OmFormatError(f"{what} is truncated: {size} bytes, shorter than the .om header; {_REBUILD}")
    major, minor = struct.unpack_from("<HH", head, 8)
    if major != FORMAT_VERSION[0]:
        raise OmFormatError(
            f"{what} uses .om format {major}.{minor}, but pycann {__version__} reads format "
            f"{FORMAT_VERSION[0]}.x; {_REBUILD}"
        )
    if zlib.crc32(head[: _HEAD.size]) != _CRC.unpack_from(head, _HEAD.size)[0]:
        raise OmFormatError(f"{what} is corrupted (header checksum mismatch); {_REBUILD}")
    f = _HEAD.unpack_from(head)
    h = _Header(major, minor, f[3], f[5], f[6], f[7], f[8], f[9], f[10], f[11],
                f[13].rstrip(b"\0").decode("ascii", "replace"))
    if size < h.file_length:
        raise OmFormatError(
            f"{what} is truncated: {size} of {h.file_length} bytes (an interrupted copy or write?); "
            f"copy it again or {_REBUILD}"
        )
    if size > h.file_length:
        raise OmFormatError(
            f"{what} is corrupted: {size} bytes but its header says {h.file_length}; {_REBUILD}"
        )
    if not (
        HEADER_SIZE <= h.header_size <= h.manifest_offset
        and h.manifest_offset + h.manifest_length <= h.weights_offset
        and h.weights_offset % ALIGN == 0
        and h.weights_offset + h.weights_length == h.file_length
    ):
        raise OmFormatError(f"{what} is corrupted (inconsistent section offsets); {_REBUILD}")
    return h


def _parse_manifest(raw: bytes | memoryview, h: _Header, what: str) -> dict[str, Any]:
    if zlib.crc32(raw) != h.manifest_crc:
        raise OmFormatError(f"{what} is corrupted (manifest checksum mismatch); {_REBUILD}")
    try:
        body = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise OmFormatError(f"{what} is corrupted (manifest is not valid JSON: {e}); {_REBUILD}") from None
    if not isinstance(body, dict) or not isinstance(body.get("graph"), dict):
        raise OmFormatError(f"{what} is corrupted (manifest has no graph); {_REBUILD}")
    return body


def _load(buf: Any, h: _Header, what: str, verify: bool, path: Path | None, validate: bool = True) -> OmModel:
    """Decode an .om held in ``buf`` (an mmap or read-only memoryview) whose header ``h`` has
    been validated; the arrays are views of ``buf``. ``validate`` runs ``om_check`` on the
    graph and manifest."""
    with memoryview(buf) as mv:  # slicing a memoryview does not copy, slicing an mmap would
        body = _parse_manifest(mv[h.manifest_offset : h.manifest_offset + h.manifest_length], h, what)
        if verify and zlib.crc32(mv[h.weights_offset : h.file_length]) != h.weights_crc:
            raise OmFormatError(f"{what} is corrupted (weights checksum mismatch); {_REBUILD}")

    def get(dtype: np.dtype, shape: tuple[int, ...], offset: int, nbytes: int) -> np.ndarray:
        if offset < 0 or offset + nbytes > h.weights_length:
            raise MalformedManifest(f"tensor bytes [{offset}, {offset + nbytes}) lie outside the weights")
        if nbytes == 0:
            arr = np.empty(shape, dtype)
        else:
            arr = np.frombuffer(buf, dtype, nbytes // dtype.itemsize, h.weights_offset + offset).reshape(shape)
        arr.flags.writeable = False  # no-op for the mapped views, which are read-only already
        return arr

    try:
        graph = decode_graph(body.pop("graph"), get)
    except (MalformedManifest, KeyError, TypeError, ValueError, AttributeError, RecursionError) as e:
        raise OmFormatError(f"{what} is corrupted (malformed manifest: {type(e).__name__}: {e}); {_REBUILD}") from None
    if validate:
        try:
            check_graph(graph)
            check_manifest(body, graph)
        except OmInvalid as e:
            raise OmInvalidModelError(f"{what} is not a valid model: {e}; {_REBUILD}") from None
    return OmModel(graph=graph, manifest=body, weights_bytes=h.weights_length, path=path)


def _background_crc(mm: mmap.mmap, h: _Header, what: str) -> Callable[[], None]:
    """Start the weights' CRC on a thread (zlib releases the GIL: it runs beside the caller's plan
    building, on another core) and return the function that waits for it and raises
    ``OmFormatError`` on a mismatch."""
    view = memoryview(mm)[h.weights_offset : h.file_length]
    result: list[Any] = []

    def crc() -> None:
        try:
            result.append(zlib.crc32(view))
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            result.append(e)

    worker = threading.Thread(target=crc, name="pycann-om-crc", daemon=True)
    worker.start()

    def wait() -> None:
        worker.join()
        view.release()
        if isinstance(result[0], BaseException):
            raise result[0]
        if result[0] != h.weights_crc:
            raise OmFormatError(f"{what} is corrupted (weights checksum mismatch); {_REBUILD}")

    return wait


def load_om(path: str | Path, *, verify: bool | str = True, validate: bool = True) -> OmModel:
    """Load a pycann .om, memory-mapping its weights (read-only, no copy).

    ``verify=False`` skips the CRC over the weights section (the header and manifest are always
    checked); ``verify="background"`` runs it on a thread: the caller must call
    ``OmModel.wait_verified()`` before it trusts a weight value (``LoadedModel.from_file`` builds
    the plan meanwhile, then waits). ``validate=False`` skips ``pycann.ge.om.check`` (graph structure, known ops,
    attribute kinds, manifest field types): only for tools that read a container whose graph
    is not meant to run. Raises ``OmFormatError`` for truncated, corrupted, foreign, Huawei-built or
    incompatible-version files; ``OSError`` if the file cannot be opened.
    """
    path = Path(path)
    what = f"'{path}'"
    with open(path, "rb") as f:
        h = _parse_header(f.read(HEADER_SIZE), os.fstat(f.fileno()).st_size, what)
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # stays valid after f closes
    background = verify == "background"
    try:
        om = _load(mm, h, what, bool(verify) and not background, path, validate)
    except BaseException:
        try:
            mm.close()
        except BufferError:  # some arrays already view it; the GC will unmap
            pass
        raise
    om.release_pages = _releaser(mm)
    if background:
        om._verifying = _background_crc(mm, h, what)  # (the caller releases the pages after it)
    else:
        om.release_pages()  # the CRC pass touched every page: a 440 MB model would stay resident
    return om


def _releaser(mm: mmap.mmap) -> Callable[[], None]:
    """``madvise(MADV_DONTNEED)`` over a read-only file mapping: the pages leave the resident set
    and are faulted back from the page cache when read again (Linux; elsewhere a no-op)."""
    advice = getattr(mmap, "MADV_DONTNEED", None)

    def release() -> None:
        if advice is None or mm.closed:
            return
        try:
            mm.madvise(advice)
        except (OSError, ValueError):  # pragma: no cover - platform without madvise support
            pass

    return release


def loads_om(data: bytes, *, verify: bool = True, validate: bool = True) -> OmModel:
    """Load a pycann .om from memory (as ``load_om``); weights are read-only views of ``data``."""
    buf = memoryview(data).toreadonly().cast("B")
    what = "the given .om bytes"
    return _load(buf, _parse_header(bytes(buf[:HEADER_SIZE]), len(buf), what), what, verify, None, validate)


def peek_header(path: str | Path, *, manifest: bool = True) -> dict[str, Any]:
    """Header fields of a pycann .om without touching the weights (for ``atc --mode=6``).

    Returns ``format_version`` (``"1.0"``), ``pycann_version``, ``header_bytes``,
    ``manifest_bytes``, ``weights_offset``, ``weights_bytes``, ``file_bytes`` and, with
    ``manifest=True``, ``manifest`` (the saved keys without the graph) and ``graph``
    (``name``, ``num_nodes``, ``inputs``, ``outputs``, ``descs`` of the graph inputs/outputs).
    Raises ``OmFormatError`` like ``load_om``.
    """
    path = Path(path)
    what = f"'{path}'"
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        h = _parse_header(f.read(HEADER_SIZE), size, what)
        out: dict[str, Any] = {
            "format_version": f"{h.major}.{h.minor}",
            "pycann_version": h.pycann_version,
            "header_bytes": h.header_size,
            "manifest_bytes": h.manifest_length,
            "weights_offset": h.weights_offset,
            "weights_bytes": h.weights_length,
            "file_bytes": h.file_length,
        }
        if manifest:
            f.seek(h.manifest_offset)
            body = _parse_manifest(f.read(h.manifest_length), h, what)
            g = body.pop("graph")
            descs = g.get("descs", {})
            io_names = list(g.get("inputs", [])) + list(g.get("outputs", []))
            out["manifest"] = body
            out["graph"] = {
                "name": g.get("name", "main"),
                "num_nodes": len(g.get("nodes", [])),
                "inputs": g.get("inputs", []),
                "outputs": g.get("outputs", []),
                "descs": {n: descs[n] for n in io_names if n in descs},
            }
    return out

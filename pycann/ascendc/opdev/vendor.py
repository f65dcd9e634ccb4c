"""Installed custom-op packages: vendors folders found through ASCEND_CUSTOM_OPP_PATH (reference 1.17).

An entry of ASCEND_CUSTOM_OPP_PATH (``:``-separated) is a vendor folder (holding ``op_proto/``)
or a folder of them (``vendors/``). A vendor folder, as ``msopgen install`` lays it out::

    <vendor>/op_proto/<op_snake>.json            the prototype JSON (msopgen's format)
    <vendor>/op_impl/ai_core/pycann/op_host/<op_snake>.py    OpDef + InferShape + tiling, OP_ADD
    <vendor>/op_impl/ai_core/pycann/op_kernel/<op_snake>.py  the Ascend C kernel <op_snake>(...)
    <vendor>/framework/onnx/<op_snake>.json      {"op": ..., "domain": ...}: the ONNX op it serves
    <vendor>/bin/set_env.bash, version.info

Loading imports the op_host and op_kernel files (executable Python, as CANN loads vendor .so files).
"""

from __future__ import annotations

import importlib.util
import json
import os
import warnings
from pathlib import Path
from types import ModuleType

from pycann import config
from pycann.ascendc.enums import KernelMode
from pycann.ascendc.opdev.opdef import OpDef, snake_case, take_added
from pycann.ascendc.opdev.runner import CustomOp

ENV = "ASCEND_CUSTOM_OPP_PATH"


class VendorError(ValueError):
    """A vendor package that cannot be loaded; names the file and the fix."""


def vendor_dirs(env: str | None = None) -> list[Path]:
    """Vendor folders named by ASCEND_CUSTOM_OPP_PATH (first entry wins on duplicate op types, as in CANN)."""
    raw = config.custom_opp_path() if env is None else env
    out: list[Path] = []
    for part in filter(None, raw.split(os.pathsep)):
        p = Path(part)
        if (p / "op_proto").is_dir():
            out.append(p)
        elif (p / "vendors").is_dir():
            out += sorted(d for d in (p / "vendors").iterdir() if (d / "op_proto").is_dir())
        elif p.is_dir() and any((d / "op_proto").is_dir() for d in p.iterdir()):
            out += sorted(d for d in p.iterdir() if (d / "op_proto").is_dir())
    return out


def _import(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise VendorError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:
        raise VendorError(f"{path}: {type(e).__name__}: {e}") from e
    return mod


def load_vendor(vdir: Path) -> list[CustomOp]:
    """Every op of one vendor folder."""
    ops = []
    impl = vdir / "op_impl" / "ai_core" / "pycann"
    for proto_json in sorted((vdir / "op_proto").glob("*.json")):
        spec = json.loads(proto_json.read_text(encoding="utf-8"))
        entries = spec if isinstance(spec, list) else [spec]
        for entry in entries:
            op_type = entry["op"]
            snake = snake_case(op_type)
            host, kern = impl / "op_host" / f"{snake}.py", impl / "op_kernel" / f"{snake}.py"
            for f in (host, kern):
                if not f.is_file():
                    raise VendorError(f"vendor {vdir.name}: {f} missing for op {op_type} (rebuild and reinstall)")
            tag = f"pycann_custom_{vdir.name}_{snake}"
            take_added()
            _import(host, tag + "_host")
            classes = [c for c in take_added() if c.__name__ == op_type]
            if not classes:
                raise VendorError(f"{host}: no OP_ADD({op_type}) (the class name must be the op type)")
            proto: OpDef = classes[-1](op_type)
            proto.check()
            kmod = _import(kern, tag + "_kernel")
            fn = getattr(kmod, snake, None)
            if fn is None:
                raise VendorError(f"{kern}: no kernel function {snake}(...) (CANN's snake_case rule)")
            mode = getattr(kmod, "KERNEL_MODE", KernelMode.AIV_MODE)
            onnx_map = vdir / "framework" / "onnx" / f"{snake}.json"
            domain = json.loads(onnx_map.read_text(encoding="utf-8")).get("domain", "customize") \
                if onnx_map.is_file() else "customize"
            ops.append(CustomOp(op_type, proto, fn, mode, domain, vdir.name, str(host)))
    return ops


def load_all(env: str | None = None, strict: bool = False) -> list[CustomOp]:
    """Every installed custom op; an op type already seen in an earlier vendor is skipped.

    A vendor that fails to load is skipped with a warning naming the file (``strict``: raised), so a
    broken package cannot stop pycann from importing.
    """
    seen: set[str] = set()
    out = []
    for vdir in vendor_dirs(env):
        try:
            ops = load_vendor(vdir)
        except (VendorError, ValueError, KeyError, OSError) as e:
            if strict:
                raise
            warnings.warn(f"custom op vendor {vdir} skipped: {e}", stacklevel=2)
            continue
        for op in ops:
            if op.op_type not in seen:
                seen.add(op.op_type)
                out.append(op)
    return out

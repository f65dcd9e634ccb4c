"""``amct_onnx calibration``: AMCT's command line for INT8 post-training quantisation.

    amct_onnx calibration --model=m.onnx --save_path=out/prefix --input_shape="input:1,3,224,224" \\
        --data_dir=DIR --data_types="float32" --batch_num=N [--calibration_algo=percentile|kl|min_max] \\
        [--skip_layers=a,b] [--accuracy_target=0.99] [--no_bias_correction]

``--data_dir`` holds one folder per input (``dir1;dir2`` in ``--input_shape``'s order). Files are
taken in name order, one batch each: ``.npy`` (any dtype, loaded without pickle) or ``.bin``
(raw ``--data_types`` values of the full input shape). Image files (``.jpg .jpeg .png .bmp``) fill
batches of N: decoded RGB by Pillow, resized to the input's H x W (bilinear), laid out NCHW as
float32 in [0, 1]. Prints the accuracy of the fake-quant model against the float one on the
calibration batches, and the layers kept in float with the reason. Exit 0 on success, 1 on error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence

import numpy as np

IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp")
DTYPES = {"float32": np.float32, "float16": np.float16, "int32": np.int32, "int64": np.int64,
          "uint8": np.uint8, "int8": np.int8, "float64": np.float64, "bool": np.bool_}


class CliError(Exception):
    """A user error: printed as one line."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="amct_onnx", description="AMCT for ONNX models (pycann)")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("calibration", help="INT8 post-training quantisation with calibration data")
    c.add_argument("--model", required=True, help="the float ONNX model")
    c.add_argument("--save_path", required=True, help="output prefix: PREFIX_deploy_model.onnx, ...")
    c.add_argument("--input_shape", required=True, help='"name:n,c,h,w;name2:..."')
    c.add_argument("--data_dir", required=True, help="one folder per input, ';'-separated")
    c.add_argument("--data_types", default="float32", help="dtype per input, ';'-separated")
    c.add_argument("--batch_num", type=int, default=1, help="calibration batches")
    c.add_argument("--calibration_algo", default="percentile", choices=("percentile", "kl", "min_max"))
    c.add_argument("--skip_layers", default="", help="comma-separated layer (node) names kept in float")
    c.add_argument("--accuracy_target", type=float, default=None,
                   help="keep the most sensitive layers in float until the output cosine reaches this")
    c.add_argument("--no_bias_correction", action="store_true")
    return p


def parse_shapes(text: str) -> list[tuple[str, list[int]]]:
    out = []
    for part in filter(None, (t.strip() for t in text.split(";"))):
        name, sep, dims = part.rpartition(":")
        if not sep or not name:
            raise CliError(f"--input_shape entry {part!r} is not name:dims (e.g. input:1,3,224,224)")
        try:
            shape = [int(d) for d in dims.split(",") if d.strip()]
        except ValueError:
            raise CliError(f"--input_shape entry {part!r}: dims must be integers") from None
        if any(d <= 0 for d in shape):
            raise CliError(f"--input_shape entry {part!r}: calibration needs static positive dims")
        out.append((name, shape))
    if not out:
        raise CliError("--input_shape is empty")
    return out


def _image_batch(paths: list[str], shape: list[int]) -> np.ndarray:
    from PIL import Image

    if len(shape) != 4:
        raise CliError(f"image data needs a 4-D NCHW input shape, got {shape}")
    n, c, h, w = shape
    imgs = []
    for p in paths:
        try:
            with Image.open(p) as im:
                arr = np.asarray(im.convert("RGB").resize((w, h), Image.Resampling.BILINEAR), np.float32) / 255.0
        except (OSError, ValueError, SyntaxError) as e:  # PIL's UnidentifiedImageError is an OSError
            raise CliError(f"{p} is not a readable image ({type(e).__name__}: {e})") from None
        if c == 1:
            arr = arr.mean(axis=2, keepdims=True)
        elif c != 3:
            raise CliError(f"image data gives 1 or 3 channels; the input has {c}")
        imgs.append(arr.transpose(2, 0, 1))
    return np.stack(imgs)


def load_batches(folder: str, shape: list[int], dtype: np.dtype, batch_num: int) -> list[np.ndarray]:
    if not os.path.isdir(folder):
        raise CliError(f"--data_dir {folder} is not a folder")
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder) if not f.startswith("."))
    images = [f for f in files if f.lower().endswith(IMAGE_EXTS)]
    if images:
        n = shape[0]
        if len(images) < n * batch_num:
            raise CliError(f"{folder} has {len(images)} images; {batch_num} batches of {n} need {n * batch_num}")
        return [_image_batch(images[i * n:(i + 1) * n], shape) for i in range(batch_num)]
    data = [f for f in files if f.endswith((".npy", ".bin"))]
    if len(data) < batch_num:
        raise CliError(f"{folder} has {len(data)} .npy/.bin files; --batch_num={batch_num} needs that many")
    out = []
    want = int(np.prod(shape))
    for f in data[:batch_num]:
        try:
            arr = np.load(f, allow_pickle=False) if f.endswith(".npy") else np.fromfile(f, dtype=dtype)
        except (OSError, ValueError, EOFError) as e:  # a damaged .npy, a pickled (object) array
            raise CliError(f"{f} is not a readable {'.npy array' if f.endswith('.npy') else '.bin file'} "
                           f"({type(e).__name__}: {e})") from None
        if not np.issubdtype(arr.dtype, np.number) and arr.dtype != np.bool_:
            raise CliError(f"{f} holds {arr.dtype} values; calibration data must be numbers")
        if arr.size != want:
            raise CliError(f"{f} holds {arr.size} values; input shape {shape} needs {want}")
        out.append(arr.reshape(shape).astype(dtype, copy=False))
    return out


def check_input_names(model: str, shapes: list[tuple[str, list[int]]]) -> None:
    """Every ``--input_shape`` name is one of the model's inputs (checked before any data is read or
    quantised; an unreadable model is left to AMCT's own error)."""
    try:
        import onnx

        graph = onnx.load(model, load_external_data=False).graph
    except Exception:  # noqa: BLE001  (missing or damaged file: reported by pycann.amct)
        return
    consts = {i.name for i in graph.initializer}
    names = [i.name for i in graph.input if i.name not in consts]
    unknown = [n for n, _ in shapes if n not in names]
    if unknown:
        raise CliError(f"--input_shape names {unknown}, not inputs of {model} (its inputs: {names})")


def run(args: argparse.Namespace) -> int:
    from pycann import amct

    shapes = parse_shapes(args.input_shape)
    check_input_names(args.model, shapes)
    dirs = [d for d in args.data_dir.split(";") if d]
    types = [t.strip() for t in args.data_types.split(";") if t.strip()]
    if len(dirs) != len(shapes):
        raise CliError(f"--data_dir has {len(dirs)} folders for {len(shapes)} inputs in --input_shape")
    if len(types) == 1 and len(shapes) > 1:
        types *= len(shapes)
    if len(types) != len(shapes) or any(t not in DTYPES for t in types):
        raise CliError(f"--data_types {args.data_types!r}: one of {', '.join(DTYPES)} per input")
    if args.batch_num < 1:
        raise CliError(f"--batch_num must be >= 1, got {args.batch_num}")
    if args.accuracy_target is not None and not 0.0 < args.accuracy_target <= 1.0:
        raise CliError(f"--accuracy_target {args.accuracy_target} is a cosine similarity: give a value in (0, 1]")
    per_input = [load_batches(d, s, np.dtype(DTYPES[t]), args.batch_num) for d, (_, s), t in zip(dirs, shapes, types)]
    batches = [{name: per_input[k][b] for k, (name, _) in enumerate(shapes)} for b in range(args.batch_num)]
    # the config and the modified model (the size of the model) go to a folder deleted afterwards
    with tempfile.TemporaryDirectory(prefix="amct_cli_") as work:
        cfg = os.path.join(work, "config.json")
        defaults = os.path.join(work, "defaults.json")
        with open(defaults, "w", encoding="utf-8") as f:
            json.dump({"activation_quant_params": {"algo": args.calibration_algo},
                       "bias_correction": not args.no_bias_correction}, f)
        skip = [s for s in args.skip_layers.split(",") if s]
        amct.create_quant_config(cfg, args.model, skip_layers=skip, batch_num=args.batch_num, config_defination=defaults)
        if args.accuracy_target is not None:
            res = amct.accuracy_based_auto_calibration(args.model, batches, args.save_path, args.accuracy_target, cfg)
            report, kept = res.report, res.kept_float
        else:
            mod, rec = os.path.join(work, "modified.onnx"), os.path.join(work, "record.txt")
            amct.quantize_model(cfg, args.model, mod, rec)
            amct.calibrate(mod, batches, rec)
            kept = amct.save_model(mod, rec, args.save_path)
            report = amct.compare_models(args.model, args.save_path + "_fake_quant_model.onnx", batches)
    print(f"[INFO] AMCT: wrote {args.save_path}_deploy_model.onnx, {args.save_path}_fake_quant_model.onnx")
    for line in report.lines():
        print(f"[INFO] AMCT: fake-quant vs float on the calibration data: {line}")
    for name, why in kept.items():
        print(f"[INFO] AMCT: kept in float: {name}: {why}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from pycann.errors import PycannError

    try:
        return run(args)
    except (CliError, PycannError) as e:
        msg = str(e)
        msg = msg[len("AMCT: "):] if msg.startswith("AMCT: ") else msg  # the library's own prefix, once
        print(f"[ERROR] AMCT: {msg}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

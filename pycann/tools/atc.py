"""``atc``: CANN's Ascend Tensor Compiler command line, compiling ONNX into pycann .om files.

Option names, console lines and error codes follow CANN (cann-interfaces.md §2). Modes:
0 compile, 1 om/onnx -> JSON, 3 pre-check (check_result.json), 6 display om info.
Usage: ``atc --model=m.onnx --framework=5 --output=m --soc_version=Ascend310P3``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Sequence
from typing import Any

from pycann.errors import PycannError

START = "ATC start working now, please wait for a moment."
SUCCESS = "ATC run success, welcome to the next use."
FAILED = "ATC run failed, Please check the detail log, Try 'atc --help' for more information"
LOG_LEVELS = ("debug", "info", "warning", "error", "null")

# CANN options pycann accepts but that have no effect on the CPU device (warned about).
NO_EFFECT = (
    "input_hint_shape", "is_input_adjust_hw_layout",
    "is_output_adjust_hw_layout",
    "enable_scope_fusion_passes", "enable_small_channel", "compression_optimize_conf",
    "enable_compress_weight", "compress_weight_conf", "sparsity", "buffer_optimize",
    "disable_reuse_memory", "enable_single_stream", "external_weight", "status_check",
    "op_debug_level", "debug_dir", "op_compiler_cache_mode", "op_compiler_cache_dir",
    "save_original_model", "display_model_info", "virtual_type", "core_type", "aicore_num",
    "deterministic", "deterministic_level",
    "shape_generalized_build_mode", "oo_level", "host_env_os", "host_env_cpu", "cluster_config",
    "dump_mode", "op_precision_mode", "allow_hf32", "singleop",
)
# Accepted but not implemented yet (fail clearly).
NOT_YET: tuple[str, ...] = ()


class AtcError(Exception):
    """A failure reported as ``E<code>: message`` after the failure line."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="atc",
        description="pycann ATC: compile an ONNX, TensorFlow or Caffe model into a pycann .om (CANN-compatible options).",
        allow_abbrev=False,
    )
    p.add_argument("--mode", type=int, default=0, help="0 compile (default), 1 om/onnx to JSON, 3 pre-check, 6 display om info")
    p.add_argument("--model", help="original model file: .onnx (--framework=5), frozen .pb (3), .prototxt (0)")
    p.add_argument("--framework", type=int, help="0 Caffe (with --weight), 3 TensorFlow frozen .pb, 5 ONNX")
    p.add_argument("--weight", help="--framework=0: the .caffemodel of the --model prototxt")
    p.add_argument("--output", help="output path without suffix; .om is appended")
    p.add_argument("--soc_version", help="target chip, e.g. Ascend310P3, Ascend910B2 (recorded in the .om)")
    p.add_argument("--input_shape", help='"name:n,c,h,w;name2:..." ; -1 = dynamic dim, lo~hi = range, "name:" = scalar')
    p.add_argument("--input_shape_range", help='CANN\'s older spelling of ranges: "name:[1~4,3,-1,-1];name2:[...]" '
                   '(= --input_shape "name:1~4,3,-1,-1")')
    p.add_argument("--insert_op_conf", help="AIPP config file of aipp_op { ... } blocks (docs/aipp.md)")
    p.add_argument("--dynamic_batch_size", help='"1,2,4,8": batch gears; -1 in the N position of --input_shape')
    p.add_argument("--dynamic_image_size", help='"h1,w1;h2,w2": image-size gears; -1 for H and W in --input_shape')
    p.add_argument("--dynamic_dims", help='"d1,d2;d3,d4": one value per -1 of --input_shape (needs --input_format=ND)')
    p.add_argument("--input_format", help="ONNX/Caffe: NCHW (default), ND (NCDHW ONNX); TF: NHWC (default), NCHW, ND")
    p.add_argument("--output_type", help="FP32, FP16, UINT8, INT8, ... or per output node:idx:TYPE;...")
    p.add_argument("--out_nodes", help='"node:0;node2:1": choose outputs and their order')
    p.add_argument("--log", default="null", choices=LOG_LEVELS, help="log level printed to the console")
    p.add_argument("--fusion_switch_file", help="file of 'PassName:off' lines (or CANN's JSON switch form)")
    p.add_argument("--om", help="mode 1: the .om or .onnx to convert to JSON; mode 6: the .om to display")
    p.add_argument("--json", help="mode 1: JSON file to write")
    p.add_argument("--check_report", default="check_result.json", help="mode 3: report path")
    p.add_argument("--precision_mode", help="force_fp16, force_fp32 (= cube_fp16in_fp32out), allow_fp32_to_fp16, "
                   "allow_mix_precision[_fp16|_bf16], allow_fp32_to_bf16, must_keep_origin_dtype (pycann's default)")
    p.add_argument("--precision_mode_v2", help="fp16, origin, cube_fp16in_fp32out, mixed_float16, mixed_bfloat16")
    p.add_argument("--keep_dtype", help="file of node names or OpType::Type lines that keep their dtype")
    p.add_argument("--modify_mixlist", help='JSON {"black-list": {"to-add": [..], "to-remove": [..]}, "white-list": ..}')
    p.add_argument("--customize_dtypes", help="file of Opname::InputDtype:..,OutputDtype:.. lines")
    p.add_argument("--input_fp16_nodes", help='"in1;in2": these inputs are float16')
    p.add_argument("--is_weight_clip", help="1 (default): clip weights to +-65504 when they become float16; 0: do not")
    p.add_argument("--op_select_implmode", help="high_performance (default: 3x3 convs may use Winograd, ~2e-6 "
                   "of the output's range per conv) or high_precision (direct convs only); *_for_all alike")
    p.add_argument("--optypelist_for_implmode", help='"Conv": apply --op_select_implmode to these op types only')
    p.add_argument("--export_onnx", help="mode 0/1: also write the optimised graph as ONNX (fused ops in domain "
                   "pycann with their original nodes in attribute 'origin'; open in Netron)")
    p.add_argument("--op_bank_path", "--mdl_bank_path", help="AOE knowledge bank folder (default TUNE_BANK_PATH, "
                   "else ~/.cache/pycann/aoe): tuned choices there apply (docs/aoe.md)")
    for name in NO_EFFECT + NOT_YET:
        p.add_argument(f"--{name}", help=argparse.SUPPRESS)
    return p


def _log_fn(level: str, t0: float) -> Any:
    """The pass-detail printer for ``--log``: ``info``/``debug`` print each line as it comes with
    the seconds since atc started; other levels print only the lines that are warnings (a pass's
    ``W:`` lines: a --keep_dtype or --modify_mixlist entry that matches nothing), as ``[WARNING]``
    lines like atc's own (CANN's default console shows only the start and success lines besides)."""
    if level in ("debug", "info"):
        return lambda line: print(f"[INFO] [{time.perf_counter() - t0:7.3f}s] {line}", flush=True)

    def warnings_only(line: str) -> None:
        if WARNING_MARK in line:
            print(f"[WARNING] {line}", flush=True)
    return warnings_only


WARNING_MARK = " W: "  # (in a pass's log line: a warning, printed at every --log level)


def _output_path(args: argparse.Namespace) -> str:
    """``--output`` with ``.om`` appended, checked writable before any work (E10001 otherwise)."""
    from pycann.paths import file_problem

    out: str = args.output if args.output.endswith(".om") else args.output + ".om"
    # "dir/" (or "dir/.om") named no file: a hidden "dir/.om" was written and reported as success
    why = (f"it names a folder, not a model file: give a file name, e.g. "
           f"--output={os.path.join(os.path.dirname(out) or '.', 'model')} (atc adds .om)"
           if os.path.basename(out) == ".om" else file_problem(out))
    if why:
        raise AtcError("E10001", f"Value [{args.output}] for parameter [--output] is invalid. Reason: {why}.")
    return out


def _fusion_switches(path: str) -> list[str]:
    from pycann.ge.compile.switches import read_fusion_switch_file

    return read_fusion_switch_file(path)


def _warn_unknown_passes(names: list[str]) -> None:
    from pycann.ge.compile.switches import switchable_passes, unknown_passes

    for name in unknown_passes(names):
        print(f"[WARNING] --fusion_switch_file: no pass named [{name}] in pycann (ignored); "
              f"passes that can be switched off: {', '.join(switchable_passes())}", flush=True)


def _aipp_and_gear_options(args: argparse.Namespace) -> dict[str, Any]:
    """--insert_op_conf and the gear options as ``CompileOptions`` fields (parsed, CANN E-codes)."""
    from pycann.ge.compile import gears

    out: dict[str, Any] = {}
    if args.insert_op_conf is not None:
        if not os.path.isfile(args.insert_op_conf):
            raise AtcError("E10001", f"Value [{args.insert_op_conf}] for parameter [--insert_op_conf] is invalid. "
                           "Reason: the file does not exist.")
        out["insert_op_conf"] = args.insert_op_conf
    if args.dynamic_batch_size is not None:
        out["dynamic_batch_size"] = gears.parse_dynamic_batch_size(args.dynamic_batch_size)
    if args.dynamic_image_size is not None:
        out["dynamic_image_size"] = gears.parse_dynamic_image_size(args.dynamic_image_size)
    if args.dynamic_dims is not None:
        out["dynamic_dims"] = gears.parse_dynamic_dims(args.dynamic_dims)
    return out


def _implmode_options(args: argparse.Namespace) -> dict[str, Any]:
    """--op_select_implmode / --optypelist_for_implmode as ``CompileOptions`` fields."""
    from pycann.ge.compile.options import check_implmode

    out: dict[str, Any] = {}
    if args.op_select_implmode is not None:
        out["op_select_implmode"] = check_implmode(args.op_select_implmode)
    if args.optypelist_for_implmode is not None:
        if args.op_select_implmode is None:
            print("[WARNING] --optypelist_for_implmode applies --op_select_implmode to the listed op types; without "
                  "--op_select_implmode it changes nothing (the default, high_performance, applies to every op)",
                  flush=True)
        out["optypelist_for_implmode"] = [t.strip() for t in args.optypelist_for_implmode.split(",") if t.strip()]
    return out


def _precision_options(args: argparse.Namespace) -> dict[str, Any]:
    """The precision options as ``CompileOptions`` fields (files read here; docs/precision.md)."""
    from pycann.ge.compile import precision_config as pc

    out: dict[str, Any] = {}
    if args.precision_mode:
        out["precision_mode"] = args.precision_mode
    if args.precision_mode_v2:
        out["precision_mode_v2"] = args.precision_mode_v2
    if args.keep_dtype is not None:
        out["keep_dtype"] = pc.parse_keep_dtype(args.keep_dtype)
    if args.modify_mixlist is not None:
        out["modify_mixlist"] = pc.parse_modify_mixlist(args.modify_mixlist)
    if args.customize_dtypes is not None:
        out["customize_dtypes"] = pc.parse_customize_dtypes(args.customize_dtypes)
    if args.input_fp16_nodes is not None:
        out["input_fp16_nodes"] = pc.parse_input_fp16_nodes(args.input_fp16_nodes)
    if args.is_weight_clip is not None:
        if args.is_weight_clip not in ("0", "1"):
            raise AtcError("E10001", f"Value [{args.is_weight_clip}] for parameter [--is_weight_clip] is invalid. "
                           "Reason: use 0 or 1.")
        out["is_weight_clip"] = args.is_weight_clip == "1"
    return out


def _check_model_args(args: argparse.Namespace) -> None:
    """--framework and --model, as modes 0 and 3 need them."""
    if getattr(args, "singleop", None) and not args.model:
        raise AtcError("E10001", f"Value [{args.singleop}] for parameter [--singleop] is invalid. Reason: "
                       "single-op precompilation is not needed on pycann: operators run from the op table "
                       "without offline compilation (docs/acl.md, single-op execution). Compile models with --model.")
    if args.framework is None:
        raise AtcError("E10007", "[--framework] is required. The value must be [0(Caffe) or 1(MindSpore) or 3(TensorFlow) or 5(Onnx)].")
    if args.framework not in (0, 3, 5):
        raise AtcError("E10001", f"Value [{args.framework}] for parameter [--framework] is invalid. pycann parses Caffe (0), TensorFlow (3) and ONNX (5) models.")
    if args.framework == 0 and not args.weight:
        raise AtcError("E10054", "The required parameter [--weight] for ATC is empty: --framework=0 needs the .caffemodel.")
    if not args.model:
        raise AtcError("E10054", "The required parameter [--model] for ATC is empty.")
    if os.path.isdir(args.model):
        want = {0: "the deploy .prototxt", 3: "the frozen .pb (for a SavedModel folder, its saved_model.pb)",
                5: "the .onnx file"}[args.framework]
        raise AtcError("E10001", f"Value [{args.model}] for parameter [--model] is invalid. Reason: it is a "
                       f"directory; give {want}.")
    if not os.path.isfile(args.model):
        raise AtcError("E10001", f"Value [{args.model}] for parameter [--model] is invalid. Reason: the file does not exist.")


def _precheck(args: argparse.Namespace) -> None:
    """--mode=3: write check_result.json (--check_report); fails when a node fails the check."""
    from pycann.ge.compile.options import parse_input_shape
    from pycann.ge.compile.precheck import failure_lines, precheck

    _check_model_args(args)
    if args.framework != 5:
        raise AtcError("E10001", "--mode=3 pre-checks ONNX models; a Caffe/TensorFlow model lists all its "
                       "unsupported ops at once in --mode=0 (E19010).")
    _check_file_output(args.check_report, "--check_report")
    report = precheck(args.model, parse_input_shape(args.input_shape) if args.input_shape else None)
    d = os.path.dirname(args.check_report)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(args.check_report, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    print(f"The pre-checking report has been saved to {args.check_report}.", flush=True)
    if report["result"] == "failed":
        lines = failure_lines(report)
        code = lines[0].split(":", 1)[0]
        raise AtcError(code, f"pre-check: {report['fail']} of {report['total']} nodes failed.\n" + "\n".join(lines))


def _compile(args: argparse.Namespace, argv: Sequence[str]) -> None:
    # Options are checked with light modules first (pycann.ge.compile.options, pycann.ge.compile.switches,
    # os.path): a typo fails in well under a second, before numpy, onnx and the op table load.
    from pycann.ge.compile.options import SOC_VERSIONS, check_implmode, parse_input_shape, parse_out_nodes

    t0 = time.perf_counter()
    _check_model_args(args)
    if not args.output:
        raise AtcError("E10054", "The required parameter [--output] for ATC is empty.")
    if not args.soc_version:
        raise AtcError("E10054", "The required parameter [--soc_version] for ATC is empty. Use e.g. --soc_version=Ascend310P3.")
    if args.soc_version not in SOC_VERSIONS:
        raise AtcError("E10001", f"Value [{args.soc_version}] for parameter [--soc_version] is invalid. Supported: {', '.join(SOC_VERSIONS)}.")
    from pycann.ge.compile.importers.frameworks import DEFAULT_INPUT_FORMAT, INPUT_FORMATS

    fw = args.framework
    args.input_format = args.input_format or DEFAULT_INPUT_FORMAT[fw]
    if args.input_format not in INPUT_FORMATS[fw]:
        raise AtcError("E10001", f"Value [{args.input_format}] for parameter [--input_format] is invalid. "
                       f"This framework's models take {', '.join(INPUT_FORMATS[fw])}.")
    for name in NOT_YET:
        if getattr(args, name) is not None:
            raise AtcError("E10001", f"Option --{name} is not supported by this pycann version yet (see docs/differences.md).")
    if args.op_select_implmode is not None:
        check_implmode(args.op_select_implmode)
    light: dict[str, Any] = {
        "input_shape": parse_input_shape(args.input_shape) if args.input_shape else {},
        "out_nodes": parse_out_nodes(args.out_nodes) if args.out_nodes else [],
    }
    disabled = _fusion_switches(args.fusion_switch_file) if args.fusion_switch_file else []
    if args.export_onnx:
        _check_file_output(args.export_onnx, "--export_onnx")
    out = _output_path(args)
    for name in NO_EFFECT:
        if getattr(args, name) is not None:
            print(f"[WARNING] option --{name} is accepted for compatibility and has no effect on pycann's CPU device", flush=True)

    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.compile.options import CompileOptions, parse_output_type

    if disabled:
        _warn_unknown_passes(disabled)
    opts = CompileOptions(
        input_format=args.input_format,
        soc_version=args.soc_version,
        output_type=parse_output_type(args.output_type) if args.output_type else {},
        disabled_passes=disabled,
        log=args.log, op_bank_path=args.op_bank_path or "",
        source_fingerprint=True,  # (pycann compare checks an .om against the model it is given)
        **light,
        **_aipp_and_gear_options(args),
        **_precision_options(args),
        **_implmode_options(args),
    )
    log = _log_fn(args.log, t0)
    model: Any = args.model
    if fw != 5:  # Caffe / TensorFlow importers (docs/importers.md); they apply --out_nodes by their names
        from pycann.ge.compile.importers.frameworks import load_framework_model

        model = load_framework_model(fw, args.model, args.weight, opts.out_nodes, opts.input_shape)
        opts.out_nodes = []
    cm = compile_model(model, opts, log=log)
    cm.manifest["atc_command_line"] = "atc " + " ".join(shlex.quote(a) for a in argv)
    cm.manifest["framework_type"] = fw
    try:
        n = cm.save(out)
    except OSError as e:
        raise AtcError("E10001", f"Value [{args.output}] for parameter [--output] is invalid. Reason: cannot "
                       f"write '{out}': {e.strerror or e}.") from None
    if log is not None:
        log(f"[SaveOm] wrote {out} ({n / 2**20:.2f} MiB)")
    if args.export_onnx:
        _export_onnx(cm.graph, args.export_onnx)


def _check_file_output(path: str, option: str) -> None:
    from pycann.paths import file_problem

    why = file_problem(path)
    if why:
        raise AtcError("E10001", f"Value [{path}] for parameter [{option}] is invalid. Reason: {why}.")


def _export_onnx(graph: Any, path: str) -> None:
    """--export_onnx: the optimised graph as ONNX (pycann/ge/compile/export.py)."""
    import onnx

    from pycann.ge.compile.export import to_onnx

    onnx.save(to_onnx(graph), path)
    print(f"[INFO] optimised graph exported to {path}", flush=True)


def _require_file(path: str, option: str) -> None:
    if not os.path.isfile(path):
        raise AtcError("E10001", f"Value [{path}] for parameter [{option}] is invalid. Reason: the file does not exist.")


def _to_json(args: argparse.Namespace) -> None:
    from pycann.ge.om.serialize import encode_graph

    if not args.om or not (args.json or args.export_onnx):
        missing = " and ".join(f"[--{k}]" for k in ("om", "json") if not getattr(args, k))
        raise AtcError("E10054", f"The required parameter {missing} for ATC --mode=1 is empty.")
    _require_file(args.om, "--om")
    for path, option in ((args.json, "--json"), (args.export_onnx, "--export_onnx")):
        if path:
            _check_file_output(path, option)
    if args.om.lower().endswith(".onnx"):
        from pycann.ge.compile.importers.onnx import load_onnx

        graph, manifest = load_onnx(args.om), {}
    else:
        from pycann.ge.om import load_om

        om = load_om(args.om)
        graph, manifest = om.graph, {k: v for k, v in om.manifest.items() if k != "graph"}
    sizes = [0]

    def put(arr: Any) -> tuple[int, int]:
        # weights are described (dtype, shape, size) but not written into the JSON
        off = sizes[0]
        sizes[0] += arr.nbytes
        return off, arr.nbytes

    if args.export_onnx:
        _export_onnx(graph, args.export_onnx)
    if not args.json:
        return
    doc = {"manifest": manifest, "graph": encode_graph(graph, put)}
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, default=str)


def _apply_input_shape_range(args: argparse.Namespace) -> None:
    """CANN's ``--input_shape_range="x:[1~4,3,-1,-1];y:[...]"`` (its older option for dynamic shapes)
    is ``--input_shape`` with the dims in brackets: it becomes ``--input_shape="x:1~4,3,-1,-1;..."``."""
    text = args.input_shape_range
    if text is None:
        return
    if args.input_shape:
        raise AtcError("E10001", "--input_shape_range and --input_shape cannot be used together: give the shapes "
                       "and ranges in one of them (--input_shape takes ranges too, e.g. \"x:1~4,3,-1,-1\")")
    parts = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, sep, dims = part.rpartition(":")
        name, dims = name.strip(), dims.strip()  # (spaces around the name or the bracket, as CANN allows)
        if not sep or not name or not (dims.startswith("[") and dims.endswith("]")):
            raise AtcError("E10001", f"value [{part}] of --input_shape_range is invalid: expected name:[d1,d2,...], "
                           "e.g. \"x:[1~4,3,-1,-1]\"")
        parts.append(f"{name}:{dims[1:-1]}")
    args.input_shape, args.input_shape_range = ";".join(parts), None


def _named_option(message: str, from_range: bool) -> str:
    """``message`` naming the option the user wrote: ``--input_shape_range`` is compiled as
    ``--input_shape`` (``_apply_input_shape_range``), whose name the compiler's errors carry; a user who
    never wrote ``--input_shape`` would look for an option that is not on the command line."""
    return re.sub(r"--input_shape\b(?!_range)", "--input_shape_range", message) if from_range else message


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``atc`` console script; returns the exit status (0 on success)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not {"-h", "--help"} & set(argv):  # (the help text alone, as for any command-line tool)
        print(START, flush=True)
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
    except SystemExit as e:  # argparse already printed the reason
        if e.code == 0:
            return 0
        print(FAILED)
        print("E10001: invalid command-line option value (see the message above).")
        return 1
    from_range = False  # the shapes came as --input_shape_range (errors then name it)
    try:
        if unknown:
            raise AtcError("E10001", f"Unknown option(s) {' '.join(unknown)}. Try 'atc --help'.")
        ranged = args.input_shape_range is not None
        _apply_input_shape_range(args)  # (its own errors name both options as written)
        from_range = ranged
        if args.mode == 0:
            _compile(args, argv)
        elif args.mode == 1:
            _to_json(args)
        elif args.mode == 3:
            _precheck(args)
        elif args.mode == 6:
            from pycann.tools.atc_display import display

            display(args)
        else:
            raise AtcError("E10001", f"Value [{args.mode}] for parameter [--mode] is invalid. pycann supports 0, 1, 3 and 6.")
    except AtcError as e:
        print(FAILED)
        print(_named_option(f"{e.code}: {e}", from_range))
        return 1
    except PycannError as e:
        print(FAILED)
        code = e.code or "E19999"
        msg = str(e)
        print(_named_option(msg if msg.startswith(code) else f"{code}: {msg}", from_range))
        return 1
    print(SUCCESS, flush=True)
    return 0


if __name__ == "__main__":
    # `python -m pycann.tools.atc`: run the imported module's main, whose AtcError is the class the
    # helpers in other modules (atc_display) raise; this __main__ copy's would not catch theirs
    from pycann.tools import atc as _atc

    sys.exit(_atc.main())

"""``aoe``: CANN's Ascend Optimization Engine command line on pycann (docs/aoe.md).

``aoe --framework=5 --model=m.onnx --job_type=1 --output=out/`` tunes GE's choices for the model
(subgraph tuning); ``--job_type=2`` tunes its operators (kernel choices measured on this machine,
and MatMul tilings on the cost model of ``--soc_version``). Results go to the knowledge bank
(``--op_bank_path``, else ``TUNE_BANK_PATH``, else ``~/.cache/pycann/aoe``), which atc and the
executor read; ``--output`` (a folder) receives the tuned .om and the before/after report
(``aoe_result_<opat|sgat>_*.json``, ``aoe_report.txt``). The tuning itself is in ``pycann.aoe``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pycann.errors import PycannError

START = "AOE start working now, please wait for a moment."
FINISHED = "Aoe process finished"
FAILED = "Aoe process failed"


class AoeError(PycannError):
    """A command-line error, printed as ``E<code>: message``."""

    code = "E10001"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aoe", allow_abbrev=False,
                                description="pycann AOE: tune a model's operators or GE choices, keep them in the knowledge bank.")
    p.add_argument("--framework", type=int, help="0 Caffe (with --weight), 3 TensorFlow .pb, 5 ONNX")
    p.add_argument("--model", help="the model file")
    p.add_argument("--weight", help="--framework=0: the .caffemodel")
    p.add_argument("--job_type", type=int, help="1 subgraph tuning (GE choices), 2 operator tuning")
    p.add_argument("--output", help="folder for the tuned .om and the report (default ./aoe_workspace)")
    p.add_argument("--tune_ops_file", help="ops to tune: op types, node names or 'MatMul MxKxN' lines")
    p.add_argument("--soc_version", default="Ascend910B2", help="target of cost-model tiling (and the .om)")
    p.add_argument("--input_shape", help='"name:n,c,h,w;..." static shapes to tune for')
    p.add_argument("--input_format", help="as atc's --input_format")
    p.add_argument("--op_select_implmode", help="as atc's: high_performance (default) or high_precision")
    p.add_argument("--op_bank_path", help="knowledge bank folder (default TUNE_BANK_PATH, else ~/.cache/pycann/aoe)")
    p.add_argument("--mdl_bank_path", help="same bank as --op_bank_path (pycann keeps op and graph records in one)")
    p.add_argument("--log", default="null", choices=("debug", "info", "warning", "error", "null"))
    return p


def _check(args: argparse.Namespace) -> None:
    from pycann.ge.compile.options import SOC_VERSIONS
    from pycann.paths import folder_problem

    if args.job_type is None:
        raise AoeError("E10007: [--job_type] is required: 1 (subgraph tuning) or 2 (operator tuning).")
    if args.job_type not in (1, 2):
        raise AoeError(f"E10001: Value [{args.job_type}] for parameter [--job_type] is invalid: use 1 (subgraph "
                       "tuning) or 2 (operator tuning).")
    if args.soc_version not in SOC_VERSIONS:
        raise AoeError(f"E10001: Value [{args.soc_version}] for parameter [--soc_version] is invalid. "
                       f"Supported: {', '.join(SOC_VERSIONS)}.")
    problem = folder_problem(args.output or "aoe_workspace")  # before any tuning, not after it
    if problem:
        raise AoeError(f"E10001: Value [{args.output}] for parameter [--output] is invalid. Reason: {problem}.")
    if args.model is None:
        return
    if args.framework is None:
        raise AoeError("E10007: [--framework] is required with --model: 0 (Caffe), 3 (TensorFlow) or 5 (ONNX).")
    if args.framework not in (0, 3, 5):
        raise AoeError(f"E10001: Value [{args.framework}] for parameter [--framework] is invalid: pycann reads "
                       "Caffe (0), TensorFlow (3) and ONNX (5) models.")
    if not os.path.isfile(args.model):
        raise AoeError(f"E10001: Value [{args.model}] for parameter [--model] is invalid. Reason: the file does "
                       "not exist.")
    if args.framework == 0 and not args.weight:
        raise AoeError("E10054: --framework=0 needs --weight (the .caffemodel).")


def _options(args: argparse.Namespace) -> Any:
    from pycann.ge.compile.importers.frameworks import DEFAULT_INPUT_FORMAT
    from pycann.ge.compile.options import CompileOptions, check_implmode, parse_input_shape

    bank = args.op_bank_path or args.mdl_bank_path or ""
    kw: dict[str, Any] = {"soc_version": args.soc_version, "op_bank_path": os.path.abspath(bank) if bank else "",
                          "input_format": args.input_format or DEFAULT_INPUT_FORMAT[args.framework]}
    if args.input_shape:
        kw["input_shape"] = parse_input_shape(args.input_shape)
    if args.op_select_implmode:
        kw["op_select_implmode"] = check_implmode(args.op_select_implmode)
    return CompileOptions(**kw)


def _loader(args: argparse.Namespace, opts: Any) -> Any:
    """A fresh model per call: the path (ONNX) or a newly imported Graph (Caffe, TensorFlow)."""
    if args.framework == 5:
        return lambda: args.model
    from pycann.ge.compile.importers.frameworks import load_framework_model

    return lambda: load_framework_model(args.framework, args.model, args.weight, (), opts.input_shape)


def run(args: argparse.Namespace) -> int:
    from pycann.aoe import driver
    from pycann.aoe.bank import open_bank
    from pycann.aoe.ops_file import OpsFilter, read_ops_file
    from pycann.aoe.report import ProgressLine

    _check(args)
    wanted = read_ops_file(args.tune_ops_file) if args.tune_ops_file else OpsFilter()
    if args.model is None and (args.job_type == 1 or not wanted.matmuls):
        raise AoeError("E10054: The required parameter [--model] for AOE is empty" +
                       ("." if args.job_type == 1 else " (or give 'MatMul MxKxN' lines in --tune_ops_file)."))
    opts = _options(args) if args.model else None
    bank = open_bank(args.op_bank_path or args.mdl_bank_path or None)
    bank.check()  # a bank that cannot be used fails here, before a compile would warn about it and go on
    out = Path(args.output or "aoe_workspace")
    verbose = args.log in ("debug", "info")
    say = (lambda s: print(f"[INFO] {s}", flush=True)) if verbose else (lambda s: None)
    progress = ProgressLine("aoe sgat" if args.job_type == 1 else "aoe opat")
    t0 = time.perf_counter()
    try:
        if args.job_type == 1:
            assert opts is not None  # job_type 1 needs --model (checked above)
            report, cm = driver.subgraph_job(_loader(args, opts), opts, bank, args.model, progress, say)
        else:
            files = [f for f in (args.model, args.weight) if f]
            om = out / f"{Path(args.model).stem}_tuned.om" if args.model else None
            report, cm = driver.op_job(_loader(args, opts) if opts else None, opts, bank, args.model, wanted,
                                       args.soc_version, progress, files=files, om_path=om)
            cm = None  # (op_job wrote the .om)
    finally:
        progress.close()
    report.seconds = time.perf_counter() - t0
    if cm is not None:
        om = out / f"{Path(args.model).stem}_tuned.om"
        out.mkdir(parents=True, exist_ok=True)
        cm.save(om)
        report.notes.append(f"tuned model: {om}")
    path = report.write(out)
    print(report.text(), flush=True)
    print(f"[INFO] report: {path}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``aoe`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    print(START, flush=True)
    try:
        args, unknown = build_parser().parse_known_args(argv)
    except SystemExit as e:
        if e.code == 0:
            return 0
        print(FAILED)
        print("E10001: invalid command-line option value (see the message above).")
        return 1
    try:
        if unknown:
            raise AoeError(f"E10001: Unknown option(s) {' '.join(unknown)}. Try 'aoe --help'.")
        rc = run(args)
    except PycannError as e:
        print(FAILED)
        msg = str(e)
        code = e.code or "E19999"
        print(msg if msg.startswith("E") else f"{code}: {msg}")
        return 1
    except (ValueError, RuntimeError) as e:
        print(FAILED)
        print(f"E19999: {str(e).splitlines()[0]}")
        return 1
    print(FINISHED, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())

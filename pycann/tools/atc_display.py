"""``atc --mode=6``: display an .om's model info (CANN's "Display Model Info" layout, cann-interfaces.md §2)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from pycann.tools.atc import AtcError, _require_file


def _display_gears_aipp(m: dict[str, Any]) -> None:
    """--mode=6 lines for dynamic gears and AIPP inputs (manifest "gears" / "aipp")."""
    gears = m.get("gears")
    if gears:
        print(f"dynamic gears: {gears.get('option', gears['kind'])} "
              + "; ".join(",".join(map(str, p)) for p in gears["profiles"]))
        for prof, shapes in zip(gears["profiles"], gears["shapes"]):
            print(f"  gear {','.join(map(str, prof))}: " + ", ".join(f"{k}[{','.join(map(str, v))}]"
                                                               for k, v in shapes.items()))
    for e in m.get("aipp", []):
        head = f"aipp: input {e['input_index']} ({e['input']}) {e['mode']} -> {e['output_layout']}{e['output_shape']}"
        if e["mode"] == "dynamic":
            print(f"{head}, max_src_image_size[{e['max_src_image_size']}], params input {e['params_input']}")
            continue
        print(head)
        print("  " + ", ".join(f"{k}[{v}]" for k, v in _aipp_summary(e["params"]).items()))


def _aipp_summary(p: dict[str, Any]) -> dict[str, Any]:
    """The static-AIPP settings worth showing: switched-off stages are left out."""
    out: dict[str, Any] = {"input_format": p["input_format"],
                           "src_image_size": f"{p['src_image_size_w']}x{p['src_image_size_h']}"}
    if p["crop"]:
        out["crop"] = f"start {p['load_start_pos_w']},{p['load_start_pos_h']} size {p['crop_size_w']}x{p['crop_size_h']}"
    if p["padding"]:
        out["padding"] = (f"top {p['top_padding_size']} bottom {p['bottom_padding_size']} left {p['left_padding_size']} "
                          f"right {p['right_padding_size']} value {p['padding_value']}")
    if p["csc_switch"]:
        out["csc_matrix"] = ",".join(map(str, p["matrix"]))
        out["input_bias"] = ",".join(map(str, p["input_bias"]))
        out["output_bias"] = ",".join(map(str, p["output_bias"]))
    for key in ("rbuv_swap_switch", "ax_swap_switch"):
        if p[key]:
            out[key] = "true"
    for key in ("mean_chn", "min_chn", "var_reci_chn"):
        out[key] = ",".join(f"{v:g}" for v in p[key])
    return out


def _display_precision(p: dict[str, Any] | None) -> None:
    """--mode=6 line for the precision settings and what the PrecisionMode pass did."""
    if not p:
        return
    parts = [f"precision_mode[{p.get('precision_mode', 'must_keep_origin_dtype')}]"]
    if p.get("nodes"):
        parts.append("nodes[" + ", ".join(f"{k} {v}" for k, v in sorted(p["nodes"].items())) + "]")
    if "casts" in p:
        parts.append(f"casts[{p['casts']}]")
    for key in ("keep_dtype", "customize_dtypes", "input_fp16_nodes"):
        if p.get(key):
            parts.append(f"{key}[{';'.join(p[key])}]")
    for lst, ops in (p.get("mixlist_changes") or {}).items():
        if ops:
            parts.append(f"added_to_{lst}[{','.join(ops)}]")
    print("precision: " + ", ".join(parts))


def _shape_text(desc: Any, declared: Sequence[Any] = ()) -> str:
    """``FLOAT[-1x3x48x-1] (dim 0: batch, dim 3: width)``: a dynamic dim as -1, as CANN's tools print it,
    followed by the model's names for the named ones; ``declared`` (the input's --input_shape from the
    manifest, a range as ``[lo, hi]``) adds ``range 16~400`` to a ranged dim."""
    if desc is None or getattr(desc, "shape", None) is None or getattr(desc, "kind", "tensor") != "tensor":
        return str(desc)
    dims = "x".join(str(d) if isinstance(d, int) else "-1" for d in desc.shape)
    text = f"{desc}".split("[", 1)[0] + f"[{dims}]"
    notes = []
    for i, d in enumerate(desc.shape):
        spec = declared[i] if i < len(declared) else None  # (the manifest keeps a range as [lo, hi])
        rng = f"{spec[0]}~{spec[1]}" if isinstance(spec, (list, tuple)) and len(spec) == 2 else None
        name = d if isinstance(d, str) and d not in ("", "?") and "~" not in d else None
        if name or rng:
            notes.append(f"dim {i}: " + ", ".join(x for x in (name, f"range {rng}" if rng else None) if x))
    return text + (f" ({', '.join(notes)})" if notes else "")


def display(args: argparse.Namespace) -> None:
    """``atc --mode=6 --om=...``: the om's model info, in CANN's section layout. Raises ``AtcError``."""
    from pycann.ge.om import load_om, peek_header

    if not args.om:
        raise AtcError("E10054", "The required parameter [--om] for ATC --mode=6 is empty.")
    _require_file(args.om, "--om")
    hdr = peek_header(args.om)
    om = load_om(args.om)
    m = om.manifest
    mem = m.get("memory_plan", {})
    print("============ Display Model Info start ============")
    print(f"Original Atc command line: {m.get('atc_command_line', '(compiled through the Python API)')}")
    print(f"system info: atc_version[pycann {m.get('pycann_version', '?')}], soc_version[{m.get('soc_version', '?')}], "
          f"framework_type[{m.get('framework_type', 5)}]")
    print(f"resource info: memory_size[{mem.get('peak_bytes', 0)}B], weight_size[{om.weights_bytes}B], "
          f"stream_num[1], event_num[0]")
    print(f"om info: modeldef_size[{hdr.get('manifest_bytes', 0)}B], weight_data_size[{hdr.get('weights_bytes', om.weights_bytes)}B], "
          "tbe_kernels_size[0B], cust_aicpu_kernel_store_size[0B], task_info_size[0B]")
    g = om.graph
    for name in g.inputs:
        print(f"input: {name} {_shape_text(g.descs.get(name), m.get('input_ranges', {}).get(name, ()))}")
    for name in g.outputs:
        print(f"output: {name} {_shape_text(g.descs.get(name))}")
    print(f"ops: {len(g.nodes)} nodes; " + ", ".join(f"{k} {v}" for k, v in sorted(m.get('op_counts', {}).items())))
    _display_gears_aipp(m)
    _display_precision(m.get("precision"))
    from pycann.ge.run.executor import is_vision
    from pycann.ge.run.plan_cache import describe

    print(describe([n for n in g.inputs if not getattr(g.descs.get(n), "is_static", True)], is_vision(g),
                   len((m.get("gears") or {}).get("profiles", []))))
    print("============ Display Model Info end ============")

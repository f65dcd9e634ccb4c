"""InsertAippPass: put CANN's AIPP in front of model inputs (``atc --insert_op_conf``).

For each ``aipp_op`` config (cann-interfaces.md §3) the target input (``related_input_name``,
else ``related_input_rank``-th graph input) becomes a uint8 input in the source-image layout
(``pycann.ops.aipp.src_shape``: YUV420SP ``[N, H*3/2, W]``, YUV400 ``[N, H, W]``, RGB888
``[N, H, W, 3]``, XRGB/ARGB ``[N, H, W, 4]``) under the same name, and an ``Aipp`` node (domain
``pycann``) produces what the model used to receive there: float32 / float16 / uint8 in the
model's NCHW or NHWC layout. Every reader of the old input (subgraphs included) now reads the
Aipp output. Dynamic AIPP adds the parameter input ``ascend_dynamic_aipp_data`` (uint8,
64 + 96 * N bytes; CANN's ``kAippDynamicPara``) and the image input becomes a flat
``max_src_image_size`` byte buffer.

Options (``ctx.options``): ``aipp`` = list of ``AippConfig``, ``input_format`` = NCHW / NHWC.
"""

from __future__ import annotations

from typing import Any

from pycann.dtypes import DType, TensorDesc
from pycann.errors import OptionError
from pycann.ge.aipp.config import AippConfig, ModelInput, bad, fp16_warnings, node_attrs
from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.ir import Graph, Node
from pycann.ops.aipp import DOMAIN, dynamic_buffer_bytes

name = "InsertAippPass"
DYNAMIC_AIPP_INPUT = "ascend_dynamic_aipp_data"  # ACL_DYNAMIC_AIPP_NAME (cann-interfaces.md §1.4)


def target_index(graph: Graph, cfg: AippConfig) -> int:
    """The graph-input index an ``aipp_op`` applies to. Raises ``OptionError``."""
    want = cfg["related_input_name"]
    if want:
        if want not in graph.inputs:
            raise bad(want, "related_input_name", f"not an input of the model; inputs: {', '.join(graph.inputs)}",
                      cfg.where)
        return graph.inputs.index(want)
    rank = int(cfg["related_input_rank"])
    if rank >= len(graph.inputs):
        raise bad(rank, "related_input_rank", f"must be an integer in [0, {len(graph.inputs) - 1}] "
                  f"(the model has {len(graph.inputs)} input(s): {', '.join(graph.inputs)})", cfg.where)
    return rank


def _rename_reads(g: Graph, old: str, new: str) -> None:
    for n in g.nodes:
        n.inputs = [new if i == old else i for i in n.inputs]
        for sub in n.subgraphs.values():
            _rename_reads(sub, old, new)
    g.outputs = [new if o == old else o for o in g.outputs]


def insert(graph: Graph, configs: list[AippConfig], layout: str) -> list[str]:
    """Insert one ``Aipp`` node per config, in place; returns one description line per node."""
    targets = [target_index(graph, c) for c in configs]
    seen: dict[int, AippConfig] = {}
    for idx, cfg in zip(targets, configs):
        if idx in seen:
            raise bad(idx, "related_input_rank", f"input {graph.inputs[idx]} already has an aipp_op "
                      f"({seen[idx].where}); one aipp_op per input", cfg.where)
        seen[idx] = cfg
    lines = []
    new_nodes: list[Node] = []
    for idx, cfg in zip(targets, configs):
        inp_name = graph.inputs[idx]
        desc = graph.descs.get(inp_name)
        if desc is None or desc.shape is None:
            raise OptionError(f"E10001: Value [?] for parameter [input {inp_name} shape] is invalid. Reason: AIPP "
                              f"needs a known 4-D input shape; set it with --input_shape ({cfg.where}).")
        attrs, src_desc = node_attrs(cfg, ModelInput(inp_name, desc.dtype, tuple(desc.shape), layout), idx)
        feat = graph.fresh_name(f"{inp_name}_aipp")
        _rename_reads(graph, inp_name, feat)
        node_inputs = [inp_name]
        if cfg.mode == "dynamic":
            pname = graph.fresh_name(DYNAMIC_AIPP_INPUT)
            graph.inputs.append(pname)
            graph.descs[pname] = TensorDesc(int(DType.UINT8), (dynamic_buffer_bytes(int(attrs["out_shape"][0])),))
            node_inputs.append(pname)
        new_nodes.append(Node("Aipp", node_inputs, [feat], attrs, name=graph.fresh_name(f"{inp_name}_huawei_aipp"),
                              domain=DOMAIN, opset=1))
        graph.descs[feat] = desc
        graph.descs[inp_name] = src_desc
        what = attrs.get("input_format", f"max {attrs.get('max_src_image_size')} bytes")
        lines.append(f"{inp_name}: {cfg.mode} {what} uint8{list(src_desc.shape or ())} -> {desc}")
    graph.nodes[:0] = new_nodes
    graph.opsets.setdefault(DOMAIN, 1)
    return lines


def aipp_manifest(graph: Graph) -> list[dict[str, Any]]:
    """What the .om manifest records per AIPP input (read by ``LoadedModel`` and ``atc --mode=6``)."""
    out = []
    for n in graph.nodes:
        if n.op_type != "Aipp" or n.domain != DOMAIN:
            continue
        a = n.attrs
        entry: dict[str, Any] = {
            "input": n.inputs[0], "input_index": graph.inputs.index(n.inputs[0]), "mode": a["aipp_mode"],
            "node": n.name, "output_layout": a["out_layout"], "output_dtype": a["out_dtype"],
            "output_shape": list(a["out_shape"]),
        }
        if a["aipp_mode"] == "dynamic":
            entry["params_input"] = n.inputs[1]
            entry["params_input_index"] = graph.inputs.index(n.inputs[1])
            entry["max_src_image_size"] = a["max_src_image_size"]
        else:
            entry["params"] = {k: v for k, v in a.items() if k not in ("aipp_mode", "out_layout", "out_dtype",
                                                                       "out_shape", "src_shape")}
        out.append(entry)
    return out


def run(graph: Graph, ctx: PassContext) -> PassResult:
    configs: list[AippConfig] = list(ctx.options.get("aipp") or [])
    if not configs:
        return PassResult(graph, False, "no --insert_op_conf")
    for cfg in configs:  # (" W: " lines are printed by atc at every --log level)
        for msg in fp16_warnings(cfg):
            ctx.log(f"[{name}] W: {msg}")
    lines = insert(graph, configs, str(ctx.options.get("input_format", "NCHW")))
    return PassResult(graph, True, f"{len(lines)} AIPP node(s): " + "; ".join(lines))


def update_ranges(graph: Graph, ranges: dict[str, list[Any]]) -> None:
    """Rewrite ``--input_shape`` ranges of AIPP inputs for their new uint8 layout (N keeps its range)."""
    for entry in aipp_manifest(graph):
        name = entry["input"]
        d = graph.descs[name]
        dims: list[Any] = [x if isinstance(x, int) else -1 for x in d.shape or ()]
        old = ranges.get(name)
        if old and entry["mode"] == "static":
            dims[0] = old[0]
        ranges[name] = dims

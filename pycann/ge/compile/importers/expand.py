"""Expand *function* ops into their defining nodes at import time.

Two sources of function bodies:

* model-local functions (``ModelProto.functions``), and
* ONNX ops defined as functions of primitive ops in their schema (``function_body``), or by
  a context-dependent function built from the node's attributes and input types (Attention,
  SoftmaxCrossEntropyLoss, RMSNormalization, Gelu, ...) — used when pycann's op table has no
  definition for the node.

The body's nodes keep the opset versions the *function* declares (``FunctionProto.opset_import``),
not the model's: pycann nodes carry their own opset, so an opset-13 body inside an opset-23 model
still gets opset-13 semantics (onnx.inliner would have to version-convert instead).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

import onnx
from onnx import defs

Supported = Callable[[str, str, int], bool]


class _FunctionSchema(Protocol):
    """``defs.OpSchema`` members that onnx's bundled stubs (``defs.pyi``) omit."""

    @property
    def has_function(self) -> bool: ...

    @property
    def has_context_dependent_function(self) -> bool: ...

    def get_context_dependent_function_with_opset_version(
        self, opset: int, node: bytes, input_types: list[bytes]
    ) -> bytes: ...


def _canon(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


class FunctionExpander:
    """Turns a NodeProto that calls a function into the renamed body nodes (or ``None``)."""

    def __init__(self, model: onnx.ModelProto, supported: Supported) -> None:
        self.model = model
        self.supported = supported
        self.local = {(_canon(f.domain), f.name): f for f in model.functions}
        self._types: dict[str, onnx.TypeProto] | None = None
        self.counter = 0

    def types(self) -> dict[str, onnx.TypeProto]:
        """Value types of the original model (onnx shape inference), for context-dependent bodies."""
        if self._types is None:
            try:
                inferred = onnx.shape_inference.infer_shapes(self.model, strict_mode=False, data_prop=True)
            except Exception:
                inferred = self.model
            g = inferred.graph
            self._types = {vi.name: vi.type for vi in list(g.input) + list(g.value_info) + list(g.output)}
            for t in g.initializer:
                tp = onnx.TypeProto()
                tp.tensor_type.elem_type = t.data_type
                for d in t.dims:
                    tp.tensor_type.shape.dim.add().dim_value = d
                self._types[t.name] = tp
        return self._types

    def expand(self, node: onnx.NodeProto, opsets: dict[str, int]) -> tuple[list[onnx.NodeProto], dict[str, int]] | None:
        domain = _canon(node.domain)
        fp = self.local.get((domain, node.op_type))
        defaults: dict[str, onnx.AttributeProto] = {}
        if fp is not None:
            defaults = {a.name: a for a in fp.attribute_proto}
        else:
            if (node.op_type == "Constant" and domain == "") or self.supported(domain, node.op_type, opsets.get(domain, 1)):
                return None
            fp = self._schema_body(node, opsets)
            if fp is None:
                return None
        fn_opsets = dict(opsets)
        fn_opsets.update({_canon(o.domain): o.version for o in fp.opset_import})
        return self._instantiate(node, fp, defaults), fn_opsets

    def _schema_body(self, node: onnx.NodeProto, opsets: dict[str, int]) -> onnx.FunctionProto | None:
        domain = _canon(node.domain)
        opset = opsets.get(domain, 1)
        try:
            schema = defs.get_schema(node.op_type, opset, domain)
        except defs.SchemaError:
            return None
        # Fill defaults so the body's attribute references resolve to this op's defaults.
        have = {a.name for a in node.attribute}
        for name, attr in schema.attributes.items():
            if name not in have and attr.default_value.type != onnx.AttributeProto.UNDEFINED:
                d = onnx.AttributeProto()
                d.CopyFrom(attr.default_value)
                d.name = name
                node.attribute.append(d)
        fschema = cast(_FunctionSchema, schema)
        if fschema.has_function:
            fp = onnx.FunctionProto()
            fp.CopyFrom(schema.function_body)
            return fp
        if fschema.has_context_dependent_function:
            tmap = self.types()
            in_types = []
            for i in node.input:
                if i and i not in tmap:
                    return None  # input types unknown: leave the node; import reports it
                in_types.append(tmap[i].SerializeToString() if i else onnx.TypeProto().SerializeToString())
            try:
                raw = fschema.get_context_dependent_function_with_opset_version(opset, node.SerializeToString(), in_types)
            except Exception:
                return None
            fp = onnx.FunctionProto()
            fp.ParseFromString(raw)
            return fp
        return None

    def _instantiate(self, node: onnx.NodeProto, fp: onnx.FunctionProto,
                     defaults: dict[str, onnx.AttributeProto]) -> list[onnx.NodeProto]:
        self.counter += 1
        prefix = f"{node.name or node.op_type}/{self.counter}/"
        rename: dict[str, str] = {}
        for i, formal in enumerate(fp.input):
            rename[formal] = node.input[i] if i < len(node.input) else ""
        for i, formal in enumerate(fp.output):
            rename[formal] = node.output[i] if i < len(node.output) else prefix + formal
        attrs = {a.name: a for a in node.attribute}
        out: list[onnx.NodeProto] = []
        for j, bn in enumerate(fp.node):
            nn = onnx.NodeProto()
            nn.CopyFrom(bn)
            del nn.input[:]
            del nn.output[:]
            nn.input.extend(rename.get(x, prefix + x) if x else "" for x in bn.input)
            for o in bn.output:
                if o and o not in rename:
                    rename[o] = prefix + o
            nn.output.extend(rename.get(o, "") if o else "" for o in bn.output)
            del nn.attribute[:]
            for a in bn.attribute:
                if a.ref_attr_name:
                    src = attrs.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                    if src is None:
                        continue
                    na = onnx.AttributeProto()
                    na.CopyFrom(src)
                    na.name = a.name
                    nn.attribute.append(na)
                elif a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                    na = onnx.AttributeProto()
                    na.CopyFrom(a)
                    for sub in ([na.g] if a.type == onnx.AttributeProto.GRAPH else list(na.graphs)):
                        _rename_free(sub, rename, prefix)
                    nn.attribute.append(na)
                else:
                    nn.attribute.append(a)
            nn.name = prefix + (bn.name or f"{bn.op_type}_{j}")
            out.append(nn)
        return out


def _rename_free(g: onnx.GraphProto, rename: dict[str, str], prefix: str) -> None:
    """Point a body subgraph's outer-scope references at the instantiated function's names."""
    local = {i.name for i in g.input} | {t.name for t in g.initializer}
    for n in g.node:
        for k, x in enumerate(n.input):
            if x and x not in local and x in rename:
                n.input[k] = rename[x]
        for a in n.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []
            for sub in subs:
                _rename_free(sub, {k: v for k, v in rename.items() if k not in local}, prefix)
        local.update(o for o in n.output if o)
    for o in g.output:
        if o.name not in local and o.name in rename:
            o.name = rename[o.name]

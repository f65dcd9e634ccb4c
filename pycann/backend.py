"""``onnx.backend.base.Backend`` over pycann's real path: import -> GE passes -> plan ->
executor, with an in-memory .om round trip (``round_trip_om=True``, the default) so the file
format is exercised by every conformance case.

    import pycann.backend as backend
    rep = backend.prepare(model)          # or backend.run_model(model, inputs)
    outputs = rep.run(inputs)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel


class PycannRep(BackendRep):
    """A prepared model: ``run(inputs)`` takes a list (model input order) or a dict by name."""

    def __init__(self, model: LoadedModel) -> None:
        self.model = model

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            return tuple(self.model.run_dict(inputs))
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        return tuple(self.model.run(list(inputs)))


class PycannBackend(Backend):
    """pycann as an ONNX backend (device ``CPU``)."""

    round_trip_om = True

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> PycannRep:
        """Compile ``model``; raises pycann's errors (ModelError, UnsupportedOpError, ShapeError)."""
        cm = compile_model(model)
        if cls.round_trip_om:
            from pycann.ge.om import dumps_om, loads_om

            om = loads_om(dumps_om(cm.graph, cm.manifest))
            return PycannRep(LoadedModel(om.graph, om.manifest))
        return PycannRep(LoadedModel.from_compiled(cm))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Sequence[np.ndarray],
        device: str = "CPU",
        outputs_info: Sequence[tuple[Any, Any]] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, ...]:
        """Run one node on ``inputs`` (numpy arrays, in the node's input order); returns its outputs.

        The node becomes a one-node model whose output types come from ``outputs_info``
        (``(numpy dtype, shape)`` per output, as onnx's backend tests pass them), else from
        onnx's shape inference, else are left for pycann's own inference (an untyped output).
        ``opset_version`` (keyword) picks the default domain's opset, default onnx's newest.
        Raises pycann's errors like ``prepare``.
        """
        from onnx import helper, shape_inference

        opset = int(kwargs.get("opset_version", onnx.defs.onnx_opset_version()))
        arrays = [np.asarray(x) for x in inputs]
        names = [n for n in node.input if n]
        if len(arrays) != len(names):
            raise ValueError(f"node {node.op_type} has {len(names)} inputs ({', '.join(names)}), {len(arrays)} arrays given")
        vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
               for n, x in zip(names, arrays)]
        out_names = [o for o in node.output if o]
        typed: dict[str, onnx.ValueInfoProto] = {}
        if outputs_info:
            for o, (dt, shape) in zip(out_names, outputs_info):
                typed[o] = helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape)
        imports = [helper.make_opsetid("", opset)]
        if node.domain not in ("", "ai.onnx"):
            imports.append(helper.make_opsetid(node.domain, int(kwargs.get("domain_version", 1))))
        probe = helper.make_model(helper.make_graph([node], "run_node", vis, [
            helper.make_empty_tensor_value_info(o) for o in out_names]), opset_imports=imports)
        try:
            inferred = shape_inference.infer_shapes(probe)
            for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
                if vi.name in out_names and vi.name not in typed and vi.type.tensor_type.elem_type:
                    typed[vi.name] = vi
        except Exception:  # noqa: BLE001 - onnx's inference is a hint; pycann infers on its own
            pass
        outs = [typed.get(o) or helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in out_names]
        model = helper.make_model(helper.make_graph([node], "run_node", vis, outs), opset_imports=imports)
        return cls.prepare(model, device).run(arrays)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper().startswith("CPU")


prepare = PycannBackend.prepare
run_model = PycannBackend.run_model
run_node = PycannBackend.run_node
supports_device = PycannBackend.supports_device

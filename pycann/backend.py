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

from pycann.ge.compiler import compile_model
from pycann.ge.model import LoadedModel


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
        """Run one node on ``inputs`` (numpy arrays, in the node's input order)."""
        from onnx import helper

        opset = int(kwargs.get("opset_version", onnx.defs.onnx_opset_version()))
        names = [n for n in node.input if n]
        vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype), np.asarray(x).shape)
               for n, x in zip(names, inputs)]
        outs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
        g = helper.make_graph([node], "run_node", vis, outs)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid(node.domain or "", opset)])
        rep = cls.prepare(m, device)
        return rep.run([np.asarray(x) for x in inputs])

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper().startswith("CPU")


prepare = PycannBackend.prepare
run_model = PycannBackend.run_model
run_node = PycannBackend.run_node
supports_device = PycannBackend.supports_device
